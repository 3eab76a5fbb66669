package ext4io

import (
	"math/bits"
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
// written too, and a cache entry filled from it agrees. A batch also
// replaces an unwritten entry whose bits are all set by a written one
// (mapper.promoteWritten), so that a preallocated file written through
// maps as a written one.
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
// read with atomic loads; the region directory is a two-level radix of
// atomic pointers, filled by compare-and-swap (lock-free reads, three loads
// to a region). A lookup racing a completion sees the block unwritten or
// written: the write has not returned yet.
type convBits struct {
	// r0 is region 0, the first escRegion blocks, which hold every small
	// file: kept out of the directory, it costs such a file one region
	// instead of the directory's two levels (12 KiB more).
	r0 atomic.Pointer[convRegion]
	// dir is nil until the first region past region 0: lookups skip the
	// directory before. Region r > 0 (lblk >> escRegionShift) is
	// dir[r>>convLeafShift][r&(convLeafLen-1)].
	dir atomic.Pointer[convDir]
}

// used reports whether a bit was ever set (a region exists).
func (c *convBits) used() bool { return c.r0.Load() != nil || c.dir.Load() != nil }

const (
	convLeafShift = 10
	convLeafLen   = 1 << convLeafShift
	// Regions of 32-bit block numbers, in leaves of convLeafLen.
	convDirLen = 1 << (32 - escRegionShift - convLeafShift)
)

type (
	convDir    [convDirLen]atomic.Pointer[convLeaf]    // 4 KiB
	convLeaf   [convLeafLen]atomic.Pointer[convRegion] // 8 KiB, allocated as blocks that far are written
	convRegion [escRegion / 64]atomic.Uint64           // 1 KiB
)

// region returns region r, or nil if no bit was ever set in it.
func (c *convBits) region(r uint32) *convRegion {
	if r == 0 {
		return c.r0.Load()
	}
	d := c.dir.Load()
	if d == nil {
		return nil
	}
	l := d[r>>convLeafShift].Load()
	if l == nil {
		return nil
	}
	return l[r&(convLeafLen-1)].Load()
}

// regionOrNew returns region r, creating it (and the directory levels to
// it) if needed.
func (c *convBits) regionOrNew(r uint32) *convRegion {
	if r == 0 {
		reg := c.r0.Load()
		if reg == nil {
			c.r0.CompareAndSwap(nil, new(convRegion))
			reg = c.r0.Load()
		}
		return reg
	}
	d := c.dir.Load()
	if d == nil {
		c.dir.CompareAndSwap(nil, new(convDir))
		d = c.dir.Load()
	}
	ls := &d[r>>convLeafShift]
	l := ls.Load()
	if l == nil {
		ls.CompareAndSwap(nil, new(convLeaf))
		l = ls.Load()
	}
	rs := &l[r&(convLeafLen-1)]
	reg := rs.Load()
	if reg == nil {
		rs.CompareAndSwap(nil, new(convRegion))
		reg = rs.Load()
	}
	return reg
}

// set marks [lblk, lblk+n) written.
func (c *convBits) set(lblk, n uint32) {
	for n > 0 {
		r, off := lblk>>escRegionShift, lblk&(escRegion-1)
		k := min(n, escRegion-off)
		c.regionOrNew(r).update(off, k, true)
		lblk, n = lblk+k, n-k
	}
}

// clear forgets [lblk, lblk+n) (n may reach past the largest file). The
// regions stay (a completion in another part of a region may be setting
// bits in it): a region costs 1 KiB until the inode leaves memory.
func (c *convBits) clear(lblk, n uint64) {
	if n == 0 {
		return
	}
	end := lblk + n
	if lblk < escRegion {
		if reg := c.r0.Load(); reg != nil {
			reg.update(uint32(lblk), uint32(min(end, escRegion)-lblk), false)
		}
	}
	d := c.dir.Load()
	if d == nil || end <= escRegion {
		return
	}
	first, last := uint32(max(lblk>>escRegionShift, 1)), uint32(min(end-1, 1<<32-1)>>escRegionShift)
	for li := first >> convLeafShift; li <= last>>convLeafShift; li++ {
		l := d[li].Load()
		if l == nil {
			continue
		}
		lo := max(first, li<<convLeafShift)
		hi := min(last, li<<convLeafShift|(convLeafLen-1))
		for r := lo; r <= hi; r++ {
			reg := l[r&(convLeafLen-1)].Load()
			if reg == nil {
				continue
			}
			base := uint64(r) << escRegionShift
			s, e := max(base, lblk), min(base+escRegion, end)
			reg.update(uint32(s-base), uint32(e-s), false)
		}
	}
}

// run reports whether lblk is marked written and how many blocks from
// lblk, at most max and never past lblk's region, share that state.
func (c *convBits) run(lblk, max uint32) (written bool, n uint32) {
	off := lblk & (escRegion - 1)
	max = min(max, escRegion-off)
	reg := c.region(lblk >> escRegionShift)
	if reg == nil {
		return false, max
	}
	return reg.run(off, max)
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
