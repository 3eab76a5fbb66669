package iomap

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPageIndex checks the chunked page index against a map under random
// sets and deletes, clustered and scattered, deletes often of indexed
// pages so chunks empty and come back: get, len, and each over
// random ranges (small ones looked up chunk by chunk, large ones through
// the chunk map), including stopping early.
func TestPageIndex(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var x pageIndex
	model := map[int64]*page{}
	randIdx := func() int64 {
		if r.IntN(4) == 0 {
			return r.Int64N(1 << 40) // scattered: a chunk each
		}
		return r.Int64N(4 * chunkPages)
	}
	collect := func(lo, hi int64) []int64 {
		var got []int64
		x.each(lo, hi, func(pg *page) bool {
			got = append(got, pg.idx)
			return true
		})
		slices.Sort(got)
		return got
	}
	for step := range 20000 {
		idx := randIdx()
		if r.IntN(2) == 0 {
			for i := range model { // an indexed page, so chunks empty out
				idx = i
				break
			}
		}
		if r.IntN(3) == 0 {
			x.del(idx)
			delete(model, idx)
		} else {
			pg := &page{idx: idx}
			x.set(idx, pg)
			model[idx] = pg
		}
		q := randIdx()
		require.Same(t, model[q], x.get(q), "step %d: get(%d)", step, q)
		require.Equal(t, len(model), x.len(), "step %d", step)
		if step%50 == 0 {
			lo := randIdx()
			hi := lo + r.Int64N(3*chunkPages)
			if r.IntN(4) == 0 {
				lo, hi = 0, math.MaxInt64
			}
			var want []int64
			for i := range model {
				if i >= lo && i < hi {
					want = append(want, i)
				}
			}
			slices.Sort(want)
			require.Equal(t, want, collect(lo, hi), "step %d: each(%d, %d)", step, lo, hi)
			n := 0
			x.each(lo, hi, func(*page) bool { n++; return n < 2 })
			require.Equal(t, min(2, len(want)), n, "step %d: each stops when fn returns false", step)
		}
	}
	for i := range model {
		x.del(i)
	}
	require.Zero(t, x.len())
	require.Empty(t, x.chunks)
	require.Nil(t, x.get(0))

	// A chunk emptied and filled again is found through the map too.
	x.set(5, &page{idx: 5})
	x.del(5)
	x.set(6, &page{idx: 6})
	require.Nil(t, x.get(1000))
	require.Equal(t, []int64{6}, collect(0, math.MaxInt64))
}
