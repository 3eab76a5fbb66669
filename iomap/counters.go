package iomap

import (
	"sync/atomic"
	"unsafe"

	"github.com/ext4io/ext4io/internal/stripe"
)

// OpCounts counts Begin or End calls by request kind. A call is counted
// once, under the first kind that applies in the order Writeback, Report,
// Zero, Write, Read; Direct additionally counts calls with the Direct flag.
type OpCounts struct {
	Read, Write, Zero, Report, Writeback int64
	Direct                               int64
}

// Counters is a snapshot of a CounterSet. Subtract two snapshots to
// measure an operation.
type Counters struct {
	Begins, Ends OpCounts
	// DeviceReads and DeviceWrites count ReadAt and WriteAt calls issued by
	// this package (direct I/O, page read-in, write-back, sub-block zeroing).
	DeviceReads, DeviceWrites int64
	// ZeroedBytes counts bytes zeroed on the device by direct I/O sub-block
	// zeroing and in the page cache by ZeroRange.
	ZeroedBytes int64
	// EndIOBytes counts bytes reported to DioOptions.EndIO.
	EndIOBytes int64
	// StaleMappings counts mappings dropped because Valid said stale.
	StaleMappings int64
	// Page cache: pages inserted, evicted, written back, dropped by
	// Invalidate/Forget, and write-backs forced by eviction.
	PagesCached, PagesEvicted, PagesWrittenBack, PagesInvalidated int64
	EvictionWritebacks                                            int64
}

// Sub returns c - o, field by field.
func (c Counters) Sub(o Counters) Counters {
	sub := func(a, b OpCounts) OpCounts {
		return OpCounts{a.Read - b.Read, a.Write - b.Write, a.Zero - b.Zero, a.Report - b.Report,
			a.Writeback - b.Writeback, a.Direct - b.Direct}
	}
	return Counters{
		Begins: sub(c.Begins, o.Begins), Ends: sub(c.Ends, o.Ends),
		DeviceReads: c.DeviceReads - o.DeviceReads, DeviceWrites: c.DeviceWrites - o.DeviceWrites,
		ZeroedBytes: c.ZeroedBytes - o.ZeroedBytes, EndIOBytes: c.EndIOBytes - o.EndIOBytes,
		StaleMappings: c.StaleMappings - o.StaleMappings,
		PagesCached:   c.PagesCached - o.PagesCached, PagesEvicted: c.PagesEvicted - o.PagesEvicted,
		PagesWrittenBack: c.PagesWrittenBack - o.PagesWrittenBack, PagesInvalidated: c.PagesInvalidated - o.PagesInvalidated,
		EvictionWritebacks: c.EvictionWritebacks - o.EvictionWritebacks,
	}
}

const (
	kRead = iota
	kWrite
	kZero
	kReport
	kWriteback
	kDirect
	numKinds
)

type atomicCounters struct {
	begins, ends [numKinds]atomic.Int64
	// dioReads and dioWrites count direct I/O Begin calls and their End
	// calls together, one add for the pair (kinds Read or Write, and
	// Direct): four atomic adds per segment were a quarter of the
	// package's cost on an overwrite. dioReadsDev and dioWritesDev count
	// the same for segments that issued one device read or write, which
	// they count too (DeviceReads, DeviceWrites).
	dioReads, dioWrites, dioReadsDev, dioWritesDev              atomic.Int64
	devReads, devWrites, zeroed, endIO, stale                   atomic.Int64
	pagesCached, pagesEvicted, pagesWritten, pagesInval, evicWb atomic.Int64
}

// A CounterSet counts the calls and device I/O of the operations that
// are given it: a PageCache counts into its own (PageCache.Counters),
// DirectRead and DirectWrite into DioOptions.Counters, Fiemap into
// FiemapOptions.Counters and SeekHole and SeekData into
// SeekOptions.Counters, each when set. Iter counts nothing. The zero
// value is ready; a CounterSet is safe for concurrent use and must not be
// copied after first use.
//
// The counters are striped over cache lines (see package stripe): direct
// I/O counts on the stripe of its buffer, so concurrent I/Os from
// different goroutines do not move one cache line between CPUs several
// times per operation.
type CounterSet struct {
	stripes [stripe.N]struct {
		atomicCounters
		_ [(128 - unsafe.Sizeof(atomicCounters{})%128) % 128]byte
	}
}

// first returns stripe 0, for the paths that are not per-I/O hot, or nil
// for a nil s (nothing counted).
func (s *CounterSet) first() *atomicCounters {
	if s == nil {
		return nil
	}
	return &s.stripes[0].atomicCounters
}

// forBuf returns the stripe for an I/O buffer, or nil for a nil s.
func (s *CounterSet) forBuf(p []byte) *atomicCounters {
	if s == nil {
		return nil
	}
	return &s.stripes[stripe.OfBuf(p)].atomicCounters
}

func kindOf(f Flags) int {
	switch {
	case f&Writeback != 0:
		return kWriteback
	case f&Report != 0:
		return kReport
	case f&Zero != 0:
		return kZero
	case f&Write != 0:
		return kWrite
	}
	return kRead
}

// countBegin and countEnd count a call of kind f; a nil a counts nothing.
func (a *atomicCounters) countBegin(f Flags) {
	if a == nil {
		return
	}
	a.begins[kindOf(f)].Add(1)
	if f&Direct != 0 {
		a.begins[kDirect].Add(1)
	}
}

func (a *atomicCounters) countEnd(f Flags) {
	if a == nil {
		return
	}
	a.ends[kindOf(f)].Add(1)
	if f&Direct != 0 {
		a.ends[kDirect].Add(1)
	}
}

// Read returns a snapshot of s: the sums over the stripes (zero for a
// nil s).
func (s *CounterSet) Read() Counters {
	var t Counters
	if s == nil {
		return t
	}
	ops := func(d *OpCounts, v *[numKinds]atomic.Int64) {
		d.Read += v[kRead].Load()
		d.Write += v[kWrite].Load()
		d.Zero += v[kZero].Load()
		d.Report += v[kReport].Load()
		d.Writeback += v[kWriteback].Load()
		d.Direct += v[kDirect].Load()
	}
	for i := range s.stripes {
		a := &s.stripes[i].atomicCounters
		ops(&t.Begins, &a.begins)
		ops(&t.Ends, &a.ends)
		rd, wd := a.dioReadsDev.Load(), a.dioWritesDev.Load()
		r, w := a.dioReads.Load()+rd, a.dioWrites.Load()+wd
		for _, d := range []*OpCounts{&t.Begins, &t.Ends} {
			d.Read += r
			d.Write += w
			d.Direct += r + w
		}
		t.DeviceReads += a.devReads.Load() + rd
		t.DeviceWrites += a.devWrites.Load() + wd
		t.ZeroedBytes += a.zeroed.Load()
		t.EndIOBytes += a.endIO.Load()
		t.StaleMappings += a.stale.Load()
		t.PagesCached += a.pagesCached.Load()
		t.PagesEvicted += a.pagesEvicted.Load()
		t.PagesWrittenBack += a.pagesWritten.Load()
		t.PagesInvalidated += a.pagesInval.Load()
		t.EvictionWritebacks += a.evicWb.Load()
	}
	return t
}
