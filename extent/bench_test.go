package extent

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func benchTree(b *testing.B, bs int) (*Tree, *memAlloc) {
	al := newMemAlloc(treeBase)
	root := EmptyRoot()
	tr, err := Open(&root, Config{BlockSize: bs, Ino: 12, Seed: 1, Csum: true, FirstDataBlock: 1, BlocksCount: 1 << 40, IO: newMemIO(bs), Alloc: al})
	if err != nil {
		b.Fatal(err)
	}
	return tr, al
}

func BenchmarkLookupDepth0(b *testing.B) {
	tr, _ := benchTree(b, 4096)
	for k := uint32(0); k < 4; k++ {
		_ = tr.Insert(Extent{Lblk: 10 * k, Len: 5, Pblk: regionA + uint64(10*k)})
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, _, _, err := tr.Lookup(uint32(i % 40)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLookupDepth2(b *testing.B) {
	tr, _ := benchTree(b, 4096)
	const n = 5000
	for k := uint32(0); k < n; k++ {
		_ = tr.Insert(Extent{Lblk: 2 * k, Len: 1, Pblk: regionA + uint64(2*k)})
	}
	if tr.Depth() != 2 {
		b.Fatalf("depth %d", tr.Depth())
	}
	rng := rand.New(rand.NewPCG(1, 2))
	b.ResetTimer()
	for b.Loop() {
		if _, _, _, err := tr.Lookup(uint32(rng.IntN(2 * n))); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppend inserts one-block extents at the end, as sequential
// writes with a fragmented allocator do (no merging).
func BenchmarkAppend(b *testing.B) {
	tr, _ := benchTree(b, 4096)
	for i := 0; b.Loop(); i++ {
		l := uint32(2 * i % (EndLblk - 2))
		if err := tr.Insert(Extent{Lblk: l, Len: 1, Pblk: regionA + uint64(l)}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMarkWritten4K converts random 4 KiB blocks of a 1 GiB
// unwritten file (32768 unwritten extents' worth of 4 KiB blocks).
func BenchmarkMarkWritten4K(b *testing.B) {
	tr, _ := benchTree(b, 4096)
	const blocks = 1 << 18 // 1 GiB of 4 KiB blocks
	for l := uint32(0); l < blocks; l += MaxUnwrittenLen {
		n := min(uint32(MaxUnwrittenLen), blocks-l)
		if err := tr.Insert(Extent{Lblk: l, Len: n, Pblk: regionA + uint64(l), Unwritten: true}); err != nil {
			b.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for b.Loop() {
		if err := tr.MarkWritten(uint32(rng.IntN(blocks)), 1, false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPunch punches random 1-block holes in a 1 GiB written file.
func BenchmarkPunch(b *testing.B) {
	tr, _ := benchTree(b, 4096)
	const blocks = 1 << 18
	for l := uint32(0); l < blocks; l += MaxWrittenLen {
		if err := tr.Insert(Extent{Lblk: l, Len: MaxWrittenLen, Pblk: regionA + uint64(l)}); err != nil {
			b.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for b.Loop() {
		l := uint32(rng.IntN(blocks))
		if err := tr.Remove(l, l); err != nil {
			b.Fatal(err)
		}
	}
}

// unwrittenFile returns a tree mapping a 1 GiB file of 4 KiB blocks with
// unwritten extents of maximal length, as fallocate leaves it.
func unwrittenFile(b *testing.B) (*Tree, uint32) {
	tr, _ := benchTree(b, 4096)
	const blocks = 1 << 18
	for l := uint32(0); l < blocks; l += MaxUnwrittenLen {
		n := min(uint32(MaxUnwrittenLen), blocks-l)
		if err := tr.Insert(Extent{Lblk: l, Len: n, Pblk: regionA + uint64(l), Unwritten: true}); err != nil {
			b.Fatal(err)
		}
	}
	return tr, blocks
}

// refreshEvery is how many random 4 KiB writes the benchmarks below make
// into one unwrittenFile before starting over on a new one (timer stopped):
// enough to grow the tree to depth 2 with ~175 leaves, few enough that most
// writes still hit unwritten blocks, so ns/op does not depend on b.N.
const refreshEvery = 1 << 14

// BenchmarkSplitConvert4K is a direct 4 KiB write into preallocated space:
// split the block off at submission (SplitRange), convert it at completion.
func BenchmarkSplitConvert4K(b *testing.B) {
	tr, blocks := unwrittenFile(b)
	rng := rand.New(rand.NewPCG(7, 8))
	for i := 0; b.Loop(); i++ {
		if i > 0 && i%refreshEvery == 0 {
			b.StopTimer()
			tr, _ = unwrittenFile(b)
			b.StartTimer()
		}
		l := uint32(rng.IntN(int(blocks)))
		if err := tr.SplitRange(l, 1, false); err != nil {
			b.Fatal(err)
		}
		if err := tr.MarkWrittenExact(l, 1, true); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMarkWrittenExact4K converts one random 4 KiB block per op,
// without zero-out or a prior split.
func BenchmarkMarkWrittenExact4K(b *testing.B) {
	tr, blocks := unwrittenFile(b)
	rng := rand.New(rand.NewPCG(9, 10))
	for i := 0; b.Loop(); i++ {
		if i > 0 && i%refreshEvery == 0 {
			b.StopTimer()
			tr, _ = unwrittenFile(b)
			b.StartTimer()
		}
		if err := tr.MarkWrittenExact(uint32(rng.IntN(int(blocks))), 1, true); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkQueuedBatch converts 512 scattered 4 KiB runs of an unwritten
// file, as a batch of queued conversions: one change for the whole batch
// (batch) or one per run (each). ns/op is per run.
func BenchmarkQueuedBatch(b *testing.B) {
	for _, batch := range []bool{true, false} {
		name := "each"
		if batch {
			name = "batch"
		}
		b.Run(name, func(b *testing.B) {
			tr, blocks := unwrittenFile(b)
			rng := rand.New(rand.NewPCG(7, 8))
			runs := make([]Run, 512)
			done := 0
			for b.Loop() {
				if done >= refreshEvery {
					b.StopTimer()
					tr, _ = unwrittenFile(b)
					done = 0
					b.StartTimer()
				}
				for i := range runs {
					runs[i] = Run{Lblk: uint32(rng.IntN(int(blocks))), Len: 1}
				}
				slices.SortFunc(runs, func(x, y Run) int { return int(x.Lblk) - int(y.Lblk) })
				if batch {
					if err := tr.MarkWrittenExactRuns(runs, true); err != nil {
						b.Fatal(err)
					}
				} else {
					for _, r := range runs {
						if err := tr.MarkWrittenExact(r.Lblk, r.Len, true); err != nil {
							b.Fatal(err)
						}
					}
				}
				done += len(runs)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(runs)), "ns/run")
		})
	}
}
