package bench

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestWindowVectorWriter: a window over an image file passes
// blockdev.VectorWriter through (the engine's page-cache write-back uses
// it), offset by the window and counted as one write; a window over a
// device without it does not claim it, and bounds are checked.
func TestWindowVectorWriter(t *testing.T) {
	_, plain := newWindow(memdev.New(1<<20), 0, 1<<20)
	_, ok := plain.(blockdev.VectorWriter)
	assert.False(t, ok, "window over memdev claims vectored writes")

	base, err := blockdev.CreateFile(filepath.Join(t.TempDir(), "img"), 1<<20)
	require.NoError(t, err)
	defer base.Close()
	w, d := newWindow(base, 8192, 16384)
	vw, ok := d.(blockdev.VectorWriter)
	require.True(t, ok, "window over a file hides vectored writes")
	n, err := vw.WriteVAt([][]byte{{1, 2}, {3}, {4, 5, 6}}, 100)
	require.NoError(t, err)
	assert.Equal(t, 6, n)
	got := make([]byte, 6)
	_, err = base.ReadAt(got, 8192+100)
	require.NoError(t, err)
	assert.Equal(t, []byte{1, 2, 3, 4, 5, 6}, got)
	s := w.c.snap()
	assert.Equal(t, uint64(1), s.Writes)
	assert.Equal(t, uint64(6), s.WriteBytes)
	_, err = vw.WriteVAt([][]byte{bytes.Repeat([]byte{1}, 4096), make([]byte, 1)}, 16384-4096)
	assert.ErrorIs(t, err, blockdev.ErrInvalid)
}
