//go:build unix

package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSrcFile: openSource reads a host file through its descriptor, and
// same tells the file lstat'ed from one that replaced it, or from one
// that is not a regular file.
func TestSrcFile(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	require.NoError(t, os.WriteFile(a, []byte("hello, world"), 0o644))
	require.NoError(t, os.WriteFile(b, []byte("other"), 0o644))
	fa, err := os.Lstat(a)
	require.NoError(t, err)
	fb, err := os.Lstat(b)
	require.NoError(t, err)

	f, err := openSource(a)
	require.NoError(t, err)
	size, same, err := f.same(fa)
	require.NoError(t, err)
	assert.True(t, same)
	assert.EqualValues(t, 12, size)
	_, same, err = f.same(fb)
	require.NoError(t, err)
	assert.False(t, same, "another file")
	buf := make([]byte, 8)
	n, err := f.ReadAt(buf, 7)
	assert.Equal(t, 5, n)
	assert.ErrorIs(t, err, io.EOF)
	assert.Equal(t, "world", string(buf[:n]))
	require.NoError(t, f.Close())

	d, err := os.Lstat(dir)
	require.NoError(t, err)
	g, err := openSource(dir)
	require.NoError(t, err)
	_, same, err = g.same(d)
	require.NoError(t, err)
	assert.False(t, same, "a directory")
	require.NoError(t, g.Close())

	require.NoError(t, os.Symlink(a, filepath.Join(dir, "l")))
	_, err = openSource(filepath.Join(dir, "l"))
	var pe *os.PathError
	assert.ErrorAs(t, err, &pe, "a final symlink is not followed")
}
