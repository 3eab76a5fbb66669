package alloc

import (
	"math/rand/v2"
	"testing"

	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/internal/mkfs"
	"github.com/ext4io/ext4io/layout"
)

// benchVolume formats a 1 GiB in-memory volume (4 KiB blocks). With
// fragmented, it is filled with single blocks, then a random half of them
// is freed and every 16th 1 MiB-aligned region emptied.
func benchVolume(b *testing.B, fragmented bool) *Allocator {
	dev := memdev.New(1 << 30)
	if err := mkfs.Format(dev, mkfs.Options{Features: "^has_journal"}); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 1024)
	dev.ReadAt(buf, 1024)
	sb, err := layout.DecodeSuperblock(buf)
	if err != nil {
		b.Fatal(err)
	}
	a, err := New(sb, NewDirectIO(dev, sb.BlockSize()), Options{NoReservedPool: true})
	if err != nil {
		b.Fatal(err)
	}
	if fragmented {
		var got []uint64
		for {
			s, _, err := a.Allocate(Request{Min: 1, Max: 1, Goal: uint64(len(got)), Flags: MustSucceed})
			if err != nil {
				break
			}
			got = append(got, s)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		for _, s := range got {
			if rng.IntN(2) == 0 || s/256%16 == 0 {
				if err := a.Free(s, 1); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	return a
}

func benchAlloc(b *testing.B, fragmented bool, size uint64) {
	a := benchVolume(b, fragmented)
	var held []run
	blocks := uint64(0)
	goal := uint64(0)
	for b.Loop() {
		s, n, err := a.Alloc(goal, size, size)
		if err != nil {
			b.StopTimer()
			for _, r := range held {
				if err := a.Free(r.start, r.n); err != nil {
					b.Fatal(err)
				}
			}
			held = held[:0]
			b.StartTimer()
			continue
		}
		held = append(held, run{s, n})
		blocks += n
		goal = s + n
		if len(held) >= 2000 {
			b.StopTimer()
			for _, r := range held {
				if err := a.Free(r.start, r.n); err != nil {
					b.Fatal(err)
				}
			}
			held = held[:0]
			b.StartTimer()
		}
	}
	b.ReportMetric(float64(blocks)/b.Elapsed().Seconds(), "blocks/s")
}

func BenchmarkAllocSingleEmpty(b *testing.B)      { benchAlloc(b, false, 1) }
func BenchmarkAllocSingleFragmented(b *testing.B) { benchAlloc(b, true, 1) }
func BenchmarkAlloc1MiBEmpty(b *testing.B)        { benchAlloc(b, false, 256) }
func BenchmarkAlloc1MiBFragmented(b *testing.B)   { benchAlloc(b, true, 256) }
