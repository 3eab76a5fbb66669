package ext4io

import (
	"sync"
	"sync/atomic"

	"github.com/ext4io/ext4io/esc"
)

// The appended Delayed run.
//
// A buffered write that lands on a hole marks its blocks Delayed. An
// extent-status insert for every 4 KiB append would cut the cached hole
// and extend the Delayed entry before it: six tree walks under the tree's
// lock per write. Instead, the mapper keeps the Delayed
// blocks of consecutive appends as one run of its own (delayRun) and
// inserts the whole run into the cache at once, before anything reads or
// changes the cache: every path to the extent-status cache (escFill,
// escInsert, escRemove, escRange) flushes the run first, so a lookup, a
// write-back, a truncate or a report sees the blocks Delayed exactly as
// if each write had inserted them.
//
// A write extends the run without a lookup when it starts where the run
// ends, stays inside the hole the run was started in (known from the
// lookup that started it), and the mapping has not changed since the run
// last grew (seq). Anything else takes the ordinary path: a lookup
// (which flushes the run) and a new run. Reservations are unchanged: each
// write reserves its blocks (alloc.Reserve) before they join the run, and
// inode.delayed counts them as before.
//
// Locks: the run is extended only by buffered writes, under the inode
// lock held exclusively and dataMu; it is flushed by whoever touches the
// cache next, under the inode lock (shared or exclusive) or dataMu, so
// two flushers may race: delayRun.mu serializes them. Lock order: inode
// mu, dataMu, delayRun.mu, then the extent-status trees' locks.
type delayRun struct {
	// n is mu's run length, readable without mu: 0 says there is nothing
	// to flush, so lookups pay one atomic load. Stored under mu.
	n  atomic.Uint32
	mu sync.Mutex
	// Guarded by mu (and only grown under the inode lock held
	// exclusively with dataMu): the run is [lblk, lblk+n.Load()), all
	// Delayed and not yet in the extent-status cache; [lblk, holeEnd) was
	// a hole when the run was started; seq is the mapper's seq after the
	// run last grew.
	lblk    uint32
	holeEnd uint32
	seq     uint64
}

// delayedAppendable returns how many blocks of [lblk, end) a buffered
// write can add to the run without a lookup (0 if it cannot), and the end
// of the run's hole to pass to appendDelayed. The caller holds the inode
// lock exclusively and dataMu.
func (m *mapper) delayedAppendable(lblk, end uint64) (n, holeEnd uint64) {
	r := &m.run
	if r.n.Load() == 0 || m.tree == nil {
		return 0, 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	k := r.n.Load()
	if k == 0 || lblk != uint64(r.lblk)+uint64(k) || lblk >= uint64(r.holeEnd) || r.seq != m.seq.Load() {
		return 0, 0
	}
	return min(end, uint64(r.holeEnd)) - lblk, uint64(r.holeEnd)
}

// appendDelayed records [lblk, lblk+n) Delayed, its blocks reserved by the
// caller: appended to the run after delayedAppendable allowed it, or else
// as a new run in a hole that a lookup showed reaching holeEnd (the old
// run, if any, is flushed first). It does what set does for a Delayed
// extent: clears the range's conversion bits and bumps seq (Delayed
// ranges are not tracked for fast commits). The caller holds the inode
// lock exclusively and dataMu.
func (m *mapper) appendDelayed(lblk, n, holeEnd uint64) error {
	if m.tree == nil || lblk+n > esc.MaxBlocks || holeEnd > esc.MaxBlocks || lblk+n > holeEnd {
		return m.set(esc.Extent{Lblk: uint32(lblk), Len: uint32(n), Status: esc.Delayed})
	}
	if m.conv != nil {
		m.conv.bits.clear(lblk, n)
	}
	r := &m.run
	r.mu.Lock()
	cur := r.n.Load()
	if cur == 0 || lblk != uint64(r.lblk)+uint64(cur) || r.seq != m.seq.Load() {
		if err := m.flushRunLocked(); err != nil {
			r.mu.Unlock()
			return err
		}
		r.lblk, r.holeEnd, cur = uint32(lblk), uint32(holeEnd), 0
	}
	r.seq = m.seq.Add(1)
	r.n.Store(cur + uint32(n))
	r.mu.Unlock()
	return nil
}

// flushRun inserts the run into the extent-status cache. Every path to
// the cache calls it first.
func (m *mapper) flushRun() error {
	if m.run.n.Load() == 0 {
		return nil
	}
	m.run.mu.Lock()
	defer m.run.mu.Unlock()
	return m.flushRunLocked()
}

// flushRunLocked is flushRun with run.mu held.
func (m *mapper) flushRunLocked() error {
	r := &m.run
	n := r.n.Load()
	if n == 0 {
		return nil
	}
	if err := m.escInsertNow(esc.Extent{Lblk: r.lblk, Len: n, Status: esc.Delayed}); err != nil {
		return err
	}
	r.n.Store(0)
	return nil
}

// discardRun forgets the run without caching it, for an inode whose
// cached state is dropped (its reservations are released by the caller
// from inode.delayed).
func (m *mapper) discardRun() {
	m.run.mu.Lock()
	m.run.n.Store(0)
	m.run.mu.Unlock()
}
