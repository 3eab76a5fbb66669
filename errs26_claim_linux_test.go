package ext4io_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestMountedImageRefusedThroughWrapper: while Linux has an image
// loop-mounted, a writable open of the image file under a wrapper
// (errordev.Device) fails with ErrBusy naming the mount point, as it
// does without one.
func TestMountedImageRefusedThroughWrapper(t *testing.T) {
	img := filepath.Join(t.TempDir(), "m.img")
	e2fs.Mkfs(t, img, "16M")
	dir := e2fs.Mount(t, img, false)
	fd, err := blockdev.OpenFile(img, false)
	require.NoError(t, err)
	_, err = ext4io.Open(errordev.New(fd, nil), ext4io.Options{Writable: true})
	require.ErrorIs(t, err, ext4io.ErrBusy)
	require.ErrorContains(t, err, dir)
	require.NoError(t, fd.Close())
	e2fs.Unmount(t, dir)
	e2fs.Fsck(t, img)
}
