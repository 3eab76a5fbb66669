package ext4io_test

import (
	"bytes"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPartialBlockWritesReadZero writes pieces of blocks into holes one
// after another (their whole-block images come from a reused buffer) and
// checks that the rest of each block reads as zeroes, not as an earlier
// write's bytes.
func TestPartialBlockWritesReadZero(t *testing.T) {
	t.Parallel()
	dev := memdev.New(32 << 20)
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{}))
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, PageCacheBytes: -1})
	require.NoError(t, err)
	const bs = 4096
	full := bytes.Repeat([]byte{'A'}, 3*bs-100)
	f, err := v.Create("/full")
	require.NoError(t, err)
	_, err = f.WriteAt(full, 50) // three blocks, neither end aligned
	require.NoError(t, err)
	require.NoError(t, f.Close())
	for i, w := range []struct{ off, n int64 }{{100, 10}, {0, 5}, {bs + 4000, 96}, {2 * bs, bs - 1}} {
		f, err := v.Create("/part")
		require.NoError(t, err)
		p := bytes.Repeat([]byte{'b'}, int(w.n))
		_, err = f.WriteAt(p, w.off)
		require.NoError(t, err)
		end := (w.off + w.n + bs - 1) / bs * bs
		require.NoError(t, f.Truncate(end))
		got := make([]byte, end)
		_, err = f.ReadAt(got, 0)
		require.NoError(t, err)
		want := make([]byte, end)
		copy(want[w.off:], p)
		assert.True(t, bytes.Equal(want, got), "write %d: %d bytes at %d", i, w.n, w.off)
		require.NoError(t, f.Close())
		require.NoError(t, v.Remove("/part"))
		f, err = v.Create("/full2")
		require.NoError(t, err)
		_, err = f.WriteAt(full, 50)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		require.NoError(t, v.Remove("/full2"))
	}
	b, err := v.ReadFile("/full")
	require.NoError(t, err)
	assert.True(t, bytes.Equal(append(make([]byte, 50), full...), b))
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, dev)
}
