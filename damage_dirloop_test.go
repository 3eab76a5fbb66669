package ext4io_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/ext4iotest"
)

// loopImage makes an image whose directory D holds an entry "x" naming D
// itself and whose subdirectory D/E holds "up" naming D (debugfs link),
// as a hostile image may. It returns a function copying it afresh.
func loopImage(t *testing.T) func(t *testing.T) string {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	require.NoError(t, os.MkdirAll(filepath.Join(src, "D", "E"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "D", "f"), []byte("f"), 0o644))
	img := filepath.Join(dir, "img")
	ext4iotest.Mkfs(t, img, "8M", "-d", src, "-b", "1024")
	ext4iotest.Debugfs(t, img, true, "link /D /D/x")
	ext4iotest.Debugfs(t, img, true, "link /D /D/E/up")
	b, err := os.ReadFile(img)
	require.NoError(t, err)
	return func(t *testing.T) string {
		c := filepath.Join(t.TempDir(), "img")
		require.NoError(t, os.WriteFile(c, b, 0o644))
		return c
	}
}

// within runs fn and fails the test if it does not return in 10 s.
func within(t *testing.T, what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s hangs", what)
		return nil
	}
}

// TestEntryNamingOwnDirectory: removing or renaming an entry that names
// its own directory locked the directory twice and hung (Rmdir, Remove,
// Rename over it). Such an entry is corruption (Linux refuses the lookup:
// "would have caused loop").
func TestEntryNamingOwnDirectory(t *testing.T) {
	fresh := loopImage(t)
	for _, op := range []struct {
		name string
		fn   func(v *ext4io.Volume) error
	}{
		{"Rmdir", func(v *ext4io.Volume) error { return v.Rmdir("D/x") }},
		{"Remove", func(v *ext4io.Volume) error { return v.Remove("D/x") }},
		{"Rename", func(v *ext4io.Volume) error { return v.Rename("D/x", "D/y") }},
		{"RenameOver", func(v *ext4io.Volume) error { return v.Rename("D/f", "D/x") }},
		{"Stat", func(v *ext4io.Volume) error { _, err := v.Stat("D/x"); return err }},
	} {
		t.Run(op.name, func(t *testing.T) {
			v, err := ext4io.OpenImage(fresh(t), ext4io.Options{Writable: true})
			require.NoError(t, err)
			err = within(t, op.name, func() error { return op.fn(v) })
			assert.ErrorIs(t, err, ext4io.ErrCorrupt)
			within(t, "Close", v.Close)
		})
	}
}

// TestRemoveAllDirectoryLoop: RemoveAll of a directory that lies inside
// itself (D/E/up names D) recursed for ever, down D/E/up/E/up/...; it
// fails with ErrCorrupt, and the volume closes.
func TestRemoveAllDirectoryLoop(t *testing.T) {
	fresh := loopImage(t)
	v, err := ext4io.OpenImage(fresh(t), ext4io.Options{Writable: true})
	require.NoError(t, err)
	err = within(t, "RemoveAll", func() error { return v.RemoveAll("D/E") })
	assert.ErrorIs(t, err, ext4io.ErrCorrupt)
	within(t, "Close", v.Close)
}

// TestEntryNamingOrphanFile: a directory entry naming the orphan file's
// inode (orphan_file puts it past the reserved inodes) is corruption, as
// Linux's iget refuses it ("illegal inode"); it opened for writing, and a
// write through it broke the orphan file.
func TestEntryNamingOrphanFile(t *testing.T) {
	img := filepath.Join(t.TempDir(), "img")
	ext4iotest.Mkfs(t, img, "16M", "-b", "1024", "-O", "orphan_file")
	v, err := ext4io.OpenImage(img, ext4io.Options{})
	require.NoError(t, err)
	sb := v.Superblock()
	ino := sb.OrphanFileInum
	require.GreaterOrEqual(t, ino, sb.FirstInode())
	require.NoError(t, v.Close())
	ext4iotest.Debugfs(t, img, true, fmt.Sprintf("ln <%d> /x", ino))
	v, err = ext4io.OpenImage(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	_, err = v.OpenFile("x", os.O_RDWR, 0)
	assert.ErrorIs(t, err, ext4io.ErrCorrupt)
	within(t, "Close", v.Close)
}
