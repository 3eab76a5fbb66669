package ext4io_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/ext4iotest"
)

// TestHostileDirLinkRemovalsDeadlock: in loopImage, D/E/up names D (a
// directory hard link). Rmdir("D/E") locks D, then E; Rmdir("D/E/up")
// locked E, then D: run together they deadlocked. An entry naming a
// directory whose ".." names another directory is corruption, so the
// second removal fails before it locks D, and neither hangs.
func TestHostileDirLinkRemovalsDeadlock(t *testing.T) {
	fresh := loopImage(t)
	v, err := ext4io.OpenImage(fresh(t), ext4io.Options{Writable: true})
	require.NoError(t, err)
	ops := []func() error{
		func() error { return v.Rmdir("D/E") },
		func() error { return v.Rmdir("D/E/up") },
		func() error { return v.Remove("D/E/up") },
		func() error {
			if err := v.Rename("D/E/up", "D/E/up2"); err != nil {
				return err
			}
			return v.Rename("D/E/up2", "D/E/up")
		},
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for _, op := range ops {
			wg.Go(func() {
				for range 2000 {
					_ = op() // errors checked below, once no op runs
				}
			})
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("concurrent removals through a directory hard link hang (deadlock)")
	}
	// The link itself is refused, whatever the order of the lookups.
	_, err = v.Stat("D/E/up")
	assert.ErrorIs(t, err, ext4io.ErrCorrupt)
	err = v.Rmdir("D/E/up")
	assert.ErrorIs(t, err, ext4io.ErrCorrupt)
	// The directory's own name still works.
	fi, err := v.Stat("D")
	require.NoError(t, err)
	assert.True(t, fi.IsDir())
	fi, err = v.Stat("D/E")
	require.NoError(t, err)
	assert.True(t, fi.IsDir())
	// The corruption met in a removal stopped the volume (doc.go): later
	// changes fail with ErrReadOnly rather than change what never commits.
	require.ErrorIs(t, v.Rmdir("D/E"), ext4io.ErrReadOnly)
	within(t, "Close", v.Close) // reports the corruption met

}

// TestHostileDirNoDotDot: a directory whose ".." names an inode no entry
// may name (the resize inode) keeps its first name (the one a walk from
// the root finds first), as Linux keeps the first alias: its files read.
// A second name of it (D/E/up) is still refused, and removals through it
// neither hang nor succeed.
func TestHostileDirNoDotDot(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	require.NoError(t, os.MkdirAll(filepath.Join(src, "D", "E"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "D", "f"), []byte("f"), 0o644))
	img := filepath.Join(dir, "img")
	ext4iotest.Mkfs(t, img, "8M", "-d", src, "-b", "1024")
	ext4iotest.Debugfs(t, img, true, "link /D /D/E/up")
	editDirBlock(t, img, "D", func(b []byte) {
		require.Equal(t, "..", string(b[12+8:12+10]))
		binary.LittleEndian.PutUint32(b[12:], 7)
	})
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	b, err := v.ReadFile("D/f")
	require.NoError(t, err, "D keeps its first name")
	assert.Equal(t, "f", string(b))
	_, err = v.Stat("D/E/up")
	assert.ErrorIs(t, err, ext4io.ErrCorrupt)
	err = within(t, "Rmdir", func() error { return v.Rmdir("D/E/up") })
	assert.ErrorIs(t, err, ext4io.ErrCorrupt)
	within(t, "Close", v.Close)
}
