package extent

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// unwrittenTree returns a tree mapping blocks [0, blocks) unwritten, its
// IO and allocator.
func unwrittenTree(t *testing.T, blocks uint32) (*Tree, *memIO, *memAlloc, *[RootSize]byte) {
	t.Helper()
	al, io := newMemAlloc(treeBase), newMemIO(4096)
	root := EmptyRoot()
	tr, err := Open(&root, Config{BlockSize: 4096, Ino: 12, Seed: 1, Csum: true, FirstDataBlock: 1, BlocksCount: 1 << 40, IO: io, Alloc: al})
	if err != nil {
		t.Fatal(err)
	}
	for l := uint32(0); l < blocks; l += MaxUnwrittenLen {
		n := min(uint32(MaxUnwrittenLen), blocks-l)
		if err := tr.Insert(Extent{Lblk: l, Len: n, Pblk: regionA + uint64(l), Unwritten: true}); err != nil {
			t.Fatal(err)
		}
	}
	return tr, io, al, &root
}

func extents(t *testing.T, tr *Tree) []Extent {
	t.Helper()
	var out []Extent
	if err := tr.Walk(func(e Extent) error { out = append(out, e); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// canonical merges the extents of es that continue each other logically
// and physically in the same state, whatever their length: the mapping
// in a form that does not depend on where the extents were cut.
func canonical(es []Extent) []Extent {
	var out []Extent
	for _, e := range es {
		if n := len(out); n > 0 && out[n-1].End() == uint64(e.Lblk) &&
			out[n-1].Pblk+uint64(out[n-1].Len) == e.Pblk && out[n-1].Unwritten == e.Unwritten {
			out[n-1].Len += e.Len
			continue
		}
		out = append(out, e)
	}
	return out
}

// TestMarkWrittenExactRuns: converting batches of scattered runs in one
// change gives the tree that converting them one by one gives (also read
// back from its blocks), and a batch that cannot get a tree block changes
// nothing.
func TestMarkWrittenExactRuns(t *testing.T) {
	const blocks = 1 << 17
	one, _, _, _ := unwrittenTree(t, blocks)
	batch, io, al, root := unwrittenTree(t, blocks)
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 8; round++ {
		var runs []Run
		for range 400 {
			runs = append(runs, Run{Lblk: uint32(rng.IntN(blocks - 8)), Len: uint32(1 + rng.IntN(4))})
		}
		slices.SortFunc(runs, func(a, b Run) int { return int(a.Lblk) - int(b.Lblk) })
		for _, r := range runs { // overlapping runs are allowed
			if err := one.MarkWrittenExact(r.Lblk, r.Len, true); err != nil {
				t.Fatal(err)
			}
		}
		if err := batch.MarkWrittenExactRuns(runs, true); err != nil {
			t.Fatal(err)
		}
		// Leaves split at different points on the two paths, and extents
		// merge only inside a leaf: compare the mappings.
		if a, b := canonical(extents(t, one)), canonical(extents(t, batch)); !slices.Equal(a, b) {
			t.Fatalf("round %d: batch maps %d runs, one by one %d", round, len(b), len(a))
		}
		if err := batch.Check(); err != nil {
			t.Fatal(err)
		}
	}
	// The batch's blocks on "disk" hold the same tree.
	r := batch.Root()
	*root = r
	again, err := Open(root, Config{BlockSize: 4096, Ino: 12, Seed: 1, Csum: true, FirstDataBlock: 1, BlocksCount: 1 << 40, IO: io, Alloc: al})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := canonical(extents(t, one)), canonical(extents(t, again)); !slices.Equal(a, b) {
		t.Fatalf("reopened: %d extents, want %d", len(b), len(a))
	}
	// All or nothing: no tree block to be had.
	before := extents(t, again)
	al.exhausted = true
	var runs []Run
	for i := range 2000 {
		runs = append(runs, Run{Lblk: uint32(i*60 + 7), Len: 1})
	}
	if err := again.MarkWrittenExactRuns(runs, false); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("batch with no tree block: %v, want ErrNoSpace", err)
	}
	if after := extents(t, again); !slices.Equal(before, after) {
		t.Fatal("a failed batch changed the tree")
	}
	if err := again.Check(); err != nil {
		t.Fatal(err)
	}
}
