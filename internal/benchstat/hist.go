// Package benchstat holds the measuring and drawing helpers of ext4io's
// benchmarks: a log-linear latency histogram and a hand-written SVG bar
// chart. It has no dependencies outside the standard library.
//
// Histogram buckets (HDR-style, 16 sub-buckets per power of two):
//
//	value v (ns)   bucket index
//	0..15          v
//	>= 16          ((e-3) << 4) | ((v >> (e-4)) & 15),  e = floor(log2 v)
//
// Invariant: every value recorded in bucket i lies in [Low(i), High(i)], and
// High(i)-Low(i) < Low(i)/16, so a quantile read from the buckets is within
// 6.25% of the exact sample quantile.
package benchstat

import (
	"math"
	"math/bits"
	"time"
)

const (
	subBits    = 4
	subBuckets = 1 << subBits
	numBuckets = (64 - subBits + 1) << subBits
)

// Histogram records durations. It is not safe for concurrent use: give
// each goroutine its own and Merge them afterwards.
type Histogram struct {
	counts   [numBuckets]uint64
	n        uint64
	sum      uint64 // ns, saturating
	min, max uint64
}

func bucketOf(v uint64) int {
	if v < subBuckets {
		return int(v)
	}
	e := bits.Len64(v) - 1
	sub := (v >> (e - subBits)) & (subBuckets - 1)
	return (e-subBits+1)<<subBits | int(sub)
}

// bounds returns the smallest and largest value bucket i holds.
func bounds(i int) (lo, hi uint64) {
	if i < subBuckets {
		return uint64(i), uint64(i)
	}
	e := i>>subBits + subBits - 1
	sub := uint64(i & (subBuckets - 1))
	lo = (subBuckets + sub) << (e - subBits)
	return lo, lo + 1<<(e-subBits) - 1
}

// Record adds one duration; negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[bucketOf(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	if s := h.sum + v; s >= h.sum {
		h.sum = s
	} else {
		h.sum = math.MaxUint64
	}
}

// Merge adds o's samples to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	if s := h.sum + o.sum; s >= h.sum {
		h.sum = s
	} else {
		h.sum = math.MaxUint64
	}
}

// Count returns the number of samples.
func (h *Histogram) Count() uint64 { return h.n }

// Max returns the largest sample (0 when empty).
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean returns the average sample (0 when empty).
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / h.n)
}

// Quantile returns the q-quantile (0 <= q <= 1) as the middle of the bucket
// holding it, clamped to the observed range; 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := bounds(i)
			mid := lo + (hi-lo)/2
			return time.Duration(min(max(mid, h.min), h.max))
		}
	}
	return time.Duration(h.max)
}
