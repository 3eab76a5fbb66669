package ext4io_test

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestMountedImageRefused: while Linux has an image loop-mounted, every
// writable open fails with ErrBusy naming the mount point, through the
// image file (any backend, Replay and Format included) and through the
// loop device itself (O_EXCL); read-only opens work. After the unmount
// the image opens writable again and e2fsck finds it clean.
func TestMountedImageRefused(t *testing.T) {
	img := filepath.Join(t.TempDir(), "m.img")
	e2fs.Mkfs(t, img, "16M")
	dir := e2fs.Mount(t, img, false)

	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ext4io.ErrBusy) || !strings.Contains(err.Error(), dir) {
			t.Errorf("%s of a mounted image: %v, want ErrBusy naming %s", what, err, dir)
		}
	}
	_, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	check("writable OpenImage", err)
	_, err = ext4io.OpenImage(img, ext4io.Options{Replay: true})
	check("OpenImage with Replay", err)
	for name, open := range map[string]func() (blockdev.Device, error){
		"mmap":   func() (blockdev.Device, error) { return blockdev.OpenMmap(img, false) },
		"direct": func() (blockdev.Device, error) { return blockdev.OpenDirect(img, false) },
		"file":   func() (blockdev.Device, error) { return blockdev.OpenFile(img, false) },
	} {
		dev, err := open()
		if err != nil {
			t.Logf("%s: %v", name, err)
			continue
		}
		_, err = ext4io.Open(dev, ext4io.Options{Writable: true})
		check(name+" writable Open", err)
		check(name+" Format", ext4io.Format(dev, ext4io.FormatOptions{}))
		dev.Close()
	}
	v, err := ext4io.OpenImage(img, ext4io.Options{NoRecovery: true})
	if err != nil {
		t.Errorf("read-only open of a mounted image: %v", err)
	} else {
		v.Close()
	}
	// The loop device: O_EXCL fails while it is mounted.
	if out, err := exec.Command("findmnt", "-n", "-o", "SOURCE", dir).Output(); err == nil {
		loop := strings.TrimSpace(string(out))
		_, err := ext4io.OpenImage(loop, ext4io.Options{Writable: true})
		check("writable open of "+loop, err)
	}

	e2fs.Unmount(t, dir)
	v, err = ext4io.OpenImage(img, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatalf("writable open after unmount: %v", err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	e2fs.Fsck(t, img)
}
