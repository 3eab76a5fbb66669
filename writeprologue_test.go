package ext4io_test

import (
	"errors"
	"io/fs"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/ext4iotest"
)

// TestWriteAtPrologue checks the refusals WriteAt makes before it maps
// anything, on buffered and direct Files: ranges past the largest file
// (2^32-1 blocks), misaligned direct writes, negative offsets and
// read-only Files fail with the documented errors and change nothing,
// while a write of the last block a file can map succeeds and the image
// stays clean.
func TestWriteAtPrologue(t *testing.T) {
	img := formatImage(t, 32<<20, ext4io.FormatOptions{})
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	f, err := v.Create("f")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	const lim = (1<<32 - 1) * 4096 // the largest file with 4 KiB blocks
	buf := make([]byte, 8192)
	for _, flag := range []int{os.O_RDWR, os.O_RDWR | ext4io.O_DIRECT} {
		f, err := v.OpenFile("f", flag, 0)
		require.NoError(t, err)
		for _, c := range []struct {
			name string
			p    []byte
			off  int64
			want error
		}{
			{"past the largest file", buf[:4096], lim, ext4io.ErrInvalid},
			{"ending past the largest file", buf, lim - 4096, ext4io.ErrInvalid},
			{"far past the largest file", buf[:4096], 1 << 62, ext4io.ErrInvalid},
			{"negative offset", buf[:4096], -4096, ext4io.ErrInvalid},
		} {
			n, err := f.WriteAt(c.p, c.off)
			assert.ErrorIs(t, err, c.want, "flag %#x: %s", flag, c.name)
			var pe *fs.PathError
			if assert.True(t, errors.As(err, &pe), "flag %#x: %s: %v is no *fs.PathError", flag, c.name, err) {
				assert.Equal(t, "f", pe.Path)
			}
			assert.Zero(t, n, "flag %#x: %s", flag, c.name)
		}
		if flag&ext4io.O_DIRECT != 0 {
			_, err := f.WriteAt(buf[:100], 0)
			assert.ErrorIs(t, err, ext4io.ErrInvalid, "misaligned direct write")
			_, err = f.WriteAt(buf[:4096], 100) // the device's logical block is 512 bytes
			assert.ErrorIs(t, err, ext4io.ErrInvalid, "direct write at a misaligned offset")
		}
		st, err := f.Stat()
		require.NoError(t, err)
		assert.Zero(t, st.Size(), "flag %#x: a refused write changed the size", flag)
		require.NoError(t, f.Close())
	}

	ro, err := v.OpenFile("f", os.O_RDONLY, 0)
	require.NoError(t, err)
	_, err = ro.WriteAt(buf[:4096], 0)
	assert.ErrorIs(t, err, ext4io.ErrBadFile, "write to a read-only File")
	require.NoError(t, ro.Close())

	// The last block a file can map is writable, directly and buffered.
	for i, flag := range []int{os.O_RDWR | ext4io.O_DIRECT, os.O_RDWR} {
		f, err := v.OpenFile("f", flag, 0)
		require.NoError(t, err)
		off := int64(lim - 4096*(1+i))
		n, err := f.WriteAt(buf[:4096], off)
		require.NoError(t, err, "flag %#x", flag)
		assert.Equal(t, 4096, n)
		require.NoError(t, f.Close())
	}
	st, err := v.Stat("f")
	require.NoError(t, err)
	assert.Equal(t, int64(lim), st.Size())
	require.NoError(t, v.Close())
	ext4iotest.Fsck(t, img)
}
