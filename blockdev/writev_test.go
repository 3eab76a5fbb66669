package blockdev_test

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestWriteVAt writes buffers of mixed sizes, more than one pwritev takes
// (IOV_MAX 1024), with File.WriteVAt and with the WriteAt fallback of
// blockdev.WriteVAt, and reads back their concatenation; a write past the
// end and one after Close fail like WriteAt's.
func TestWriteVAt(t *testing.T) {
	const size = 4 << 20
	var bufs [][]byte
	total := 0
	for i := range 1500 {
		b := bytes.Repeat([]byte{byte(i*7 + 1)}, 1+i%700)
		bufs = append(bufs, b)
		total += len(b)
	}
	want := bytes.Join(bufs, nil)
	f, err := blockdev.CreateFile(filepath.Join(t.TempDir(), "img"), size)
	require.NoError(t, err)
	for _, dev := range []blockdev.Device{f, memdev.New(size)} {
		_, vectored := dev.(blockdev.VectorWriter)
		n, err := blockdev.WriteVAt(dev, bufs, 4097)
		require.NoError(t, err, "vectored %v", vectored)
		assert.Equal(t, total, n)
		got := make([]byte, total+2)
		_, err = dev.ReadAt(got, 4096)
		require.NoError(t, err)
		assert.Zero(t, got[0], "byte before the write")
		assert.True(t, bytes.Equal(want, got[1:total+1]), "vectored %v: data read back differs", vectored)
		assert.Zero(t, got[total+1], "byte after the write")
	}
	_, err = f.WriteVAt([][]byte{make([]byte, 4096), make([]byte, 4096)}, size-4096)
	assert.ErrorIs(t, err, blockdev.ErrInvalid)
	require.NoError(t, f.Close())
	_, err = f.WriteVAt(bufs[:2], 0)
	assert.ErrorIs(t, err, blockdev.ErrClosed)
}
