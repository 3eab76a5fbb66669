package ext4io

import (
	"runtime"
	"testing"
)

// TestAdv27ConvBitsRegionZero is TestConvBits over regions 0 to 3: region
// 0 lives outside the region directory, and sets, runs and clears across
// its end must agree with the model.
func TestAdv27ConvBitsRegionZero(t *testing.T) {
	testConvBits(t, 0)
}

// TestAdv27ConvBitsSmallFileFootprint: the bits of a file whose queued
// writes stay in its first region (every file under 32 MiB with 4 KiB
// blocks) cost that one region, 1 KiB. Each used to cost the region
// directory's two levels too, 13 KiB in all, for every such inode the
// cache holds (Options.InodeCache, 16384 by default).
func TestAdv27ConvBitsSmallFileFootprint(t *testing.T) {
	const files = 256
	bits := make([]convBits, files)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range bits {
		bits[i].set(uint32(i%64), 3)
	}
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / files
	if per > 2048 {
		t.Errorf("a small file's conversion bits cost %d bytes, want about 1 KiB", per)
	}
	for i := range bits {
		if w, _ := bits[i].run(uint32(i%64)+1, 1); !w {
			t.Fatalf("bits %d: block %d not marked", i, i%64+1)
		}
	}
}
