package ext4io

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
)

// fcSwapMem formats size bytes in memory with fast commits and opens it
// writable without the background committer.
func fcSwapMem(t *testing.T, size int64) (*memdev.Device, *Volume) {
	t.Helper()
	dev := memdev.NewBlockSize(size, 4096)
	require.NoError(t, Format(dev, FormatOptions{NoDiscard: true, FastCommit: true, JournalBlocks: 4096}))
	v, err := Open(dev, Options{Writable: true, CommitInterval: -1})
	require.NoError(t, err)
	return dev, v
}

// TestFastCommitAtomicBusy: the blocks a swap unmaps stay busy (not
// allocatable) through the fast commits that log the swap, however
// many, and become allocatable only when a full jbd2 commit holding the
// swap is durable: a fast commit's replay frees them, but the fast
// commits of the area stay replayable until that full commit supersedes
// them, so another owner must not have them before.
func TestFastCommitAtomicBusy(t *testing.T) {
	t.Parallel()
	_, v := fcSwapMem(t, 64<<20)
	defer v.Close()
	v.opts.Tuning.AtomicJournalMax = -1 // the remap path
	f, err := v.OpenFile("db", os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteAt(bytes.Repeat([]byte{1}, 16<<10), 0)
	require.NoError(t, err)
	require.NoError(t, v.Sync())
	require.Zero(t, v.jm.busyBlocks.Load())

	c0 := v.Counters()
	for i := range 3 {
		_, err = f.WriteAtomic(bytes.Repeat([]byte{byte(2 + i)}, 16<<10), 0)
		require.NoError(t, err)
		require.NoError(t, f.Datasync())
		// Each swap leaves its 4 old blocks busy; the fast commits
		// release none of them.
		assert.EqualValues(t, 4*(i+1), v.jm.busyBlocks.Load(), "busy blocks after swap %d and its fast commit", i+1)
	}
	c := v.Counters()
	require.EqualValues(t, 3, c.FastCommits-c0.FastCommits, "the Datasyncs were fast commits")
	require.NoError(t, v.Sync()) // a full commit, durable: the releases run
	assert.Zero(t, v.jm.busyBlocks.Load(), "busy blocks after the full commit")
}

// TestFastCommitAtomicNoSpace: with fast commits the swaps' old blocks
// stay busy until a full commit, so a swap that finds no free space
// while blocks are busy commits in full and retries (retryNoSpace), and
// succeeds; the volume is clean afterwards.
func TestFastCommitAtomicNoSpace(t *testing.T) {
	t.Parallel()
	const page = 1 << 20 // 256 blocks
	dev, v := fcSwapMem(t, 64<<20)
	f, err := v.OpenFile("db", os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	_, err = f.WriteAt(bytes.Repeat([]byte{1}, page), 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	// Fill the volume but for about one and a half swaps' worth.
	st, err := v.Statfs()
	require.NoError(t, err)
	filler, err := v.Create("filler")
	require.NoError(t, err)
	keep := uint64(page/4096) * 3 / 2
	require.Greater(t, st.BlocksAvail, keep)
	require.NoError(t, filler.Fallocate(0, 0, int64(st.BlocksAvail-keep)*4096))
	require.NoError(t, filler.Close())
	require.NoError(t, v.Sync())

	want := bytes.Repeat([]byte{2}, page)
	_, err = f.WriteAtomic(want, 0)
	require.NoError(t, err)
	require.NoError(t, f.Datasync())
	require.EqualValues(t, page/4096, v.jm.busyBlocks.Load(), "the first swap's old blocks are busy")
	st, err = v.Statfs()
	require.NoError(t, err)
	t.Logf("after the first swap: %d blocks available, %d busy", st.BlocksAvail, v.jm.busyBlocks.Load())
	// Statfs counts busy blocks free, as the bitmaps do; the root-reserved
	// blocks are not allocated (BlocksAvail).
	require.Less(t, st.BlocksAvail-uint64(v.jm.busyBlocks.Load()), uint64(page/4096), "the second swap does not fit without the busy blocks")

	c0 := v.Counters()
	want = bytes.Repeat([]byte{3}, page)
	_, err = f.WriteAtomic(want, 0)
	require.NoError(t, err, "the swap commits in full to get the busy blocks back")
	c := v.Counters()
	assert.Equal(t, c0.JournalCommits+1, c.JournalCommits, "one full commit, for the space")
	require.NoError(t, f.Datasync())
	assert.Equal(t, c0.FastCommits+1, v.Counters().FastCommits, "the next Datasync a fast commit again")
	got := make([]byte, page)
	_, err = f.ReadAt(got, 0)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, dev)
}
