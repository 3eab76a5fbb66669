package ext4io

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// Written blocks inside unwritten extents.
//
// A queued conversion (conv.go) leaves the extent tree unwritten until a
// batch takes it; the extent-status cache must meanwhile answer "written"
// for the blocks, or a read would return zeroes. Recording each write in
// the cache splits its unwritten entry in three: with 4 KiB random writes
// into a preallocated file the cache grows to one entry per write, and
// every completion pays for a cache insert and every lookup for a walk of
// a large tree: in a CPU profile of the disk bench (16 jobs, 1.5 s of
// writes into preallocated space) the two took 0.47 s of CPU, as much as
// the tree's batches.
//
// convBits records instead, per 8192-block cache region, a bitmap of the
// blocks queued writes made written. The cache keeps its unwritten entry
// whole; mapper.lookup corrects an unwritten answer with the bitmap (the
// block is written at the physical block the entry gives). Set bits stay
// true after a batch converts the blocks in the tree: the tree then says
// written too, and a cache entry filled from it agrees.
//
// Invariant: a bit is set only for a block whose data a completed direct
// write put on the device at the physical block the unwritten mapping
// gives, and only by that write's completion; every other change of a
// block's mapping in the cache (mapper.set, mapper.drop: punch, truncate,
// collapse and insert, allocation, conversion, eviction) clears its bits
// first. So a set bit never outlives the mapping it was set in, and a
// freed and reallocated block never reads as written.
//
// Concurrency: bits are set with atomic ORs under the shared inode lock
// (completions), cleared under the exclusive inode lock or dataMu, and
// read with atomic loads; the region directory is a sync.Map (lock-free
// reads). A lookup racing a completion sees the block unwritten or
// written: the write has not returned yet.
type convBits struct {
	used    atomic.Bool // set with the first region: lookups skip the directory before
	regions sync.Map    // region number (lblk >> escRegionShift) -> *convRegion
}

type convRegion [escRegion / 64]atomic.Uint64

// set marks [lblk, lblk+n) written.
func (c *convBits) set(lblk, n uint32) {
	for n > 0 {
		r, off := lblk>>escRegionShift, lblk&(escRegion-1)
		k := min(n, escRegion-off)
		reg, ok := c.regions.Load(r)
		if !ok {
			reg, _ = c.regions.LoadOrStore(r, new(convRegion))
			c.used.Store(true)
		}
		reg.(*convRegion).update(off, k, true)
		lblk, n = lblk+k, n-k
	}
}

// clear forgets [lblk, lblk+n) (n may reach past the largest file). The
// regions stay (a completion in another part of a region may be setting
// bits in it): a region costs 1 KiB until the inode leaves memory.
func (c *convBits) clear(lblk, n uint64) {
	if !c.used.Load() || n == 0 {
		return
	}
	end := lblk + n
	first, last := uint32(lblk>>escRegionShift), uint32(min(end-1, 1<<32-1)>>escRegionShift)
	visit := func(r uint32, reg *convRegion) {
		lo := uint64(r) << escRegionShift
		s, e := max(lo, lblk), min(lo+escRegion, end)
		reg.update(uint32(s-lo), uint32(e-s), false)
	}
	if last-first < 64 {
		for r := first; ; r++ {
			if reg, ok := c.regions.Load(r); ok {
				visit(r, reg.(*convRegion))
			}
			if r == last {
				break
			}
		}
		return
	}
	c.regions.Range(func(k, v any) bool {
		if r := k.(uint32); r >= first && r <= last {
			visit(r, v.(*convRegion))
		}
		return true
	})
}

// run reports whether lblk is marked written and how many blocks from
// lblk, at most max and never past lblk's region, share that state.
func (c *convBits) run(lblk, max uint32) (written bool, n uint32) {
	off := lblk & (escRegion - 1)
	max = min(max, escRegion-off)
	if !c.used.Load() {
		return false, max
	}
	reg, ok := c.regions.Load(lblk >> escRegionShift)
	if !ok {
		return false, max
	}
	return reg.(*convRegion).run(off, max)
}

// update sets (on) or clears the bits of [off, off+n) of the region.
func (reg *convRegion) update(off, n uint32, on bool) {
	for n > 0 {
		w, b := off/64, off%64
		k := min(n, 64-b)
		mask := ^uint64(0) >> (64 - k) << b
		if on {
			if reg[w].Load()&mask != mask {
				reg[w].Or(mask)
			}
		} else if reg[w].Load()&mask != 0 {
			reg[w].And(^mask)
		}
		off, n = off+k, n-k
	}
}

// run is convBits.run inside one region.
func (reg *convRegion) run(off, max uint32) (written bool, n uint32) {
	w, b := off/64, off%64
	x := reg[w].Load() >> b
	written = x&1 != 0
	for {
		if written {
			x = ^x
		}
		// x has a 1 at the first block past the run (from bit b of word w).
		if x != 0 {
			if k := uint32(bits.TrailingZeros64(x)); k < 64-b {
				return written, min(n+k, max)
			}
		}
		n += 64 - b
		if n >= max || w+1 >= uint32(len(reg)) {
			return written, min(n, max)
		}
		w, b = w+1, 0
		x = reg[w].Load()
	}
}
