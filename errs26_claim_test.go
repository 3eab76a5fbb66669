package ext4io_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
)

// TestClaimThroughWrapper: a writable Volume on an image file wrapped in
// an errordev.Device (a device that says what it wraps with Unwrap)
// claims the file, so that a second writable open of the same image,
// through OpenImage or through another wrapper, fails with ErrBusy, and
// after Close the image can be opened again.
func TestClaimThroughWrapper(t *testing.T) {
	img := formatImage(t, 16<<20, ext4io.FormatOptions{})
	fd, err := blockdev.OpenFile(img, false)
	require.NoError(t, err)
	defer fd.Close()
	v, err := ext4io.Open(errordev.New(fd, nil), ext4io.Options{Writable: true})
	require.NoError(t, err)
	_, err = ext4io.OpenImage(img, ext4io.Options{Writable: true})
	require.ErrorIs(t, err, blockdev.ErrBusy, "OpenImage beside a writer on a wrapped device")
	fd2, err := blockdev.OpenFile(img, false)
	require.NoError(t, err)
	defer fd2.Close()
	_, err = ext4io.Open(errordev.New(fd2, nil), ext4io.Options{Writable: true})
	require.ErrorIs(t, err, blockdev.ErrBusy, "a second wrapped writer")
	require.ErrorContains(t, err, img, "the error names the image")
	require.NoError(t, v.Close())
	v2, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	require.NoError(t, v2.Close())
}
