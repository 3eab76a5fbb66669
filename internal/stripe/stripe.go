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
	"sync"
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

// RWMutex is a reader/writer lock whose readers take one of N reader
// locks, chosen by a hint as for Counter, and whose writer takes all of
// them. Readers with different hints then share no cache line, where a
// sync.RWMutex moves its reader count between CPUs on every RLock and
// RUnlock. The writer pays N locks, so it suits locks that readers take
// on every I/O and writers rarely. The zero value is an unlocked mutex.
//
// As with sync.RWMutex, a waiting writer blocks new readers (of the
// stripes it has taken or waits for), and a reader must not lock again
// while it holds a stripe.
type RWMutex struct {
	_ [lineSize]byte // keeps stripe 0 off the line of the field before
	s [N]struct {
		mu sync.RWMutex
		// Two lines per stripe: however the struct is aligned, no
		// line holds parts of two stripes' locks.
		_ [2*lineSize - unsafe.Sizeof(sync.RWMutex{})]byte
	}
}

// RLock takes stripe i (any int; reduced modulo N) for reading and
// returns the stripe to pass to RUnlock.
func (m *RWMutex) RLock(i int) int {
	i &= N - 1
	m.s[i].mu.RLock()
	return i
}

// RUnlock releases the stripe RLock returned.
func (m *RWMutex) RUnlock(i int) { m.s[i&(N-1)].mu.RUnlock() }

// Lock takes every stripe for writing, in order.
func (m *RWMutex) Lock() {
	for i := range m.s {
		m.s[i].mu.Lock()
	}
}

// TryLock takes every stripe for writing if none is held, without
// waiting, and reports whether it did; on false it holds none.
func (m *RWMutex) TryLock() bool {
	for i := range m.s {
		if !m.s[i].mu.TryLock() {
			for j := range i {
				m.s[j].mu.Unlock()
			}
			return false
		}
	}
	return true
}

// Unlock releases the write lock.
func (m *RWMutex) Unlock() {
	for i := range m.s {
		m.s[i].mu.Unlock()
	}
}
