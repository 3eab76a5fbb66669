//go:build unix

package ext4io_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
)

// TestSequentialDirectWriteAllocs bounds the heap allocations of a 1 MiB
// direct write that allocates its blocks at the end of a file (the
// bench's seqwrite-1m): the allocator's bitmap and descriptor updates,
// the descriptor and inode checksums, the iomap options and the inode's
// extent root, and the allocation goal's lookup (which leaves the mapper's
// front alone) allocate nothing per write. The device
// drops the data writes; the metadata stays real and the image passes
// e2fsck afterwards.
func TestSequentialDirectWriteAllocs(t *testing.T) {
	const (
		size   = 1 << 20
		writes = 64
	)
	mem := memdev.New(256 << 20)
	dev := &dataNullDev{Device: mem, drop: size}
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{}))
	// No background commits or write-back: the writes' own allocations
	// are the only ones counted.
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, CommitInterval: -1, WritebackAge: -1})
	require.NoError(t, err)
	f, err := v.OpenFile("seq", os.O_RDWR|os.O_CREATE|ext4io.O_DIRECT, 0o644)
	require.NoError(t, err)
	buf := make([]byte, size)
	var pos int64
	write := func() {
		_, err := f.WriteAt(buf, pos)
		require.NoError(t, err)
		pos += size
	}
	for range 4 {
		write() // the group's first update, the first window
	}
	allocs := testing.AllocsPerRun(writes, write)
	assert.Zero(t, allocs, "heap allocations per allocating 1 MiB direct write")
	assert.Equal(t, int64(4+writes+1), dev.dropped.Load(), "data writes that reached the device")

	st, err := f.Stat()
	require.NoError(t, err)
	assert.Equal(t, pos, st.Size())
	exts := requireRunsMerged(t, f)
	var blocks uint64
	for _, e := range exts {
		blocks += uint64(e.Length)
	}
	assert.Equal(t, uint64(pos)/uint64(v.BlockSize()), blocks, "blocks mapped")
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, mem)
}
