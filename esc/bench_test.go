//go:build unix

package esc

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// cpuTime returns the process's user+system CPU time. Benchmarks report
// it per operation ("cpu-ns/op") because wall time on a shared 2-core
// machine mostly measures the other tenants.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runGoroutines splits b.N operations over exactly g goroutines; op gets the
// goroutine's index and a per-goroutine random source.
func runGoroutines(b *testing.B, g int, op func(r *rand.Rand)) {
	b.ResetTimer()
	cpu0 := cpuTime()
	var wg sync.WaitGroup
	per := b.N / g
	for i := 0; i < g; i++ {
		n := per
		if i == 0 {
			n += b.N % g
		}
		wg.Add(1)
		go func(i, n int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), 7))
			for j := 0; j < n; j++ {
				op(r)
			}
		}(i, n)
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
}

// BenchmarkLookup measures lookups with 1, 2 and 16 goroutines.
//
//   - hot-1inode: every goroutine hits one inode with 1000 cached extents
//     (worst case for the per-inode read lock).
//   - hot-1k-inodes: hits spread over 1000 inodes of 32 extents each.
//   - cold: Fill over 100,000 single-extent files with a 1 MiB budget, so
//     most lookups miss, call the (fake) on-disk lookup, insert, and shrink.
func BenchmarkLookup(b *testing.B) {
	for _, g := range []int{1, 2, 16} {
		b.Run(fmt.Sprintf("hot-1inode/g=%d", g), func(b *testing.B) {
			c := New(Options{})
			tr := c.Inode(1)
			for i := uint32(0); i < 1000; i++ {
				if err := tr.Insert(Extent{Lblk: 2 * i, Len: 2, Pblk: uint64(i) * 10, Status: Written}); err != nil {
					b.Fatal(err)
				}
			}
			runGoroutines(b, g, func(r *rand.Rand) {
				if _, ok := tr.Lookup(uint32(r.IntN(2000))); !ok {
					b.Error("miss")
				}
			})
		})
		b.Run(fmt.Sprintf("hot-1k-inodes/g=%d", g), func(b *testing.B) {
			c := New(Options{})
			trees := make([]*Tree, 1000)
			for ino := range trees {
				trees[ino] = c.Inode(uint32(ino + 1))
				for i := uint32(0); i < 32; i++ {
					if err := trees[ino].Insert(Extent{Lblk: 2 * i, Len: 2, Pblk: uint64(i) * 10, Status: Written}); err != nil {
						b.Fatal(err)
					}
				}
			}
			runGoroutines(b, g, func(r *rand.Rand) {
				if _, ok := trees[r.IntN(len(trees))].Lookup(uint32(r.IntN(64))); !ok {
					b.Error("miss")
				}
			})
		})
		b.Run(fmt.Sprintf("cold/g=%d", g), func(b *testing.B) {
			c := New(Options{Budget: 1 << 20})
			lookup := func(lblk uint32) (Extent, bool, error) {
				if lblk < 256 {
					return Extent{Lblk: 0, Len: 256, Pblk: 5000, Status: Written}, false, nil
				}
				return Extent{Lblk: 256, Len: MaxBlocks - 256, Status: Hole}, false, nil
			}
			runGoroutines(b, g, func(r *rand.Rand) {
				if _, err := c.Inode(uint32(1+r.IntN(100000))).Fill(uint32(r.IntN(256)), lookup); err != nil {
					b.Error(err)
				}
			})
			st := c.Stats()
			b.ReportMetric(float64(st.Hits)/float64(st.Hits+st.Misses), "hit-ratio")
			b.ReportMetric(float64(st.Bytes)/float64(st.Budget), "bytes/budget")
		})
	}
}

// BenchmarkBytesPerExtent reports heap bytes per cached extent for 100,000
// non-mergeable extents in one inode, inserted in order and at random.
func BenchmarkBytesPerExtent(b *testing.B) {
	for _, random := range []bool{false, true} {
		b.Run(fmt.Sprintf("random=%v", random), func(b *testing.B) {
			var heap, acc, n int64
			for i := 0; i < b.N; i++ {
				heap, acc, n = measure(b, 1, 100000, random)
			}
			b.ReportMetric(float64(heap)/float64(n), "heap-B/extent")
			b.ReportMetric(float64(acc)/float64(n), "accounted-B/extent")
		})
	}
}

// iBlock is a fake i_block: an ext4 extent root with up to 4 entries, as
// the mapping layer would find it in the inode (struct ext4_extent_header
// followed by struct ext4_extent, little-endian).
type iBlock [60]byte

func makeIBlock(exts []Extent) iBlock {
	var ib iBlock
	binary.LittleEndian.PutUint16(ib[0:], 0xF30A)
	binary.LittleEndian.PutUint16(ib[2:], uint16(len(exts)))
	binary.LittleEndian.PutUint16(ib[4:], 4)
	for i, e := range exts {
		o := 12 + 12*i
		binary.LittleEndian.PutUint32(ib[o:], e.Lblk)
		binary.LittleEndian.PutUint16(ib[o+4:], uint16(e.Len))
		binary.LittleEndian.PutUint16(ib[o+6:], uint16(e.Pblk>>32))
		binary.LittleEndian.PutUint32(ib[o+8:], uint32(e.Pblk))
	}
	return ib
}

// lookupIBlock decodes ib and finds lblk: the cost SkipInRoot pays on every
// lookup.
func lookupIBlock(ib *iBlock, lblk uint32) (Extent, bool, error) {
	n := int(binary.LittleEndian.Uint16(ib[2:]))
	prevEnd := uint32(0)
	for i := 0; i < n; i++ {
		o := 12 + 12*i
		s := binary.LittleEndian.Uint32(ib[o:])
		l := uint32(binary.LittleEndian.Uint16(ib[o+4:]))
		if lblk < s {
			return Extent{Lblk: prevEnd, Len: s - prevEnd, Status: Hole}, true, nil
		}
		if lblk < s+l {
			p := uint64(binary.LittleEndian.Uint16(ib[o+6:]))<<32 | uint64(binary.LittleEndian.Uint32(ib[o+8:]))
			return Extent{Lblk: s, Len: l, Pblk: p, Status: Written}, true, nil
		}
		prevEnd = s + l
	}
	return Extent{Lblk: prevEnd, Len: MaxBlocks - prevEnd, Status: Hole}, true, nil
}

// BenchmarkInRootPolicy: random 4 KiB reads over 10,000 small files whose
// 3 extents sit in the inode, through Fill, caching in-root extents or not.
// Reports accounted bytes per file and in-root lookups (i_block decodes)
// per read in steady state.
func BenchmarkInRootPolicy(b *testing.B) {
	const files = 10000
	ibs := make([]iBlock, files)
	for i := range ibs {
		base := uint64(i) * 1000
		ibs[i] = makeIBlock([]Extent{
			{Lblk: 0, Len: 16, Pblk: base},
			{Lblk: 16, Len: 16, Pblk: base + 100},
			{Lblk: 40, Len: 24, Pblk: base + 200},
		})
	}
	for _, skip := range []bool{false, true} {
		b.Run(fmt.Sprintf("SkipInRoot=%v", skip), func(b *testing.B) {
			c := New(Options{SkipInRoot: skip})
			trees := make([]*Tree, files)
			for i := range trees {
				trees[i] = c.Inode(uint32(i + 1))
			}
			r := rand.New(rand.NewPCG(1, 2))
			read := func() {
				f := r.IntN(files)
				ib := &ibs[f]
				if _, err := trees[f].Fill(uint32(r.IntN(64)), func(lblk uint32) (Extent, bool, error) {
					return lookupIBlock(ib, lblk)
				}); err != nil {
					b.Fatal(err)
				}
			}
			for i := 0; i < 20*files; i++ { // warm up: steady state
				read()
			}
			fills := c.Stats().Fills
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := 0; i < b.N; i++ {
				read()
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
			st := c.Stats()
			b.ReportMetric(float64(st.Bytes)/files, "B/file")
			b.ReportMetric(float64(st.Fills-fills)/float64(b.N), "root-lookups/read")
			runtime.KeepAlive(ibs)
		})
	}
}

// BenchmarkConvertInsert marks single blocks of a 1 GiB unwritten range
// Written in random order, as direct writes into preallocated space do:
// most inserts land inside an unwritten entry, some next to written
// neighbours they merge with. The tree peaks near 130k entries.
//
//	go test -run XXX -bench ConvertInsert -benchtime 200000x ./esc/
func BenchmarkConvertInsert(b *testing.B) {
	const blocks = 1 << 18
	c := New(Options{})
	tr := c.Inode(1)
	if err := tr.Insert(Extent{Lblk: 0, Len: blocks, Pblk: 1 << 20, Status: Unwritten}); err != nil {
		b.Fatal(err)
	}
	perm := rand.New(rand.NewPCG(5, 6)).Perm(blocks)
	i := 0
	for b.Loop() {
		if i == len(perm) {
			b.Fatal("more iterations than blocks: use -benchtime 262144x or less")
		}
		l := uint32(perm[i])
		if err := tr.Insert(Extent{Lblk: l, Len: 1, Pblk: 1<<20 + uint64(l), Status: Written}); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
