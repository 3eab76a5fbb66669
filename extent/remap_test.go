package extent

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func newReplaceTree(t *testing.T) (*Tree, *memAlloc) {
	t.Helper()
	al := newMemAlloc(treeBase)
	root := EmptyRoot()
	tr, err := Open(&root, Config{BlockSize: 1024, Ino: 12, FirstDataBlock: 1, BlocksCount: 1 << 24, IO: newMemIO(1024), Alloc: al})
	require.NoError(t, err)
	return tr, al
}

func mapping(t *testing.T, tr *Tree) []Extent {
	t.Helper()
	var out []Extent
	require.NoError(t, tr.Walk(func(e Extent) error { out = append(out, e); return nil }))
	return out
}

// TestReplace swaps the mapping of a range spanning written and unwritten
// extents and a hole for new extents in one mutation: the old blocks of
// the range (and only those) are freed, the neighbours are trimmed, and a
// failed tree-block allocation leaves the tree as it was.
func TestReplace(t *testing.T) {
	tr, al := newReplaceTree(t)
	// 40 extents of 8 blocks with 2-block holes between: a leaf level.
	for i := range uint32(40) {
		require.NoError(t, tr.Insert(Extent{Lblk: 10 * i, Len: 8, Pblk: 100_000 + 100*uint64(i), Unwritten: i%3 == 0}))
	}
	require.Positive(t, tr.Depth())
	before := mapping(t, tr)

	with := []Extent{{Lblk: 104, Len: 25, Pblk: 500_000}, {Lblk: 129, Len: 4, Pblk: 600_000}}
	require.NoError(t, tr.Replace(104, 29, with, false))
	require.NotEqual(t, before, mapping(t, tr))
	require.NoError(t, tr.Check())
	got := mapping(t, tr)
	var inRange []Extent
	for _, e := range got {
		if e.End() > 100 && e.Lblk < 134 {
			inRange = append(inRange, e)
		}
	}
	require.Equal(t, []Extent{
		{Lblk: 100, Len: 4, Pblk: 101_000},
		{Lblk: 104, Len: 25, Pblk: 500_000},
		{Lblk: 129, Len: 4, Pblk: 600_000},
		{Lblk: 133, Len: 5, Pblk: 101_303},
	}, inRange)
	// Freed: blocks 104-107 of extent 10, 110-117 (11), 120-127 (12,
	// unwritten) and 130-132 (13): the old blocks of the range, no more.
	freed := 0
	for p := range al.dataFreed {
		freed++
		require.True(t, p >= 101_004 && p < 101_008 || p >= 101_100 && p < 101_108 ||
			p >= 101_200 && p < 101_208 || p >= 101_300 && p < 101_303, "freed block %d", p)
	}
	require.Equal(t, 4+8+8+3, freed)
	require.Empty(t, al.errs)

	// Bad arguments change nothing.
	got = mapping(t, tr)
	require.Error(t, tr.Replace(0, 10, []Extent{{Lblk: 0, Len: 5, Pblk: 700_000}}, false), "gap")
	require.Error(t, tr.Replace(0, 10, []Extent{{Lblk: 0, Len: 10, Pblk: 700_000, Unwritten: true}}, false), "unwritten")
	require.Equal(t, got, mapping(t, tr))
}

// TestReplaceNoSpace replaces the middle of an extent in a full leaf with
// three extents, which needs a new leaf: when that allocation fails the
// tree is unchanged and nothing is freed; with space it succeeds.
func TestReplaceNoSpace(t *testing.T) {
	tr, al := newReplaceTree(t)
	for i := range uint32(84) { // a full 1 KiB leaf
		require.NoError(t, tr.Insert(Extent{Lblk: 10 * i, Len: 8, Pblk: 100_000 + 100*uint64(i)}))
	}
	require.Equal(t, 1, tr.Depth())
	before := mapping(t, tr)
	with := []Extent{{Lblk: 103, Len: 1, Pblk: 500_000}, {Lblk: 104, Len: 1, Pblk: 500_010}, {Lblk: 105, Len: 1, Pblk: 500_020}}
	al.failAfter = 1
	require.ErrorIs(t, tr.Replace(103, 3, with, false), ErrNoSpace)
	require.Equal(t, before, mapping(t, tr), "a failed Replace changed the tree")
	require.Empty(t, al.dataFreed)
	require.NoError(t, tr.Replace(103, 3, with, false))
	require.NoError(t, tr.Check())
	got := mapping(t, tr)
	require.Len(t, got, 84+4)
	require.Equal(t, []Extent{{Lblk: 100, Len: 3, Pblk: 101_000}, with[0], with[1], with[2], {Lblk: 106, Len: 2, Pblk: 101_006}}, got[10:15])
	require.Len(t, al.dataFreed, 3)
	require.Empty(t, al.errs)
}

// TestRangeBlocks counts the leaves (and index blocks) under a range.
func TestRangeBlocks(t *testing.T) {
	tr, _ := newReplaceTree(t)
	for i := range uint32(4) { // in the root: no tree blocks
		require.NoError(t, tr.Insert(Extent{Lblk: 10 * i, Len: 8, Pblk: 100_000 + 100*uint64(i)}))
	}
	n, err := tr.RangeBlocks(0, 40)
	require.NoError(t, err)
	require.Zero(t, n)
	for i := range uint32(400) { // several 1 KiB leaves of up to 84
		if i >= 4 {
			require.NoError(t, tr.Insert(Extent{Lblk: 10 * i, Len: 8, Pblk: 100_000 + 100*uint64(i)}))
		}
	}
	d := tr.Depth()
	require.Positive(t, d)
	n, err = tr.RangeBlocks(0, 4000)
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, 400/84+d) // every leaf and an index block above them
	one, err := tr.RangeBlocks(100, 5)
	require.NoError(t, err)
	require.Equal(t, d, one, "one leaf and its index blocks")
	two, err := tr.RangeBlocks(830, 20) // across the first two leaves
	require.NoError(t, err)
	require.Equal(t, d+1, two)
	hole, err := tr.RangeBlocks(4000, 100) // past the last extent
	require.NoError(t, err)
	require.Zero(t, hole)
}

// TestReplaceRanges swaps 64 scattered one- and two-block ranges of a tree
// of several leaves in one ReplaceRanges, and the same ranges one Replace
// at a time on an identical tree: the mappings and the freed data blocks
// are the same, and the batch writes each changed tree block once.
func TestReplaceRanges(t *testing.T) {
	build := func() (*Tree, *memAlloc, *memIO) {
		al := newMemAlloc(treeBase)
		io := newMemIO(1024)
		root := EmptyRoot()
		tr, err := Open(&root, Config{BlockSize: 1024, Ino: 12, FirstDataBlock: 1, BlocksCount: 1 << 24, IO: io, Alloc: al})
		require.NoError(t, err)
		for i := range uint32(400) { // leaves of up to 84 extents of 8 blocks
			require.NoError(t, tr.Insert(Extent{Lblk: 10 * i, Len: 8, Pblk: 100_000 + 100*uint64(i)}))
		}
		return tr, al, io
	}
	var rs []ReplaceRange
	next := uint64(900_000) // the new blocks: one run, the ranges one after the other
	for i := range uint32(64) {
		r := ReplaceRange{Lblk: 60*i + 3, Len: 1 + i%2}
		if i%5 == 1 { // right after the previous range, and physically too: they merge
			r.Lblk = rs[len(rs)-1].Lblk + rs[len(rs)-1].Len
		}
		r.With = []Extent{{Lblk: r.Lblk, Len: r.Len, Pblk: next}}
		if i%7 == 3 && r.Len == 2 { // two new extents for one range
			r.With = []Extent{{Lblk: r.Lblk, Len: 1, Pblk: next + 500}, {Lblk: r.Lblk + 1, Len: 1, Pblk: next + 1000}}
		}
		next += uint64(r.Len)
		rs = append(rs, r)
	}

	one, oneAl, oneIO := build()
	base := oneIO.writes
	for _, r := range rs {
		require.NoError(t, one.Replace(r.Lblk, r.Len, r.With, false))
	}
	require.NoError(t, one.Check())

	batch, al, io := build()
	require.Equal(t, base, io.writes)
	before := mapping(t, batch)
	require.NoError(t, batch.ReplaceRanges(rs, false))
	require.NoError(t, batch.Check())
	require.NotEqual(t, before, mapping(t, batch))
	require.Equal(t, mapping(t, one), mapping(t, batch))
	require.Equal(t, oneAl.dataFreed, al.dataFreed)
	require.Len(t, al.dataFreed, 64+64/2)
	require.Empty(t, al.errs)
	last := rs[len(rs)-1]
	blocks, err := batch.RangeBlocks(rs[0].Lblk, last.Lblk+last.Len-rs[0].Lblk)
	require.NoError(t, err)
	require.Positive(t, blocks)
	require.LessOrEqual(t, io.writes-base, blocks, "the batch wrote a tree block more than once")
	require.Greater(t, oneIO.writes-base, blocks, "the one-at-a-time control wrote no block twice")
}

// TestReplaceRangesAllOrNothing: when the last range of a batch needs a
// tree block that cannot be allocated, the earlier ranges' changes are
// undone too and nothing is freed; ranges out of order or overlapping are
// refused before anything changes.
func TestReplaceRangesAllOrNothing(t *testing.T) {
	tr, al := newReplaceTree(t)
	for i := range uint32(84) { // a full 1 KiB leaf
		require.NoError(t, tr.Insert(Extent{Lblk: 10 * i, Len: 8, Pblk: 100_000 + 100*uint64(i)}))
	}
	before := mapping(t, tr)
	rs := []ReplaceRange{
		{Lblk: 10, Len: 8, With: []Extent{{Lblk: 10, Len: 8, Pblk: 400_000}}}, // in place of a whole extent
		{Lblk: 103, Len: 3, With: []Extent{{Lblk: 103, Len: 1, Pblk: 500_000}, {Lblk: 104, Len: 1, Pblk: 500_010}, {Lblk: 105, Len: 1, Pblk: 500_020}}},
	}
	al.failAfter = 1
	require.ErrorIs(t, tr.ReplaceRanges(rs, false), ErrNoSpace)
	require.Equal(t, before, mapping(t, tr), "a failed batch changed the tree")
	require.Empty(t, al.dataFreed)
	require.NoError(t, tr.Check())

	require.ErrorIs(t, tr.ReplaceRanges([]ReplaceRange{rs[1], rs[0]}, false), ErrInvalid, "out of order")
	overlap := ReplaceRange{Lblk: 17, Len: 1, With: []Extent{{Lblk: 17, Len: 1, Pblk: 600_000}}}
	require.ErrorIs(t, tr.ReplaceRanges([]ReplaceRange{rs[0], overlap}, false), ErrInvalid, "overlapping")
	require.Equal(t, before, mapping(t, tr))
	require.Empty(t, al.dataFreed)

	require.NoError(t, tr.ReplaceRanges(rs, false))
	require.NoError(t, tr.Check())
	got := mapping(t, tr)
	require.Equal(t, rs[0].With[0], got[1])
	require.Len(t, al.dataFreed, 8+3)
	require.Empty(t, al.errs)
}
