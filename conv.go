package ext4io

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ext4io/ext4io/esc"
	"github.com/ext4io/ext4io/extent"
)

// Queued conversions.
//
// A direct write into unwritten blocks under the shared inode lock does
// not change the extent tree. Its completion queues the conversion on the
// inode (convQueue) and marks the blocks written beside the extent-status
// cache's unwritten entry (convbits.go), which every lookup consults; the
// tree takes the queued conversions in batches, sorted, one tree change
// per run:
//
//   - at every journal commit, before the pending metadata is logged
//     (txnGate held exclusively: no write is in flight), so a commit,
//     Sync and Close always include every completed write;
//   - before any operation under the exclusive inode lock (truncate,
//     fallocate, exclusive writes, eviction) and before Extents, so the
//     tree is exact whenever anything but a lookup reads or rewrites it;
//   - when an inode's queue reaches convQueueMax, by the write that
//     filled it.
//
// A conversion is logged only after its data reached the device (the
// completion queues it), and the commit's preflush makes the data
// durable before the commit block, as for a conversion made in the
// completion. Until the conversion reaches the tree, an extent-status
// cache miss answered from the tree is corrected by the queue
// (mapper.diskLookup), so a reclaimed cache entry never turns the data
// back into zeroes. The runs are applied to the tree before they leave
// the queue.
//
// This removes both extent-tree changes (the split at submission and the
// conversion at completion) and their lock (dataMu) from the write path:
// a write into unwritten blocks costs a queue append and a few atomic
// operations. What is left is the batch, whose cost per run falls as
// batches grow: sorted runs share the tree blocks they change, each
// encoded, checksummed and logged once per batch.
//
// ENOSPC: the queued conversions split extents, so the tree may need new
// blocks when it takes them. A write queues its conversion only after
// reserving the blocks the conversion can need (convresv.go); otherwise
// it splits at submission as with Options.Tuning.EagerConversions and fails
// before writing when no tree block is left. So a write that returned
// success is made durable by the next commit whatever happens to free
// space afterwards (TestQueuedConversionsNoSpace).

// convQueueMax is the length at which a write applies its inode's queue.
// 8192 runs (128 KiB of queue per inode) share the tree blocks they change
// several times over in a file of a few hundred thousand extents, so
// longer batches made random writes into a fallocated file faster, up to
// this length. The price is a longer batch: the write that fills the
// queue, or a commit, applies all of it (docs/performance.md, "Writes
// into fallocated (unwritten) space", has the figures).
const convQueueMax = 8192

// convRun is one completed write's conversion: logical blocks [lblk,
// lblk+n) at physical block pblk onwards.
type convRun struct {
	lblk, n uint32
	pblk    uint64
}

func (r convRun) end() uint32 { return r.lblk + r.n }

// convQueue holds an inode's queued conversions.
type convQueue struct {
	mu   sync.Mutex
	runs []convRun // guarded by mu
	// size mirrors len(runs) for lock-free checks; changed under mu.
	size atomic.Int32
	// applying is held by the one write that applies a full queue, so
	// that the writes queueing meanwhile do not all wait to apply it.
	applying atomic.Bool
	// bits marks the blocks queued writes made written, which the
	// extent-status cache keeps unwritten (convbits.go).
	bits convBits
	// resvHeld: the inode holds its share of the volume's conversion
	// reservation (convresv.go). Set under convResv.mu.
	resvHeld atomic.Bool
}

func (q *convQueue) pending() bool { return q.size.Load() > 0 }

// add queues r and returns the queue's new length.
func (q *convQueue) add(r convRun) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.runs = append(q.runs, r)
	q.size.Store(int32(len(q.runs)))
	return len(q.runs)
}

// overlay corrects e, the on-disk mapping holding lblk, with the queued
// runs: the written run holding lblk if one does, else e clipped to the
// blocks around lblk that no queued run covers.
func (q *convQueue) overlay(e esc.Extent, lblk uint32) esc.Extent {
	if e.Status != esc.Unwritten || !q.pending() {
		return e
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	lo, hi := e.Lblk, e.End()
	for _, r := range q.runs {
		s, f := max(r.lblk, lo), min(r.end(), hi)
		switch {
		case s >= f: // outside what is left of e
		case s <= lblk && lblk < f:
			return esc.Extent{Lblk: s, Len: f - s, Pblk: e.Pblk + uint64(s-e.Lblk), Status: esc.Written}
		case f <= lblk:
			lo = f
		default:
			hi = s
		}
	}
	return esc.Extent{Lblk: lo, Len: hi - lo, Pblk: e.Pblk + uint64(lo-e.Lblk), Status: esc.Unwritten}
}

// queueConversions reports whether a direct write on n queues its
// conversion (see above), reserving the space the conversion can need
// (convresv.go); it is decided per write at submission.
func (v *Volume) queueConversions(n *inode) bool {
	return v.queueConv && v.reserveRun(n)
}

// queueConversion queues the conversion of a completed direct write (the
// caller holds n.mu shared, inside an operation). full reports that the
// queue reached convQueueMax and the caller is the one to apply it (then
// it calls applyFull).
func (f *File) queueConversion(r convRun) (full bool) {
	n, v := f.n, f.v
	if n.conv.size.Load() == 0 {
		v.convMu.Lock()
		v.convInodes[n] = struct{}{}
		v.convMu.Unlock()
	}
	k := n.conv.add(r)
	v.stats.convQueued.Add(1)
	return k >= convQueueMax && n.conv.applying.CompareAndSwap(false, true)
}

// applyFull applies n's full queue for the write queueConversion chose.
func (v *Volume) applyFull(n *inode) error {
	defer n.conv.applying.Store(false)
	n.dataMu.Lock()
	defer n.dataMu.Unlock()
	return v.applyConversionsLocked(n)
}

// applyConversionsLocked moves n's queued conversions into its extent
// tree and writes the inode if the tree's root or i_blocks changed. The
// caller is inside an operation and holds n.mu exclusively or dataMu, or
// holds txnGate exclusively (a commit).
func (v *Volume) applyConversionsLocked(n *inode) error {
	if !n.conv.pending() {
		return nil
	}
	q := &n.conv
	bufs := convBufPool.Get().(*convBufs)
	defer bufs.put()
	q.mu.Lock()
	runs := append(bufs.runs[:0], q.runs...)
	q.mu.Unlock()
	runs, bufs.tmp = sortRuns(runs, bufs.tmp)
	bufs.runs = runs
	// Adjacent runs (both logically and physically) convert as one.
	merged := bufs.merged[:0]
	for i := 0; i < len(runs); {
		r := runs[i]
		for i++; i < len(runs) && runs[i].lblk <= r.end() && runs[i].pblk-uint64(runs[i].lblk) == r.pblk-uint64(r.lblk); i++ {
			r.n = max(r.end(), runs[i].end()) - r.lblk
		}
		merged = append(merged, extent.Run{Lblk: r.lblk, Len: r.n})
	}
	bufs.merged = merged
	// One tree change for the batch, each tree block written once; short
	// of space, run by run, keeping what succeeds.
	t := n.m.tree
	n.convBatch = true
	defer func() { n.convBatch = false }()
	err := t.MarkWrittenExactRuns(merged, true)
	if errors.Is(err, ErrNoSpace) {
		for _, r := range merged {
			if err = t.MarkWrittenExact(r.Lblk, r.Len, true); err != nil {
				err = fmt.Errorf("ext4io: inode %d: converting queued blocks %d+%d: %w", n.ino, r.Lblk, r.Len, err)
				break
			}
		}
	} else if err != nil {
		err = fmt.Errorf("ext4io: inode %d: converting %d queued runs: %w", n.ino, len(merged), err)
	}
	if err == nil {
		// Every run taken is in the tree now; writes may have queued
		// more meanwhile (under a shared n.mu).
		q.mu.Lock()
		q.runs = append(q.runs[:0], q.runs[len(runs):]...)
		q.size.Store(int32(len(q.runs)))
		q.mu.Unlock()
		v.stats.convBatches.Add(1)
		n.m.promoteWritten(runs)
	}
	// As after any shared-lock conversion: the inode goes with the tree
	// blocks if its root or i_blocks changed, also after a failure.
	if werr := v.writeMappingLocked(n); err == nil {
		err = werr
	}
	return err
}

// convBufs are a batch's scratch slices, pooled: a full queue's copy is
// 128 KiB.
type convBufs struct {
	runs, tmp []convRun
	merged    []extent.Run
}

var convBufPool = sync.Pool{New: func() any { return new(convBufs) }}

// put returns b to the pool unless a slice grew past a full queue's size.
func (b *convBufs) put() {
	if cap(b.runs) > 2*convQueueMax || cap(b.tmp) > 2*convQueueMax || cap(b.merged) > 2*convQueueMax {
		return
	}
	convBufPool.Put(b)
}

// sortRuns sorts runs by lblk, stably, and returns the sorted slice and
// the other buffer (tmp, grown as needed, for the caller to keep). Above
// a few hundred runs it is a least-significant-digit radix sort on the
// 32-bit key, 11 bits a pass, skipping the passes in which every key has
// the same digit: a comparison sort of a full queue of random runs cost
// more than a quarter of the batch.
func sortRuns(runs, tmp []convRun) (sorted, other []convRun) {
	if len(runs) < 256 {
		slices.SortStableFunc(runs, func(a, b convRun) int { return cmp.Compare(a.lblk, b.lblk) })
		return runs, tmp
	}
	if cap(tmp) < len(runs) {
		tmp = make([]convRun, len(runs))
	}
	src, dst := runs, tmp[:len(runs)]
	for shift := uint(0); shift < 32; shift += 11 {
		var count [1 << 11]int
		for _, r := range src {
			count[r.lblk>>shift&(1<<11-1)]++
		}
		if count[src[0].lblk>>shift&(1<<11-1)] == len(src) {
			continue // one digit for all: the order stands
		}
		pos := 0
		for d, c := range count {
			count[d] = pos
			pos += c
		}
		for _, r := range src {
			d := r.lblk >> shift & (1<<11 - 1)
			dst[count[d]] = r
			count[d]++
		}
		src, dst = dst, src
	}
	return src, dst
}

// promoteWritten turns into written entries the unwritten entries of the
// extent-status cache, in the regions runs (sorted) touched, whose every
// block queued writes have made written (convbits.go): once a file's
// preallocated blocks have all been written, its overwrites find written
// entries instead of consulting the bitmap. The caller has just applied a
// batch, under dataMu, n.mu exclusively or txnGate exclusively.
//
// The bits stay set: a lookup that read the unwritten entry before the
// change still finds the blocks written, and the bits are cleared with
// the next change of the mapping (mapper.set, mapper.drop), as the
// invariant in convbits.go asks. An entry whose blocks still have runs in
// the queue (queued after the batch was taken) answers written as the
// bits did; the tree takes those runs with the next batch.
func (m *mapper) promoteWritten(runs []convRun) {
	if m.conv == nil {
		return
	}
	var promote []esc.Extent
	last := uint64(1) << 63 // no region yet
	for _, r := range runs {
		for reg := uint64(r.lblk) >> escRegionShift; reg <= uint64(r.end()-1)>>escRegionShift; reg++ {
			if reg == last {
				continue
			}
			last = reg
			lo, hi := regionOf(uint32(reg << escRegionShift))
			m.escRange(uint32(lo), uint32(hi-lo), func(e esc.Extent) bool {
				if e.Status == esc.Unwritten {
					if w, k := m.conv.bits.run(e.Lblk, e.Len); w && k == e.Len {
						promote = append(promote, e)
					}
				}
				return true
			})
		}
	}
	if len(promote) == 0 {
		return
	}
	for _, e := range promote {
		e.Status = esc.Written
		if m.escInsert(e) != nil {
			break // the cache keeps the unwritten entry; the bits still answer
		}
	}
	m.seq.Add(1) // cached mappings of the old entries are stale
}

// applyAllConversions applies every inode's queued conversions, for a
// commit (txnGate held exclusively).
func (v *Volume) applyAllConversions() error {
	v.convMu.Lock()
	ns := make([]*inode, 0, len(v.convInodes))
	for n := range v.convInodes {
		ns = append(ns, n)
	}
	clear(v.convInodes)
	v.convMu.Unlock()
	var first error
	for _, n := range ns {
		n.dataMu.Lock()
		var err error
		if !n.freed {
			err = v.applyConversionsLocked(n)
		}
		if err != nil || n.conv.pending() {
			// Still queued: the next commit tries again.
			v.convMu.Lock()
			v.convInodes[n] = struct{}{}
			v.convMu.Unlock()
		}
		n.dataMu.Unlock()
		if first == nil {
			first = err
		}
	}
	v.trimConvResv(ns)
	return first
}

// dropFrom forgets the queued conversions of blocks at or past lblk (a
// truncate or eviction is removing them). The caller holds the inode's
// mu exclusively.
func (q *convQueue) dropFrom(lblk uint32) {
	if !q.pending() {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	runs := q.runs[:0]
	for _, r := range q.runs {
		if r.lblk < lblk {
			r.n = min(r.end(), lblk) - r.lblk
			runs = append(runs, r)
		}
	}
	clear(q.runs[len(runs):])
	q.runs = runs
	q.size.Store(int32(len(runs)))
}

// conversionsQueued reports whether any inode has queued conversions
// that the next commit applies.
func (v *Volume) conversionsQueued() bool {
	if !v.queueConv {
		return false
	}
	v.convMu.Lock()
	defer v.convMu.Unlock()
	return len(v.convInodes) > 0
}
