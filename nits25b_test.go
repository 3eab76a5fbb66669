package ext4io_test

import (
	"io/fs"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestLinkEmptyPath checks an empty old or new name fails as Linux's
// link(2) fails for an empty path: ENOENT, not EPERM for the root.
func TestLinkEmptyPath(t *testing.T) {
	t.Parallel()
	dev := memdev.New(32 << 20)
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{}))
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	require.NoError(t, err)
	defer v.Close()
	require.NoError(t, v.WriteFile("/f", []byte("x"), 0o644))
	assert.ErrorIs(t, v.Link("", "/g"), fs.ErrNotExist)
	assert.ErrorIs(t, v.Link("/f", ""), fs.ErrNotExist)
	_, err = v.Stat("/g")
	assert.ErrorIs(t, err, fs.ErrNotExist)
}
