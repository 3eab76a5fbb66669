// Package stripe spreads hot counters over cache lines.
//
// An atomic add writes its cache line; when goroutines on
// different CPUs do it to the same line on every I/O, the line moves
// between CPUs each time and each move costs more than the add itself.
// Striped state gives each caller one of N lines, chosen from a hint the
// caller owns (the address of its I/O buffer, a block number), so
// concurrent callers mostly touch different lines. Go has no CPU or
// goroutine id to pick a line with; a hint that differs between
// goroutines does as well for the common case of one buffer per
// goroutine.
package stripe

import (
	"sync/atomic"
	"unsafe"
)

// N is the number of stripes, a power of two.
const N = 8

// lineSize is the cache line size the padding assumes (x86-64, arm64).
const lineSize = 64

// Of returns the stripe for hint, spreading nearby values apart.
func Of(hint uint64) int { return int(hint * 0x9E3779B97F4A7C15 >> 61) }

// OfBuf returns the stripe for an I/O buffer: the hint is the page
// number of its first byte, so buffers on different pages mostly get
// different stripes.
func OfBuf(p []byte) int { return Of(uint64(uintptr(unsafe.Pointer(unsafe.SliceData(p)))) >> 12) }

// Counter is an event counter striped over N cache lines. The zero value
// is ready to use.
type Counter struct {
	s [N]struct {
		v atomic.Uint64
		_ [lineSize - 8]byte
	}
}

// Add adds d on stripe i (any int; reduced modulo N).
func (c *Counter) Add(i int, d uint64) { c.s[i&(N-1)].v.Add(d) }

// Load returns the sum of the stripes. It is not a snapshot of one
// instant: adds that run meanwhile may or may not be counted.
func (c *Counter) Load() uint64 {
	var t uint64
	for i := range c.s {
		t += c.s[i].v.Load()
	}
	return t
}
