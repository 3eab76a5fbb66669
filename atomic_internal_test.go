package ext4io

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/extent"

	"github.com/stretchr/testify/require"
)

// atomicCreditsFile returns a volume in memory and its file "db" of size
// bytes written, synced.
func atomicCreditsFile(t *testing.T, size int) (*Volume, *File) {
	t.Helper()
	_, v := memVolume(t, 64<<20, 4096)
	f, err := v.Create("db")
	require.NoError(t, err)
	_, err = f.WriteAt(bytes.Repeat([]byte{1}, size), 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	return v, f
}

// TestAtomicCreditsRefuse: a swap whose metadata would not fit one
// journal transaction (here: a journal too small for it) is refused with
// ErrUnsupported, nothing written; with the usual journal it goes on.
func TestAtomicCreditsRefuse(t *testing.T) {
	t.Parallel()
	v, f := atomicCreditsFile(t, 64<<10)
	defer v.Close()
	defer f.Close()
	// Punch every other block: 8 pieces in the 16 blocks.
	for b := int64(1); b < 16; b += 2 {
		require.NoError(t, f.Fallocate(FallocPunchHole|FallocKeepSize, b*4096, 4096))
	}
	// New blocks in the file's group, as the allocation gives them.
	exts, err := f.Extents()
	require.NoError(t, err)
	runs := []extent.Extent{{Lblk: 0, Len: 16, Pblk: exts[len(exts)-1].Physical + 100}}
	f.n.mu.Lock()
	whole, err := f.atomicCredits([]atomicRange{{lblk: 0, nblk: 16, runs: runs}})
	f.n.mu.Unlock()
	require.NoError(t, err)
	require.Positive(t, f.m.tree.Depth(), "8 pieces do not fit the root")
	require.GreaterOrEqual(t, whole, 2+1+2+2, "a group, a leaf, a split's path for the new run, the inode and superblock")
	require.GreaterOrEqual(t, atomicWorstCredits(16, 2, f.m.tree.Depth(), v.sb.GroupCount()), whole, "the bound small swaps use instead of the count")

	most := v.jm.maxChunk
	v.jm.maxChunk = whole - 1 // the limit of a smaller journal
	want := make([]byte, 64<<10)
	_, err = f.ReadAt(want, 0)
	require.NoError(t, err)
	_, err = f.WriteAtomic(bytes.Repeat([]byte{2}, 64<<10), 0)
	require.ErrorIs(t, err, ErrUnsupported)
	got := make([]byte, 64<<10)
	_, err = f.ReadAt(got, 0)
	require.NoError(t, err)
	require.Equal(t, want, got, "a refused atomic write changed the file")
	v.jm.maxChunk = most
	_, err = f.WriteAtomic(bytes.Repeat([]byte{2}, 64<<10), 0)
	require.NoError(t, err)
}

// TestAtomicCreditsBatch: the count charges a split's path for every leaf
// entry a range's Replace adds (its new runs, and one more for a range
// strictly inside one extent), counts every range of a batch, and ranges
// sharing a leaf do not count it more than once in all.
func TestAtomicCreditsBatch(t *testing.T) {
	t.Parallel()
	v, f := atomicCreditsFile(t, 1<<20)
	defer v.Close()
	defer f.Close()
	// Punch every 8th block (unwritten now): 64 extents, a tree of depth 1.
	for b := int64(7); b < 256; b += 8 {
		require.NoError(t, f.Fallocate(FallocPunchHole|FallocKeepSize, b*4096, 4096))
	}
	exts, err := f.Extents()
	require.NoError(t, err)
	free := exts[len(exts)-1].Physical + 100
	rng := func(lblk, nblk uint64) atomicRange {
		r := atomicRange{lblk: lblk, nblk: nblk, runs: []extent.Extent{{Lblk: uint32(lblk), Len: uint32(nblk), Pblk: free}}}
		free += nblk
		return r
	}
	credits := func(rs ...atomicRange) int {
		f.n.mu.Lock()
		defer f.n.mu.Unlock()
		c, err := f.atomicCredits(rs)
		require.NoError(t, err)
		return c
	}
	depth := f.m.tree.Depth()
	require.Equal(t, 1, depth)
	edge, inside := credits(rng(8, 2)), credits(rng(10, 2)) // an extent's start; inside one
	require.Equal(t, depth+1, inside-edge, "a range inside an extent adds a second entry")
	two := credits(rng(8, 2), rng(24, 2)) // two ranges at extents' starts, in one leaf
	require.Equal(t, edge+depth+1, two, "the second range adds its split path, not its leaf, groups, inode or superblock again")
}

// TestAtomicGoalsSkipOwnBlocks: a page written in place inside its
// neighbours' extent gets no placement goal (each would be the page's own
// blocks, in use until its swap commits); once moved, its old blocks
// between the neighbours are the goal, once.
func TestAtomicGoalsSkipOwnBlocks(t *testing.T) {
	t.Parallel()
	v, f := atomicCreditsFile(t, 64<<10) // 16 blocks, one extent
	v.opts.Tuning.AtomicJournalMax = -1  // the remap path
	defer v.Close()
	defer f.Close()
	goals := func(lblk, nblk uint64) []uint64 {
		f.n.mu.Lock()
		defer f.n.mu.Unlock()
		return f.atomicGoals(nil, lblk, nblk)
	}
	exts, err := f.Extents()
	require.NoError(t, err)
	require.Len(t, exts, 1)
	home := uint64(exts[0].Physical) + 4

	require.Empty(t, goals(4, 4), "a page inside its neighbours' extent")
	require.Empty(t, goals(12, 4), "the last page of the extent, nothing after it")

	_, err = f.WriteAtomic(bytes.Repeat([]byte{2}, 16<<10), 4<<12)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	exts, err = f.Extents()
	require.NoError(t, err)
	require.Len(t, exts, 3, "the page moved out of the extent")
	require.Equal(t, []uint64{home}, goals(4, 4), "after the block mapping 3, which is before the one mapping 8")
}

// TestWriteAtomicInodeUnchanged: a swap that changes neither i_blocks
// (a fully mapped range), the size nor the tree's root (a tree of depth
// 1) leaves the inode out of the transaction, as an overwrite does; Sync
// writes its times. A swap into a hole (i_blocks) or past the size (over
// blocks preallocated beyond it) writes the inode in the swap's
// transaction, and both survive a reopen.
func TestWriteAtomicInodeUnchanged(t *testing.T) {
	t.Parallel()
	const bs = 4096
	dev, v := memVolume(t, 64<<20, bs)
	f, err := v.Create("db")
	require.NoError(t, err)
	for b := int64(0); b < 16; b += 2 { // 8 extents with holes between: a tree of depth 1
		_, err = f.WriteAt(bytes.Repeat([]byte{1}, bs), b*bs)
		require.NoError(t, err)
	}
	require.NoError(t, f.Fallocate(FallocKeepSize, 16*bs, 4*bs))
	require.NoError(t, f.Sync())
	require.Equal(t, 1, f.m.tree.Depth())

	g, idx := v.sb.InodeLocation(f.ino)
	inodeBlk := v.groups[g].InodeTable + uint64(idx)*uint64(v.sb.InodeSizeBytes())/bs
	inodePending := func() bool {
		v.jm.mu.Lock()
		defer v.jm.mu.Unlock()
		_, ok := v.jm.pending[inodeBlk]
		return ok
	}
	require.False(t, inodePending())

	fi, err := f.Stat()
	require.NoError(t, err)
	m0 := fi.ModTime()
	time.Sleep(time.Millisecond)
	_, err = f.WriteAtomic(bytes.Repeat([]byte{2}, bs), 2*bs) // written blocks
	require.NoError(t, err)
	require.False(t, inodePending(), "the inode in the transaction of a swap that changed nothing in it")
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
	v, err = Open(dev, Options{Writable: true})
	require.NoError(t, err)
	fi, err = v.Stat("db")
	require.NoError(t, err)
	require.True(t, fi.ModTime().After(m0), "mtime %v after the write, %v before", fi.ModTime(), m0)
	f, err = v.OpenFile("db", os.O_RDWR, 0)
	require.NoError(t, err)

	_, err = f.WriteAtomic(bytes.Repeat([]byte{3}, bs), 3*bs) // a hole: i_blocks grows
	require.NoError(t, err)
	require.True(t, inodePending(), "i_blocks changed")
	require.NoError(t, f.Sync())

	_, err = f.WriteAtomic(bytes.Repeat([]byte{4}, 4*bs), 16*bs) // preallocated past the size
	require.NoError(t, err)
	require.True(t, inodePending(), "the size changed")
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())

	v, err = Open(dev, Options{Writable: true})
	require.NoError(t, err)
	defer v.Close()
	fi, err = v.Stat("db")
	require.NoError(t, err)
	require.Equal(t, int64(20*bs), fi.Size())
	f, err = v.Open("db")
	require.NoError(t, err)
	defer f.Close()
	got := make([]byte, 20*bs)
	_, err = f.ReadAt(got, 0)
	require.NoError(t, err)
	for b, want := range map[int]byte{0: 1, 2: 2, 3: 3, 16: 4, 19: 4} {
		require.Equal(t, bytes.Repeat([]byte{want}, bs), got[b*bs:(b+1)*bs], "block %d", b)
	}
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
	checkImage(t, dev)
}

// journalledFile is atomicCreditsFile on a volume without background
// commits, with one 16 KiB page at 0 written by a journalled WriteAtomic
// of 0x11 bytes. It returns the page's first physical block.
func journalledFile(t *testing.T) (*Volume, *File, uint64) {
	t.Helper()
	v, f := atomicCreditsFile(t, 64<<10)
	c0 := v.Counters().AtomicJournalled
	_, err := f.WriteAtomic(bytes.Repeat([]byte{0x11}, 16<<10), 0)
	require.NoError(t, err)
	require.Equal(t, c0+1, v.Counters().AtomicJournalled, "the write was not journalled")
	m, err := f.m.lookup(0)
	require.NoError(t, err)
	require.Equal(t, mapWritten, m.kind)
	return v, f, m.pblk
}

// TestAtomicJournalCheckpoint: a checkpoint after a journalled write and
// a later plain overwrite of the page must not write the logged copy
// home over the overwrite (Journal.MarkHome), and the journal's copy is
// not returned as the block's contents (Lookup).
func TestAtomicJournalCheckpoint(t *testing.T) {
	t.Parallel()
	v, f, pblk := journalledFile(t)
	defer v.Close()
	defer f.Close()
	d, err := v.OpenFile("db", os.O_RDWR|O_DIRECT, 0)
	require.NoError(t, err)
	defer d.Close()
	q := bytes.Repeat([]byte{0x22}, 16<<10)
	_, err = d.WriteAt(q, 0)
	require.NoError(t, err)
	buf := make([]byte, v.bs)
	require.False(t, v.jm.j.Lookup(pblk, buf), "the journal returns the page's logged copy")
	require.NoError(t, v.jm.j.Checkpoint())
	got := make([]byte, len(q))
	_, err = d.ReadAt(got, 0)
	require.NoError(t, err)
	require.Equal(t, q, got, "the checkpoint wrote the logged copy home")
}

// TestAtomicJournalNotCached: the data blocks a journalled write logs do
// not enter the metadata cache, where a later data write would leave a
// stale copy.
func TestAtomicJournalNotCached(t *testing.T) {
	t.Parallel()
	v, f, pblk := journalledFile(t)
	defer v.Close()
	defer f.Close()
	require.NotNil(t, v.jm.cache)
	for b := pblk; b < pblk+4; b++ {
		_, _, hit := v.jm.cache.get(b)
		require.False(t, hit, "block %d of the page is in the metadata cache", b)
	}
}

// TestAtomicJournalBoundedByJournal: with AtomicJournalMax set above a
// sixteenth of a small journal, a write that large is remapped rather
// than logged: its data would not fit the transaction with a pending set
// of up to that size, and a set too large for the log stops the volume.
func TestAtomicJournalBoundedByJournal(t *testing.T) {
	t.Parallel()
	dev := memdev.New(64 << 20)
	require.NoError(t, Format(dev, FormatOptions{NoDiscard: true, JournalBlocks: 1024}))
	v, err := Open(dev, Options{Writable: true, Tuning: Tuning{AtomicJournalMax: 4 << 20}})
	require.NoError(t, err)
	defer v.Close()
	f, err := v.Create("db")
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteAt(make([]byte, 1<<20), 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	_, err = f.WriteAtomic(bytes.Repeat([]byte{1}, 1<<20), 0)
	require.NoError(t, err)
	require.Zero(t, v.Counters().AtomicJournalled)
	require.NoError(t, f.Sync())
	_, err = f.WriteAtomic(bytes.Repeat([]byte{2}, 64<<10), 0)
	require.NoError(t, err)
	require.Equal(t, uint64(1), v.Counters().AtomicJournalled)
	require.NoError(t, v.failed())
}
