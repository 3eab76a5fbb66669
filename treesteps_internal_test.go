package ext4io

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"sync"
	"testing"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTruncateTreeLargerThanLog shrinks a file whose extent tree has more
// leaf blocks than the whole log holds in one transaction (a 1024-block
// journal, 1 KiB blocks, one extent a block). Before truncateSteps the
// truncate's pending set did not fit one transaction: jmeta.log refused
// it with ErrNoSpace and the volume stopped committing.
func TestTruncateTreeLargerThanLog(t *testing.T) {
	t.Parallel()
	mem, _ := bigTreeImage(t)
	v, f := bigTreeFile(t, mem)
	const keep = 1001 // blocks kept, the last one partly
	size := int64(keep*1024 - 100)
	require.NoError(t, f.Truncate(size))
	assert.Greater(t, v.jm.j.Stats().Commits, uint64(2), "the truncate committed in steps")
	assert.Equal(t, size, f.Size())
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, mem)

	v, err := Open(mem, Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, v.Close()) }()
	f, err = v.Open("big")
	require.NoError(t, err)
	assert.Equal(t, size, f.Size())
	exts, err := f.Extents()
	require.NoError(t, err)
	assert.Len(t, exts, keep)
	got := make([]byte, 1024)
	for _, i := range []int64{0, 2, 998, keep - 1} {
		n, _ := f.ReadAt(got, i*1024)
		want := bigTreeMark(i)
		if i%2 == 1 {
			want = make([]byte, 1024)
		}
		want = want[:min(int64(len(want)), size-i*1024)]
		assert.Equal(t, want, got[:n], "block %d", i)
	}
}

// bigTreeBlocks is the size in blocks of the file bigTreeImage holds.
const bigTreeBlocks = 2 * 84 * 1100

// bigTreeMark is the contents of the file's block i when i is even.
func bigTreeMark(i int64) []byte { return bytes.Repeat([]byte{byte(i/2%251 + 1)}, 1024) }

// bigTree is the image bigTreeImage clones, built once for the tests of
// the test binary that need it: writing its tree is most of their time.
var bigTree struct {
	once sync.Once
	mem  *memdev.Device
	free uint64 // free blocks before the file
	err  error
}

// bigTreeImage returns a copy of a volume with 1 KiB blocks and a
// 1024-block journal whose file "big", bigTreeBlocks long, alternates
// written blocks (bigTreeMark) and unwritten ones: one extent a block, a
// tree with more blocks than the whole log takes in one transaction. It
// also returns the free block count before the file.
func bigTreeImage(t *testing.T) (*memdev.Device, uint64) {
	t.Helper()
	bigTree.once.Do(func() { bigTree.mem, bigTree.free, bigTree.err = buildBigTree() })
	require.NoError(t, bigTree.err)
	mem, err := bigTree.mem.Clone()
	require.NoError(t, err)
	return mem, bigTree.free
}

func buildBigTree() (*memdev.Device, uint64, error) {
	mem := memdev.NewBlockSize(256<<20, 1024)
	if err := Format(mem, FormatOptions{BlockSize: 1024, JournalBlocks: 1024}); err != nil {
		return nil, 0, err
	}
	v, err := Open(mem, Options{Writable: true, PageCacheBytes: -1})
	if err != nil {
		return nil, 0, err
	}
	free := v.sb.FreeBlocksCount
	err = func() error {
		f, err := v.Create("big")
		if err != nil {
			return err
		}
		if err := f.Fallocate(FallocAllocate, 0, bigTreeBlocks*1024); err != nil {
			return err
		}
		for i := int64(0); i < bigTreeBlocks; i += 2 {
			if _, err := f.WriteAt(bigTreeMark(i), i*1024); err != nil {
				return err
			}
		}
		return f.Close()
	}()
	if err := errors.Join(err, v.Close()); err != nil {
		return nil, 0, err
	}
	return mem, free, nil
}

// bigTreeFile opens dev, bigTreeImage's copy or a device over it,
// writable without a page cache, and its file "big" for writing; the
// file's tree has more blocks than the whole log takes in one
// transaction.
func bigTreeFile(t *testing.T, dev blockdev.Device) (*Volume, *File) {
	t.Helper()
	v, err := Open(dev, Options{Writable: true, PageCacheBytes: -1})
	require.NoError(t, err)
	f, err := v.OpenFile("big", os.O_RDWR, 0)
	require.NoError(t, err)
	blocks := 0
	require.NoError(t, f.m.tree.Blocks(func(uint64, int) error { blocks++; return nil }))
	require.Greater(t, blocks, v.jm.j.MaxLargeCredits(), "the tree's blocks alone exceed one transaction")
	return v, f
}

// TestRemoveTreeLargerThanLog removes a closed file whose tree is larger
// than one transaction: before orphanSteps the unlink's eviction did not
// fit the log and stopped the volume (ErrNoSpace), and Remove reported
// ENOENT from its rmdir attempt.
func TestRemoveTreeLargerThanLog(t *testing.T) {
	t.Parallel()
	mem, _ := bigTreeImage(t)
	v, f := bigTreeFile(t, mem)
	require.NoError(t, f.Close())
	require.NoError(t, v.Remove("big"))
	require.NoError(t, v.Sync())
	_, err := v.Open("big")
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, mem)
}

// TestOrphanTreeLargerThanLog unlinks such a file while it is open: its
// last Close frees it, and so does the next open of a crash image taken
// while it was an orphan. Before orphanSteps both failed with ErrNoSpace,
// the second on every later writable open.
func TestOrphanTreeLargerThanLog(t *testing.T) {
	t.Parallel()
	mem, free := bigTreeImage(t)
	c, err := errordev.NewCrashable(mem)
	require.NoError(t, err)
	v, f := bigTreeFile(t, c)
	require.NoError(t, v.Remove("big"))
	require.NoError(t, v.Sync())
	img, err := c.Crash(errordev.CrashOptions{})
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, c)

	v, err = Open(img, Options{Writable: true, PageCacheBytes: -1})
	require.NoError(t, err)
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, img)
	v, err = Open(img, Options{})
	require.NoError(t, err)
	assert.InDelta(t, free, v.sb.FreeBlocksCount, 16, "the orphan's blocks are free")
	require.NoError(t, v.Close())
}

// TestPunchTreeLargerThanLog punches, and zero-ranges, most of a file
// whose tree in that range is larger than one transaction: before
// punchSteps the punch did not fit the log (ErrNoSpace) and stopped the
// volume. The blocks around the range keep their data.
func TestPunchTreeLargerThanLog(t *testing.T) {
	t.Parallel()
	for _, mode := range []FallocMode{FallocPunchHole, FallocZeroRange} {
		t.Run(mode.String(), func(t *testing.T) {
			mem, _ := bigTreeImage(t)
			v, f := bigTreeFile(t, mem)
			size := f.Size()
			const lo, hi = 1000 * 1024, 2 * 84 * 1000 * 1024 // whole blocks
			data := bytes.Repeat([]byte{7}, 1024)
			_, err := f.WriteAt(data, lo-1024)
			require.NoError(t, err)
			_, err = f.WriteAt(data, hi)
			require.NoError(t, err)
			require.NoError(t, f.Fallocate(mode, lo, hi-lo))
			assert.Equal(t, size, f.Size())
			got := make([]byte, 1024)
			for _, off := range []int64{lo - 1024, hi} {
				_, err := f.ReadAt(got, off)
				require.NoError(t, err)
				assert.Equal(t, data, got, "block at %d", off)
			}
			for _, off := range []int64{lo, lo + 2048, hi - 1024} {
				_, err := f.ReadAt(got, off)
				require.NoError(t, err)
				assert.Equal(t, make([]byte, 1024), got, "block at %d", off)
			}
			require.NoError(t, f.Close())
			require.NoError(t, v.Close())
			ext4iotest.FsckDev(t, mem)
		})
	}
}
