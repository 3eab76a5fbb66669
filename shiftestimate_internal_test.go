package ext4io

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestShiftEstimateCoversChanges runs random collapses and inserts (up
// to 600 blocks, near the file's end so that they fit the log) on files
// of one- and two-block extents whose trees are depth 2, at the edge of
// growing to depth 3, and depth 3, where an insert's split of a full
// leaf cascades up to the root. Each runs alone in the pending set
// (commits held off), which must then hold no more blocks than
// shiftFitsLocked counted for it.
func TestShiftEstimateCoversChanges(t *testing.T) {
	t.Parallel()
	for _, n := range []int64{3 * 84 * 30, 3 * 84 * 165, 3 * 84 * 168, 3*84*168 + 600} {
		t.Run("", func(t *testing.T) { shiftEstimate(t, n) })
	}
}

func shiftEstimate(t *testing.T, n int64) {
	mem := memdev.NewBlockSize(128<<20, 1024)
	require.NoError(t, Format(mem, FormatOptions{BlockSize: 1024, JournalBlocks: 1024}))
	v, err := Open(mem, Options{Writable: true, PageCacheBytes: -1, CommitInterval: -1}) // no committer reads commitAt
	require.NoError(t, err)
	f, err := v.Create("f")
	require.NoError(t, err)
	// A written block, then two unwritten ones: an insert inside the
	// latter splits an extent.
	require.NoError(t, f.Fallocate(FallocKeepSize, 0, n*1024))
	b := make([]byte, 1024)
	for i := int64(0); i < n; i += 3 {
		_, err := f.WriteAt(b, i*1024)
		require.NoError(t, err)
	}
	_, err = f.WriteAt([]byte{1}, n*1024)
	require.NoError(t, err)
	require.NoError(t, v.Sync())
	rng := rand.New(rand.NewPCG(uint64(n), 2))
	least, shifts := math.MaxInt, 0
	for range 500 {
		size := f.Size() / 1024
		mode := FallocInsertRange
		first := uint64(size - 1 - rng.Int64N(min(size-10, 3000)))
		ln := uint64(1 + rng.IntN(600))
		from := uint32(first)
		var rmFirst, rmLast uint64
		if rng.IntN(3) == 0 {
			mode = FallocCollapseRange
			ln = uint64(1 + rng.Int64N(min(600, size/4)))
			first = min(first, uint64(size)-ln-2)
			from = uint32(first + ln)
			rmFirst, rmLast = first, first+ln
		}
		// What shiftFitsLocked counts.
		est, err := f.m.tree.ShiftBlocks(from)
		require.NoError(t, err)
		if rmFirst < rmLast {
			_, rest, err := v.treeCutsBudgetLocked(f.n, rmFirst, rmLast, math.MaxInt)
			require.NoError(t, err)
			est += rest
		}
		est += shiftSlack
		require.NoError(t, v.Sync())
		commitAt := v.jm.commitAt
		v.jm.commitAt = math.MaxInt
		err = f.Fallocate(mode, int64(first)*1024, int64(ln)*1024)
		changed := v.jm.pendingLen()
		v.jm.commitAt = commitAt
		if err != nil {
			require.ErrorIs(t, err, ErrNoSpace, "%v at %d, %d blocks", mode, first, ln)
			continue
		}
		shifts++
		least = min(least, est-changed)
		assert.LessOrEqual(t, changed, est, "%v at %d, %d blocks: changed more than counted", mode, first, ln)
	}
	t.Logf("%d shifts, depth %d, least margin %d blocks", shifts, f.m.tree.Depth(), least)
	require.Greater(t, shifts, 300)
	require.NoError(t, f.CheckTree())
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, mem)
}
