package extent

import (
	"errors"
	"testing"

	"github.com/ext4io/ext4io/esc"
	"github.com/stretchr/testify/require"
)

// TestEmptyLeafCycle checks that a search past the end of a leaf reports
// index entries that lead to the same empty leaf again as corruption
// instead of looping.
func TestEmptyLeafCycle(t *testing.T) {
	const bs = 1024
	leaf := func(ext ...Extent) []byte {
		b := make([]byte, bs)
		Header{Magic: Magic, Entries: uint16(len(ext)), Max: uint16((bs - HeaderSize) / EntrySize)}.Encode(b)
		for i, e := range ext {
			if err := e.Encode(b[HeaderSize+EntrySize*i:]); err != nil {
				t.Fatal(err)
			}
		}
		return b
	}
	cases := []struct {
		name string
		idx  []Index
		at   uint32 // block looked up
	}{
		{"same-empty-leaf", []Index{{Lblk: 0, Pblk: 2}, {Lblk: 10, Pblk: 2}}, 0},
		{"after-full-leaf", []Index{{Lblk: 0, Pblk: 1}, {Lblk: 10, Pblk: 2}, {Lblk: 20, Pblk: 2}}, 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			io := newMemIO(bs)
			io.blocks[1] = leaf(Extent{Lblk: 0, Len: 2, Pblk: 100})
			io.blocks[2] = leaf()
			var root [RootSize]byte
			Header{Magic: Magic, Entries: uint16(len(c.idx)), Max: RootMax, Depth: 1}.Encode(root[:])
			for i, x := range c.idx {
				if err := x.Encode(root[HeaderSize+EntrySize*i:]); err != nil {
					t.Fatal(err)
				}
			}
			tr, err := Open(&root, Config{BlockSize: bs, Ino: 5, FirstDataBlock: 1, BlocksCount: 1 << 20, IO: io})
			if err != nil {
				t.Fatal(err)
			}
			if _, _, _, err := tr.Lookup(c.at); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Lookup(%d): %v, want ErrCorrupt", c.at, err)
			}
		})
	}
}

// TestLookupHoleBounds checks that holes end at EndLblk (EXT_MAX_BLOCKS), as
// ext4_ext_determine_hole clamps them, so a hole's length fits an
// esc.Extent: on an empty tree, after the last extent, and at the top of
// the logical range.
func TestLookupHoleBounds(t *testing.T) {
	const bs = 1024
	cfg := Config{BlockSize: bs, Ino: 12, FirstDataBlock: 1, BlocksCount: 1 << 20, IO: newMemIO(bs), Alloc: newMemAlloc(100)}
	root := EmptyRoot()
	tr, err := Open(&root, cfg)
	require.NoError(t, err)
	check := func(lblk uint32, want uint64) {
		t.Helper()
		_, found, hole, err := tr.Lookup(lblk)
		require.NoError(t, err)
		require.False(t, found, "Lookup(%d)", lblk)
		require.Equal(t, want, hole, "Lookup(%d) hole length", lblk)
		require.LessOrEqual(t, uint64(lblk)+hole, uint64(EndLblk), "hole passes EXT_MAX_BLOCKS")
		if hole > 0 {
			// The whole hole fits an esc.Extent's uint32 length and end.
			x := esc.Extent{Lblk: lblk, Len: uint32(hole), Status: esc.Hole}
			require.Equal(t, uint64(hole), uint64(x.Len), "hole length overflows uint32")
			require.LessOrEqual(t, uint64(x.End()), uint64(esc.MaxBlocks))
		}
	}
	check(0, EndLblk)
	check(7, EndLblk-7)
	check(EndLblk-1, 1)
	check(EndLblk, 0) // no extent may map it: an empty hole, not 1
	require.NoError(t, tr.Insert(Extent{Lblk: 1000, Len: 8, Pblk: 500}))
	check(0, 1000)
	check(1008, EndLblk-1008)
	require.NoError(t, tr.Insert(Extent{Lblk: EndLblk - 4, Len: 4, Pblk: 600}))
	check(1008, EndLblk-4-1008)
	e, found, _, err := tr.Lookup(EndLblk - 1)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, uint64(EndLblk), e.End())
}
