package esc

import (
	"math/rand/v2"
	"runtime"
	"testing"
)

func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// fillInodes caches, for inodes [first, first+inodes), perInode
// non-mergeable written extents each (alternating physical bases so
// neighbours never merge), in random or ascending order.
func fillInodes(tb testing.TB, c *Cache, first uint32, inodes, perInode int, random bool, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 1))
	order := make([]uint32, perInode)
	for i := range order {
		order[i] = uint32(i)
	}
	for ino := first; ino < first+uint32(inodes); ino++ {
		tr := c.Inode(ino)
		if random {
			r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		for _, i := range order {
			// Extent i covers blocks [2i, 2i+2); physical blocks jump
			// between extents.
			e := Extent{Lblk: 2 * i, Len: 2, Pblk: uint64(i)*10 + 1, Status: Written}
			if err := tr.Insert(e); err != nil {
				tb.Fatal(err)
			}
		}
	}
}

// measure returns the heap growth and the cache's own accounting for a
// workload.
func measure(tb testing.TB, inodes, perInode int, random bool) (heap, accounted int64, entries int64) {
	before := heapInUse()
	c := New(Options{})
	fillInodes(tb, c, 1, inodes, perInode, random, 42)
	after := heapInUse()
	st := c.Stats()
	runtime.KeepAlive(c)
	return after - before, st.Bytes, st.Entries
}

// TestAccountingMatchesHeap checks the byte accounting model against
// runtime.MemStats for small and large trees. The model is deliberately
// conservative: trees filled in order cost ~39 bytes per entry, at random
// ~26 (fuller nodes), and entryBytes is 40, so the heap may come in well
// under the accounting but never more than 30% over.
func TestAccountingMatchesHeap(t *testing.T) {
	cases := []struct {
		name            string
		inodes, perInod int
		random          bool
	}{
		{"1x100k-seq", 1, 100000, false},
		{"1x100k-rand", 1, 100000, true},
		{"20kx1", 20000, 1, false},
		{"20kx4", 20000, 4, true},
		{"2kx100", 2000, 100, true},
	}
	for _, tc := range cases {
		heap, acc, n := measure(t, tc.inodes, tc.perInod, tc.random)
		ratio := float64(heap) / float64(acc)
		t.Logf("%-12s entries %7d heap %9d accounted %9d (heap/accounted %.2f, heap/entry %.1f)",
			tc.name, n, heap, acc, ratio, float64(heap)/float64(n))
		if ratio < 0.5 || ratio > 1.3 {
			t.Errorf("%s: heap %d vs accounted %d: ratio %.2f outside [0.5, 1.3]", tc.name, heap, acc, ratio)
		}
	}
}

// TestBytesPerEntry checks the ≤ 64 bytes per cached extent target, tree
// overhead included, for large trees filled in order and at random.
func TestBytesPerEntry(t *testing.T) {
	for _, random := range []bool{false, true} {
		heap, _, n := measure(t, 1, 100000, random)
		per := float64(heap) / float64(n)
		t.Logf("random=%v: %.1f bytes per cached extent", random, per)
		if per > 64 {
			t.Errorf("random=%v: %.1f bytes per cached extent, want <= 64", random, per)
		}
	}
}
