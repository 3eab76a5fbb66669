package extent

import (
	"errors"
	"testing"
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
