package ext4io_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestCreateExistingInHtree creates names that exist already in an htree
// directory of many leaves (O_CREATE looks the name up and finds room for
// it in one pass over the name's leaf): each Create opens and truncates
// the file there, no second entry appears, and e2fsck finds the directory
// clean. New names added between the reopened ones still go where the
// htree's hash order wants them.
func TestCreateExistingInHtree(t *testing.T) {
	t.Parallel()
	img := formatImage(t, 64<<20, ext4io.FormatOptions{BlockSize: 1024, InodeRatio: 4096})
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	require.NoError(t, v.Mkdir("d", 0o755))
	const n = 1500 // about 60 leaves of 1 KiB
	inos := map[string]uint32{}
	for i := range n {
		name := fmt.Sprintf("d/file-%05d", i)
		f, err := v.Create(name)
		require.NoError(t, err)
		_, err = f.WriteAt([]byte("old"), 0)
		require.NoError(t, err)
		inos[name] = f.Ino()
		require.NoError(t, f.Close())
	}
	for i := 0; i < n; i += 7 {
		name := fmt.Sprintf("d/file-%05d", i)
		f, err := v.Create(name)
		require.NoError(t, err, name)
		assert.Equal(t, inos[name], f.Ino(), "%s: Create made a new inode instead of opening the old one", name)
		assert.Zero(t, f.Size(), "%s: not truncated", name)
		require.NoError(t, f.Close())
		f, err = v.OpenFile(fmt.Sprintf("d/new-%05d", i), os.O_RDWR|os.O_CREATE, 0o600)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	ents, err := v.ReadDir("d")
	require.NoError(t, err)
	assert.Len(t, ents, n+(n+6)/7)
	require.NoError(t, v.Close())
	e2fs.Fsck(t, img)
}

// TestCreateOpenFallbacks covers the O_CREATE cases that leave the
// one-pass lookup for the general walk: a directory, a dangling symlink
// (its target is created), a symlink to a file (opened), a missing
// parent, a parent that is a file, and "..".
func TestCreateOpenFallbacks(t *testing.T) {
	t.Parallel()
	img := formatImage(t, 32<<20, ext4io.FormatOptions{})
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	require.NoError(t, v.Mkdir("d", 0o755))
	require.NoError(t, v.Symlink("target", "d/dangling"))
	require.NoError(t, v.WriteFile("d/file", []byte("x"), 0o644))
	require.NoError(t, v.Symlink("file", "d/tofile"))

	_, err = v.Create("d")
	assert.ErrorIs(t, err, ext4io.ErrIsDir)
	_, err = v.Create("d/..")
	assert.ErrorIs(t, err, ext4io.ErrIsDir)
	_, err = v.Create("nodir/x")
	assert.ErrorIs(t, err, ext4io.ErrNotFound)
	_, err = v.Create("d/file/x")
	assert.ErrorIs(t, err, ext4io.ErrNotDir)

	f, err := v.OpenFile("d/dangling", os.O_RDWR|os.O_CREATE, 0o600)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	fi, err := v.Lstat("d/target")
	require.NoError(t, err)
	assert.True(t, fi.Mode().IsRegular())

	f, err = v.OpenFile("d/tofile", os.O_RDWR|os.O_CREATE, 0o600)
	require.NoError(t, err)
	assert.Equal(t, int64(1), f.Size())
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
	e2fs.Fsck(t, img)
}
