package ext4io

import (
	"math/rand/v2"
	"testing"
)

// TestConvBits checks convBits against a bool per block over random sets
// and clears across four regions, including a clear past the largest file.
func TestConvBits(t *testing.T) {
	const span = 4 * escRegion
	base := uint32(3 * escRegion) // not region 0
	rng := rand.New(rand.NewPCG(7, 8))
	var c convBits
	model := make([]bool, span)
	check := func(step int) {
		t.Helper()
		for i := 0; i < 64; i++ {
			b := rng.IntN(span)
			limit := uint32(1 + rng.IntN(3*escRegion))
			w, n := c.run(base+uint32(b), limit)
			if w != model[b] {
				t.Fatalf("step %d: block %d written=%v, model %v", step, b, w, model[b])
			}
			want := uint32(0)
			regionEnd := (b/escRegion + 1) * escRegion
			for j := b; j < regionEnd && want < limit && model[j] == w; j++ {
				want++
			}
			if n != want {
				t.Fatalf("step %d: run at %d (limit %d) = %d blocks, want %d", step, b, limit, n, want)
			}
		}
	}
	if w, n := c.run(base, 10); w || n != 10 {
		t.Fatalf("empty: run = %v %d", w, n)
	}
	for step := 0; step < 3000; step++ {
		lo := rng.IntN(span)
		n := 1 + rng.IntN(min(span-lo, []int{1, 7, 70, 700, 9000}[rng.IntN(5)]))
		on := rng.IntN(3) > 0
		if on {
			c.set(base+uint32(lo), uint32(n))
		} else {
			c.clear(uint64(base)+uint64(lo), uint64(n))
		}
		for i := lo; i < lo+n; i++ {
			model[i] = on
		}
		check(step)
	}
	c.clear(uint64(base)+escRegion, maxFileBlocks) // past the largest file: every region visited
	for i := escRegion; i < span; i++ {
		model[i] = false
	}
	check(-1)
}
