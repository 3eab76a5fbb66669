package bench

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/ext4io/ext4io/blockdev"
)

// TestFileHolesUnsupported: on a host filesystem whose lseek does not
// know SEEK_HOLE (EINVAL) fileHoles reports no holes, so page-batch
// workloads run (unfilled) instead of failing with "finding the image's
// holes"; other errors still fail.
func TestFileHolesUnsupported(t *testing.T) {
	img := filepath.Join(t.TempDir(), "img")
	d, err := blockdev.CreateFile(img, 8<<20)
	require.NoError(t, err)
	require.NoError(t, d.Close())
	holes, err := fileHoles(img, 0, 8<<20)
	require.NoError(t, err)
	assert.NotEmpty(t, holes, "a new sparse image has holes")

	old := seek
	defer func() { seek = old }()
	seek = func(int, int64, int) (int64, error) { return 0, unix.EINVAL }
	holes, err = fileHoles(img, 0, 8<<20)
	require.NoError(t, err)
	assert.Empty(t, holes)
	seek = func(int, int64, int) (int64, error) { return 0, unix.EIO }
	_, err = fileHoles(img, 0, 8<<20)
	require.ErrorIs(t, err, unix.EIO)
}
