package ext4io_test

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/stretchr/testify/require"
)

// TestStoppedVolumeRefusesChanges: once an I/O error stopped a journaled
// volume committing (a failed flush aborts the journal), every namespace,
// attribute and xattr change fails with ErrReadOnly (EROFS), as writes
// already did and as Linux's errors=remount-ro does, instead of returning
// nil for a change that can never reach the device. After Close the image
// holds none of them and is e2fsck-clean.
func TestStoppedVolumeRefusesChanges(t *testing.T) {
	mem := memdev.New(32 << 20)
	require.NoError(t, ext4io.Format(mem, ext4io.FormatOptions{}))
	tog := errordev.NewToggle(errordev.Kinds(errordev.Always(), errordev.Flush))
	v, err := ext4io.Open(errordev.New(mem, tog), ext4io.Options{Writable: true, CommitInterval: -1})
	require.NoError(t, err)
	require.NoError(t, v.WriteFile("a", []byte("data"), 0o644))
	require.NoError(t, v.Mkdir("d", 0o755))
	f, err := v.Open("a")
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, v.Sync())

	require.NoError(t, v.Chmod("a", 0o600)) // pending when the commit fails
	tog.Enable()
	require.ErrorIs(t, v.Sync(), ext4io.ErrIO)
	tog.Disable()

	now := time.Now()
	changes := map[string]func() error{
		"Mkdir":      func() error { return v.Mkdir("new-dir", 0o755) },
		"Create":     func() error { _, err := v.Create("new-file"); return err },
		"OpenFile":   func() error { _, err := v.OpenFile("d/new", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644); return err },
		"WriteFile":  func() error { return v.WriteFile("new-wf", nil, 0o644) },
		"Symlink":    func() error { return v.Symlink("a", "new-link") },
		"Link":       func() error { return v.Link("a", "new-hard") },
		"Mknod":      func() error { return v.Mknod("new-fifo", fs.ModeNamedPipe|0o644, 0) },
		"Rename":     func() error { return v.Rename("a", "new-name") },
		"Remove":     func() error { return v.Remove("a") },
		"Rmdir":      func() error { return v.Rmdir("d") },
		"Chmod":      func() error { return v.Chmod("a", 0o640) },
		"Chown":      func() error { return v.Chown("a", 7, 7) },
		"Chtimes":    func() error { return v.Chtimes("a", now, now) },
		"Setxattr":   func() error { return v.Setxattr("a", "user.k", []byte("v"), 0) },
		"File.Chmod": func() error { return f.Chmod(0o604) },
	}
	for name, change := range changes {
		err := change()
		var pe *fs.PathError
		var le *os.LinkError
		if !errors.Is(err, ext4io.ErrReadOnly) || !errors.Is(err, syscall.EROFS) || !errors.As(err, &pe) && !errors.As(err, &le) {
			t.Errorf("%s after the volume stopped = %v; want an *fs.PathError or *os.LinkError matching ErrReadOnly and EROFS", name, err)
		}
	}
	require.NoError(t, f.Close())
	require.Error(t, v.Close(), "Close of a stopped volume")

	img := ext4iotest.ImageOf(t, mem)
	ext4iotest.Fsck(t, img)
	ro, err := ext4io.OpenImage(img, ext4io.Options{})
	require.NoError(t, err)
	defer ro.Close()
	ents, err := ro.ReadDir("/")
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	require.ElementsMatch(t, []string{"a", "d", "lost+found"}, names)
}
