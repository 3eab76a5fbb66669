package ext4io

import (
	"bytes"
	"testing"

	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTruncateStepsDelayedPages truncates in steps a file with buffered
// writes not yet written back past the steps' cuts (delayed allocation,
// reserved blocks): the steps and the final operation release every
// reservation, and the free count matches the allocator's after a Sync
// and e2fsck's image.
func TestTruncateStepsDelayedPages(t *testing.T) {
	t.Parallel()
	mem := memdev.NewBlockSize(256<<20, 1024)
	require.NoError(t, Format(mem, FormatOptions{BlockSize: 1024, JournalBlocks: 1024}))
	v, err := Open(mem, Options{Writable: true})
	require.NoError(t, err)
	f, err := v.Create("f")
	require.NoError(t, err)
	require.NoError(t, v.Sync())
	free0 := v.alloc.FreeBlocks()
	const n = 2 * 84 * 300
	fragment(t, f, 0, n)
	require.NoError(t, f.Sync())
	// Delayed pages among the tree's blocks and past its end.
	p := make([]byte, 8<<10)
	for off := int64(1000); off < n+4000; off += 3000 {
		_, err := f.WriteAt(p, off*1024)
		require.NoError(t, err)
	}
	require.Positive(t, v.alloc.Reserved(), "delayed blocks reserved")
	steps := 0
	v.stepHook = func(bool) { steps++ }
	require.NoError(t, f.Truncate(2048))
	require.Greater(t, steps, 1, "the truncate ran in steps")
	assert.Zero(t, v.alloc.Reserved(), "no reservation left")
	require.NoError(t, v.Sync())
	assert.InDelta(t, free0, v.alloc.FreeBlocks(), 4)
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, mem)
	v, err = Open(mem, Options{})
	require.NoError(t, err)
	assert.InDelta(t, free0, v.sb.FreeBlocksCount, 4)
	require.NoError(t, v.Close())
}

// TestTruncateStepsIOError fails the device's writes and flushes from the
// middle of a stepped truncate on: the truncate reports an error matching
// ErrIO and no panic; once the device works again the volume opens
// (replaying its log), e2fsck accepts the image, and the file keeps the
// data below the new size with its old size or the new one.
func TestTruncateStepsIOError(t *testing.T) {
	t.Parallel()
	for _, at := range []int{1, 3} {
		mem := memdev.NewBlockSize(256<<20, 1024)
		tog := errordev.NewToggle(errordev.Kinds(errordev.Always(), errordev.Write, errordev.Flush))
		dev := errordev.New(mem, tog)
		require.NoError(t, Format(dev, FormatOptions{BlockSize: 1024, JournalBlocks: 1024}))
		v, err := Open(dev, Options{Writable: true, PageCacheBytes: -1})
		require.NoError(t, err)
		f, err := v.Create("f")
		require.NoError(t, err)
		const n = 2 * 84 * 300
		fragment(t, f, 0, n)
		mark := bytes.Repeat([]byte{9}, 1024)
		_, err = f.WriteAt(mark, 0)
		require.NoError(t, err)
		old := f.Size()
		require.NoError(t, v.Sync())
		steps := 0
		v.stepHook = func(bool) {
			if steps++; steps == at {
				tog.Enable()
			}
		}
		for err == nil {
			err = f.Truncate(1024)
			if err == nil {
				err = f.Sync()
			}
		}
		require.ErrorIs(t, err, ErrIO)
		_ = f.Close()
		_ = v.Close()
		tog.Disable()
		v, err = Open(mem, Options{Writable: true, PageCacheBytes: -1})
		require.NoError(t, err)
		require.NoError(t, v.Close())
		ext4iotest.FsckDev(t, mem)
		v, err = Open(mem, Options{})
		require.NoError(t, err)
		f, err = v.Open("f")
		require.NoError(t, err)
		assert.Contains(t, []int64{1024, old}, f.Size())
		got := make([]byte, 1024)
		_, err = f.ReadAt(got, 0)
		require.NoError(t, err)
		assert.Equal(t, mark, got)
		require.NoError(t, f.Close())
		require.NoError(t, v.Close())
	}
}

// TestTruncateStepsFastCommitCrash makes a stepped truncate's first steps
// durable with a File.Sync between steps, with and without fast commits,
// and crashes there: the image opens (replaying), e2fsck accepts it, and
// the file keeps its old size with the freed tail reading as zeroes and
// its first block's data.
func TestTruncateStepsFastCommitCrash(t *testing.T) {
	t.Parallel()
	for _, fc := range []bool{false, true} {
		mem := memdev.NewBlockSize(256<<20, 1024)
		c, err := errordev.NewCrashable(mem)
		require.NoError(t, err)
		require.NoError(t, Format(c, FormatOptions{BlockSize: 1024, JournalBlocks: 1024, FastCommit: fc}))
		v, err := Open(c, Options{Writable: true, PageCacheBytes: -1})
		require.NoError(t, err)
		f, err := v.Create("f")
		require.NoError(t, err)
		const n = 2 * 84 * 300
		fragment(t, f, 0, n)
		mark := bytes.Repeat([]byte{9}, 1024)
		for _, b := range []int64{0, n - 2} {
			_, err = f.WriteAt(mark, b*1024)
			require.NoError(t, err)
		}
		old := f.Size()
		require.NoError(t, v.Sync())
		var img *memdev.Device
		steps := 0
		v.stepHook = func(bool) {
			if steps++; steps == 2 {
				require.NoError(t, f.Sync())
				img, err = c.Crash(errordev.CrashOptions{})
				require.NoError(t, err)
			}
		}
		require.NoError(t, f.Truncate(1024))
		require.NotNil(t, img)
		require.NoError(t, f.Close())
		require.NoError(t, v.Close())

		v, err = Open(img, Options{Writable: true, PageCacheBytes: -1})
		require.NoError(t, err)
		require.NoError(t, v.Close())
		ext4iotest.FsckDev(t, img)
		v, err = Open(img, Options{})
		require.NoError(t, err)
		f, err = v.Open("f")
		require.NoError(t, err)
		assert.Equal(t, old, f.Size(), "fast commit %v", fc)
		got := make([]byte, 1024)
		_, err = f.ReadAt(got, 0)
		require.NoError(t, err)
		assert.Equal(t, mark, got)
		_, err = f.ReadAt(got, (n-2)*1024)
		require.NoError(t, err)
		assert.Equal(t, make([]byte, 1024), got, "the freed tail reads as zeroes (fast commit %v)", fc)
		require.NoError(t, f.Close())
		require.NoError(t, v.Close())
	}
}
