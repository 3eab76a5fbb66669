package extent

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// shiftModel is a per-block model: logical block -> physical block.
type shiftModel map[uint32]uint64

func (sm shiftModel) check(t *testing.T, tr *Tree, step int) {
	t.Helper()
	if err := tr.Check(); err != nil {
		t.Fatalf("step %d: Check: %v", step, err)
	}
	got := shiftModel{}
	tr.Walk(func(e Extent) error {
		for i := uint32(0); i < e.Len; i++ {
			got[e.Lblk+i] = e.Pblk + uint64(i)
		}
		return nil
	})
	if len(got) != len(sm) {
		t.Fatalf("step %d: tree maps %d blocks, model %d", step, len(got), len(sm))
	}
	for l, p := range sm {
		if got[l] != p {
			t.Fatalf("step %d: block %d maps to %d, model %d", step, l, got[l], p)
		}
	}
}

// TestShiftModel shifts extents of trees reaching depth 2 (small nodes) and
// real 1 KiB blocks left and right at random points, as collapse-range and
// insert-range do, checking every block against a model and Check.
func TestShiftModel(t *testing.T) {
	for _, maxEnt := range []int{4, 0} {
		m := newModelRun(t, 7, 1024, maxEnt, 1<<20, 64)
		tr := m.tr
		sm := shiftModel{}
		rng := rand.New(rand.NewPCG(uint64(maxEnt), 9))
		for i := uint32(0); i < 300; i++ {
			n := 1 + uint32(rng.IntN(2))
			p := uint64(regionA) + uint64(i)*10
			if err := tr.Insert(Extent{Lblk: i * 3, Len: n, Pblk: p}); err != nil {
				t.Fatal(err)
			}
			for j := uint32(0); j < n; j++ {
				sm[i*3+j] = p + uint64(j)
			}
		}
		if maxEnt != 0 && tr.Depth() < 2 {
			t.Fatalf("depth %d, want >= 2", tr.Depth())
		}
		sm.check(t, tr, -1)
		for step := 0; step < 80; step++ {
			from := uint32(20 + rng.IntN(900))
			if err := tr.SplitAt(from, false); err != nil {
				t.Fatal(err)
			}
			var delta int64
			if rng.IntN(2) == 0 {
				gap := uint32(1 + rng.IntN(10))
				if err := tr.Remove(from-gap, from-1); err != nil {
					t.Fatal(err)
				}
				for l := from - gap; l < from; l++ {
					delete(sm, l)
				}
				delta = -int64(gap)
			} else {
				delta = int64(1 + rng.IntN(20))
			}
			bound, err := tr.ShiftBlocks(from)
			if err != nil {
				t.Fatal(err)
			}
			writes := m.io.writes
			if err := tr.Shift(from, delta); err != nil {
				t.Fatalf("step %d: Shift(%d, %d): %v", step, from, delta, err)
			}
			if got := m.io.writes - writes; got > bound {
				t.Fatalf("step %d: Shift(%d, %d) wrote %d tree blocks, ShiftBlocks counted %d", step, from, delta, got, bound)
			}
			next := shiftModel{}
			for l, p := range sm {
				if l >= from {
					l = uint32(int64(l) + delta)
				}
				next[l] = p
			}
			sm = next
			sm.check(t, tr, step)
		}
		// Reopened from its blocks, the tree is the same.
		root := tr.Root()
		re, err := Open(&root, m.cfg)
		if err != nil {
			t.Fatal(err)
		}
		sm.check(t, re, 1000)
	}
	// Precondition violations leave the tree unchanged.
	m := newModelRun(t, 1, 1024, 0, 1<<20, 64)
	if err := m.tr.Insert(Extent{Lblk: 10, Len: 10, Pblk: regionA}); err != nil {
		t.Fatal(err)
	}
	if err := m.tr.Shift(15, 3); !errors.Is(err, ErrInvalid) {
		t.Fatalf("shift at a straddled block: %v", err)
	}
	if err := m.tr.Shift(25, -10); !errors.Is(err, ErrInvalid) {
		t.Fatalf("shift over an extent: %v", err)
	}
	shiftModel(func() shiftModel {
		s := shiftModel{}
		for i := uint32(0); i < 10; i++ {
			s[10+i] = regionA + uint64(i)
		}
		return s
	}()).check(t, m.tr, 0)
}
