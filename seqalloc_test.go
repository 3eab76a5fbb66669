package ext4io_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// requireRunsMerged checks that f's extents are in logical order without
// gaps and that no two neighbours could have been one extent: contiguous
// both logically and physically, of one kind, and short enough together
// for one initialized extent (32768 blocks). A file grown by appends then
// has one extent per contiguous run of blocks.
func requireRunsMerged(t *testing.T, f *ext4io.File) []ext4io.FileExtent {
	t.Helper()
	exts, err := f.Extents()
	require.NoError(t, err)
	for i := 1; i < len(exts); i++ {
		a, b := exts[i-1], exts[i]
		require.Equal(t, a.Logical+a.Length, b.Logical, "extent %d does not follow %d", i, i-1)
		mergeable := a.Physical+uint64(a.Length) == b.Physical && a.Unwritten == b.Unwritten &&
			a.Length+b.Length <= 32768
		assert.False(t, mergeable, "extents %d and %d (%+v, %+v) are one contiguous run", i-1, i, a, b)
	}
	return exts
}

// TestSequentialWritesReuseTruncatedBlocks writes a file sequentially
// with 1 MiB direct writes and then 4 KiB buffered writes, truncating and
// syncing between passes as the bench's sequential workloads do. Each
// pass keeps one extent per contiguous run, and a pass after a truncate
// starts at the blocks the previous pass freed instead of moving on
// through the device.
func TestSequentialWritesReuseTruncatedBlocks(t *testing.T) {
	img := formatImage(t, 256<<20, ext4io.FormatOptions{NoDiscard: true})
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	defer func() {
		if v != nil {
			v.Close()
		}
	}()
	// Held open throughout, as the bench holds its file: the inode (and
	// its preallocation window) stays in memory between passes.
	hold, err := v.Create("/seq.dat")
	require.NoError(t, err)
	defer hold.Close()

	const size = 25 << 20 // not a multiple of the 3 MiB a window refill covers: a window is left
	passes := []struct {
		name  string
		flags int
		io    int
	}{
		{"direct 1 MiB", os.O_RDWR | ext4io.O_DIRECT, 1 << 20},
		{"direct 1 MiB again", os.O_RDWR | ext4io.O_DIRECT, 1 << 20},
		{"buffered 4 KiB", os.O_RDWR, 4096},
		{"buffered 4 KiB again", os.O_RDWR, 4096},
	}
	var first uint64
	for i, p := range passes {
		f, err := v.OpenFile("/seq.dat", p.flags, 0)
		require.NoError(t, err, p.name)
		buf := make([]byte, p.io)
		for j := range buf {
			buf[j] = byte(i + j)
		}
		for off := int64(0); off < size; off += int64(len(buf)) {
			_, err := f.WriteAt(buf, off)
			require.NoError(t, err, p.name)
		}
		require.NoError(t, f.Sync(), p.name)
		exts := requireRunsMerged(t, f)
		require.NotEmpty(t, exts, p.name)
		if i == 0 {
			first = exts[0].Physical
		} else {
			assert.Equal(t, first, exts[0].Physical, "%s: first block after a truncate", p.name)
		}
		require.NoError(t, f.Truncate(0), p.name)
		require.NoError(t, f.Sync(), p.name)
		require.NoError(t, f.Close(), p.name)
	}
	require.NoError(t, hold.Close())
	require.NoError(t, v.Close())
	v = nil
	e2fs.Fsck(t, img)
}

// TestSequentialWritesLogMetadataOnce checks that 64 allocating 1 MiB
// direct writes, each one metadata update (inode, extent, bitmap and
// group descriptor), log those blocks once for the transaction that
// holds them all, not once per write.
func TestSequentialWritesLogMetadataOnce(t *testing.T) {
	img := formatImage(t, 256<<20, ext4io.FormatOptions{NoDiscard: true})
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	defer v.Close()
	f, err := v.OpenFile("/seq.dat", os.O_RDWR|os.O_CREATE|ext4io.O_DIRECT, 0o644)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Sync())
	const writes = 64
	buf := make([]byte, 1<<20)
	before := v.Counters()
	for i := range writes {
		_, err := f.WriteAt(buf, int64(i)<<20)
		require.NoError(t, err)
	}
	require.NoError(t, f.Sync())
	after := v.Counters()
	assert.Equal(t, uint64(writes), after.MetaUpdates-before.MetaUpdates, "metadata updates")
	assert.LessOrEqual(t, after.JournalTransactions-before.JournalTransactions, uint64(2), "transactions")
	// The inode's table block, a block bitmap, a group descriptor block
	// and the superblock at most, with a descriptor and a commit block,
	// in one or two transactions.
	assert.LessOrEqual(t, after.JournalLogBlocks-before.JournalLogBlocks, uint64(16), "blocks logged")
	assert.Positive(t, after.JournalLogBlocks-before.JournalLogBlocks, "blocks logged")
}
