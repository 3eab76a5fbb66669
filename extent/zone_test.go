package extent

import (
	"errors"
	"testing"
)

// zoneTree returns a tree of depth >= 1 holding n one-block extents at
// logical 2i, physical 5000+2i, and its config.
func zoneTree(t *testing.T, n int) (*Tree, Config) {
	t.Helper()
	cfg := Config{BlockSize: 1024, Ino: 12, FirstDataBlock: 1, BlocksCount: 1 << 20,
		IO: newMemIO(1024), Alloc: newMemAlloc(1000)}
	root := EmptyRoot()
	tr, err := Open(&root, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := tr.Insert(Extent{Lblk: uint32(2 * i), Len: 1, Pblk: uint64(5000 + 2*i)}); err != nil {
			t.Fatal(err)
		}
	}
	return tr, cfg
}

func TestTreeEnd(t *testing.T) {
	root := EmptyRoot()
	tr, err := Open(&root, Config{BlockSize: 1024, FirstDataBlock: 1, BlocksCount: 100})
	if err != nil {
		t.Fatal(err)
	}
	if end, err := tr.End(); end != 0 || err != nil {
		t.Errorf("End of an empty tree: %d, %v; want 0", end, err)
	}
	for _, n := range []int{1, 4, 200} {
		tr, _ := zoneTree(t, n)
		if end, err := tr.End(); end != uint64(2*n-1) || err != nil {
			t.Errorf("End of %d extents (depth %d): %d, %v; want %d", n, tr.Depth(), end, err, 2*n-1)
		}
	}
}

// TestSystemZone: extents, index entries and new blocks inside the system
// zone are corrupt (Linux's block_validity).
func TestSystemZone(t *testing.T) {
	tr, cfg := zoneTree(t, 200)
	if tr.Depth() == 0 {
		t.Fatal("want a tree with index entries")
	}
	var treeBlk uint64
	tr.Blocks(func(p uint64, depth int) error {
		if treeBlk == 0 {
			treeBlk = p
		}
		return nil
	})
	root := tr.Root()
	reopen := func(zone func(p, n uint64) bool) (*Tree, error) {
		c := cfg
		c.SystemZone = zone
		r := root
		return Open(&r, c)
	}
	in := func(lo, hi uint64) func(p, n uint64) bool {
		return func(p, n uint64) bool { return p < hi && p+n > lo }
	}

	// A data extent in the zone: found when its leaf is decoded.
	z, err := reopen(in(5100, 5101))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := z.Lookup(100); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Lookup of an extent in the system zone: %v; want ErrCorrupt", err)
	}
	// An index entry (tree block) in the zone: found when the root is.
	if _, err := reopen(in(treeBlk, treeBlk+1)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Open with a tree block in the system zone: %v; want ErrCorrupt", err)
	}
	// Insert refuses a mapping into the zone; a new tree block in it is
	// refused too.
	z, err = reopen(in(9000, 9010))
	if err != nil {
		t.Fatal(err)
	}
	if err := z.Insert(Extent{Lblk: 1, Len: 1, Pblk: 9005}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Insert into the system zone: %v; want ErrCorrupt", err)
	}
	next := cfg.Alloc.(*memAlloc).next
	z, err = reopen(in(next, next+100))
	if err != nil {
		t.Fatal(err)
	}
	var ierr error
	for i := 0; i < 400 && ierr == nil; i++ {
		ierr = z.Insert(Extent{Lblk: uint32(2*i + 1), Len: 1, Pblk: uint64(20000 + 2*i)})
	}
	if !errors.Is(ierr, ErrCorrupt) {
		t.Errorf("inserts needing a tree block the allocator places in the zone: %v; want ErrCorrupt", ierr)
	}
}
