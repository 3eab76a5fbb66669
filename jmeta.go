package ext4io

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ext4io/ext4io/alloc"
	"github.com/ext4io/ext4io/extent"
	"github.com/ext4io/ext4io/internal/errs"
	"github.com/ext4io/ext4io/journal"
	"github.com/ext4io/ext4io/layout"
)

// Journaled metadata.
//
// jmeta is the alloc.MetaIO of a writable volume with a journal. Metadata
// blocks changed by an operation collect in the pending set (the running
// transaction, in jbd2's terms); reads see pending copies first, then the
// metadata cache (mdcache.go), which a miss fills from the journal's
// uncheckpointed copy or the device. A commit moves the
// pending set into one journal handle and commits it. Operations hold the
// volume's txnGate shared from their first metadata change to their last
// (beginOp/endOp), and a commit takes it exclusively, so no operation's
// changes are split between two transactions and every committed state is
// consistent.
//
// Freed metadata blocks are revoked in the transaction that frees them, so
// that replaying an older copy never overwrites a block reused since, and
// forgotten by the journal, so that a checkpoint never does either. Blocks
// that committed metadata may still map (tree, directory and data blocks
// unmapped by truncate, punch or unlink) become allocatable only once the
// freeing transaction has committed (freeMapped, alloc.FreeDeferred).
type jmeta struct {
	v   *Volume
	j   *journal.Journal
	dev alloc.MetaIO // device access for reads and ZeroOut
	// cache holds clean blocks (mdcache.go), nil if disabled. Lock order:
	// mu before cache.mu.
	cache *metaCache

	mu      sync.Mutex
	pending map[uint64][]byte   // guarded by mu
	revokes map[uint64]struct{} // guarded by mu
	// committing is the set being moved into the journal by commit; reads
	// see it until the journal holds the blocks. Guarded by mu.
	committing map[uint64][]byte
	// busy holds the releases of blocks freed by the pending set: they
	// become allocatable only once the transaction holding the frees has
	// committed. Guarded by mu.
	busy []func()
	// releasing is closed once the busy blocks of the last commit that
	// had any, and of every commit before it, are allocatable (releases
	// run after the commit is durable, in commit order). Guarded by mu.
	releasing chan struct{}
	// revokedUnwaited is set by a commit that carries revokes and cleared
	// by the next commit with busy blocks, whose release waits out a
	// checkpoint in progress (journal.WaitCheckpoint) for them: only a
	// freed block that was metadata can have a copy that a checkpoint
	// writes home, and freeing such a block revokes it. Guarded by mu.
	revokedUnwaited bool
	// busyBlocks counts blocks freed but not yet allocatable (busy), for
	// retrying an allocation that failed for space after a commit.
	busyBlocks atomic.Int64
	// npending mirrors len(pending)+len(revokes) and isFailed mirrors
	// failed != nil, for lock-free checks; both change under mu.
	npending atomic.Int64
	isFailed atomic.Bool
	// failed is set when an operation failed with an I/O error or found
	// corruption after changing metadata: nothing more is committed, so
	// the journal keeps the last consistent state (errors=remount-ro).
	failed error // guarded by mu

	// live holds, per inode, the record of its last journalled data
	// write whose log copies may still be replayed, and liveBlk the
	// owner of each of their blocks (atomicjournal.go); guarded by mu.
	// nlive mirrors len(liveBlk).
	live    map[uint32]*liveData
	liveBlk map[uint64]uint32
	nlive   atomic.Int64
	// liveOrder holds the records in the order they were made (so by
	// tid, about), those dropped since included until they reach the
	// front: pruneLive drops those whose transaction left the log from
	// it. Guarded by mu.
	liveOrder []liveRef

	commitAt int // pending blocks that trigger a commit at the end of an operation
	// maxChunk bounds the metadata blocks of one atomic swap (atomic.go):
	// an eighth of the journal, so that the swap, started in a set of
	// fewer than commitAt blocks, fits a transaction with it.
	maxChunk int

	// stopped is set by the last commit, at Close: later commits log
	// nothing (the journal is closing or closed) and later operations fail
	// with ErrClosed. Guarded by the volume's txnGate: written with it held
	// exclusively, read with it held either way.
	stopped bool

	// stopTimer and timerDone stop and wait for the background
	// committer; nil when none runs. Set by startCommitter before the
	// volume is shared and cleared by stopCommitter at Close.
	stopTimer, timerDone chan struct{}
}

var (
	_ alloc.MetaIO      = (*jmeta)(nil)
	_ alloc.MetaUpdater = (*jmeta)(nil)
)

// Read returns blk's contents: a copy of its pending or committing copy,
// else the metadata cache's block (shared: not to be modified, as
// alloc.MetaIO's contract says), filled on a miss from the journal's
// uncheckpointed copy or the device.
func (m *jmeta) Read(blk uint64) ([]byte, error) {
	b, _, err := m.read(blk)
	return b, err
}

// read is Read that also says whether the slice is the cache's.
func (m *jmeta) read(blk uint64) (b []byte, shared bool, err error) {
	return m.readOrZero(blk, nil)
}

// readOrZero is read, except that where blk would be read from the device
// (no pending, committing, logged or cached copy) and zero reports true,
// it returns a zeroed block instead, not cached: a new inode's table block
// whose other inodes are all free (writeNewInode).
func (m *jmeta) readOrZero(blk uint64, zero func() bool) (b []byte, shared bool, err error) {
	m.mu.Lock()
	if b, ok := m.pending[blk]; ok {
		c := append([]byte(nil), b...)
		m.mu.Unlock()
		return c, false, nil
	}
	if b, ok := m.committing[blk]; ok {
		c := append([]byte(nil), b...)
		m.mu.Unlock()
		return c, false, nil
	}
	return m.loggedUnlock(blk, zero)
}

// loggedUnlock returns blk's last logged copy: the cache's, else the
// journal's or the device's, which then fills the cache (shared: the
// slice is the cache's). Where it would come from the device and zero
// (may be nil) reports true, it is a zeroed block instead, not cached.
// m.mu is held on entry and released.
func (m *jmeta) loggedUnlock(blk uint64, zero func() bool) (b []byte, shared bool, err error) {
	var gen uint64
	if m.cache != nil {
		var hit bool
		if b, gen, hit = m.cache.get(blk); hit {
			m.mu.Unlock()
			return b, true, nil
		}
	}
	m.mu.Unlock()
	b = make([]byte, m.v.bs)
	if !m.j.Lookup(blk, b) {
		if zero != nil && zero() {
			return b, false, nil
		}
		if b, err = m.dev.Read(blk); err != nil {
			return nil, false, err
		}
	}
	if m.cache == nil {
		return b, false, nil
	}
	m.cache.put(blk, b, gen)
	return b, true, nil
}

// readAt copies len(dst) bytes of block blk from byte off into dst, from
// the same copy Read would return, without copying the rest of the block
// (an inode out of its inode table block).
func (m *jmeta) readAt(blk uint64, off int, dst []byte) error {
	m.mu.Lock()
	b, ok := m.pending[blk]
	if !ok {
		b, ok = m.committing[blk]
	}
	if !ok && m.cache != nil {
		b, _, ok = m.cache.get(blk)
	}
	if ok {
		copy(dst, b[off:])
		m.mu.Unlock()
		return nil
	}
	m.mu.Unlock()
	b, _, err := m.read(blk)
	if err != nil {
		return err
	}
	copy(dst, b[off:])
	return nil
}

// readLoggedAt is readAt from blk's last logged copy (the cache's, the
// journal's or the device's), ignoring its pending and committing copies.
// A copy read from the journal or the device fills the cache, as read's
// does: it is the clean copy the cache holds.
func (m *jmeta) readLoggedAt(blk uint64, off int, dst []byte) error {
	m.mu.Lock()
	b, _, err := m.loggedUnlock(blk, nil)
	if err != nil {
		return err
	}
	copy(dst, b[off:])
	return nil
}

// readBlockAt copies len(dst) bytes of block blk from byte off into dst.
// With a journal it copies only those bytes (jmeta.readAt); otherwise it
// reads the block into a scratch buffer.
func (v *Volume) readBlockAt(blk uint64, off int, dst []byte) error {
	if blk >= v.sb.BlocksCount {
		return errs.Corruptf("block pointer", blk, -1, "block %d beyond filesystem end %d", blk, v.sb.BlocksCount)
	}
	if m, ok := v.meta.(*jmeta); ok {
		return m.readAt(blk, off, dst)
	}
	buf := getBlockBuf(v.bs)
	defer putBlockBuf(buf)
	if err := v.readBlock(blk, buf); err != nil {
		return err
	}
	copy(dst, buf[off:])
	return nil
}

// GetWrite returns a private copy of blk's contents.
func (m *jmeta) GetWrite(blk uint64) ([]byte, error) {
	b, shared, err := m.read(blk)
	if err != nil || !shared {
		return b, err
	}
	return append([]byte(nil), b...), nil
}

func (m *jmeta) Dirty(blk uint64, b []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.pending[blk]; ok {
		copy(p, b) // already in the running transaction: update in place
	} else {
		m.pending[blk] = m.cloneLocked(b)
	}
	delete(m.revokes, blk)
	m.countLocked()
	return nil
}

// update changes block blk in place with fn: its pending copy if the
// running transaction has one, else a copy of its current contents that
// becomes the pending copy. It saves the two block copies of a GetWrite +
// Dirty pair for small changes to shared blocks (an inode in its inode
// table block). fn runs with m.mu held and must not call m.
func (m *jmeta) update(blk uint64, fn func(b []byte)) error {
	return m.updateOrZero(blk, nil, fn)
}

// updateOrZero is update, starting from zeroes instead of the device's
// copy where readOrZero would (zero may be nil).
func (m *jmeta) updateOrZero(blk uint64, zero func() bool, fn func(b []byte)) error {
	m.mu.Lock()
	if p, ok := m.pending[blk]; ok {
		fn(p)
		m.mu.Unlock()
		return nil
	}
	m.mu.Unlock()
	b, shared, err := m.readOrZero(blk, zero)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.pending[blk]
	if !ok {
		if cur = b; shared {
			cur = m.cloneLocked(b)
		}
		m.pending[blk] = cur
	} // else logged meanwhile by another writer of the block: newer
	fn(cur)
	delete(m.revokes, blk)
	m.countLocked()
	return nil
}

// Update implements alloc.MetaUpdater: it changes block blk with fn in
// place, as update does.
func (m *jmeta) Update(blk uint64, fn func(b []byte)) error { return m.update(blk, fn) }

// cloneLocked returns a new block buffer for the pending set holding a
// copy of block b. Buffers are not reused: a logged set's belong to the
// journal and the metadata cache (journal.Handle.DirtyOwned). The append
// spares make's zeroing of a buffer about to be overwritten whole. m.mu
// is held.
func (m *jmeta) cloneLocked(b []byte) []byte {
	if len(b) >= m.v.bs {
		return append([]byte(nil), b[:m.v.bs]...)
	}
	c := make([]byte, m.v.bs)
	copy(c, b)
	return c
}

func (m *jmeta) ZeroOut(blk, n uint64) error {
	err := m.dev.ZeroOut(blk, n)
	if m.cache != nil {
		m.cache.dropRange(blk, n)
	}
	return err
}

// revoke records that metadata block blk was freed: its pending copy is
// dropped, a revoke goes into the next commit, and the journal forgets its
// uncheckpointed copies so that a checkpoint never writes them over
// whatever reuses the block.
func (m *jmeta) revoke(blk uint64) {
	m.mu.Lock()
	delete(m.pending, blk)
	m.revokes[blk] = struct{}{}
	m.countLocked()
	if m.cache != nil {
		m.cache.drop(blk)
	}
	m.mu.Unlock()
	m.j.Forget(blk)
}

// pendingLen returns the number of blocks and revokes in the pending set
// without taking m.mu (every operation checks it at its end).
func (m *jmeta) pendingLen() int { return int(m.npending.Load()) }

// countLocked refreshes npending after a change of the pending set. m.mu
// is held.
func (m *jmeta) countLocked() { m.npending.Store(int64(len(m.pending) + len(m.revokes))) }

// setFailedLocked records err as the error that stopped committing. m.mu is
// held.
func (m *jmeta) setFailedLocked(err error) {
	if m.failed == nil {
		m.failed = err
		m.isFailed.Store(true)
	}
}

// commit moves the pending set into the journal and, with wait, waits
// until it is durable. The caller must not be inside an operation. After
// the volume's last commit (Close) it logs nothing: with wait it returns
// an error matching ErrClosed, without it nil (the operation that asked
// for it left the gate before the last commit, which took its changes).
func (m *jmeta) commit(wait bool) error { return m.commitFinal(wait, false) }

// commitFinal is commit; with final it is the volume's last commit, after
// which no operation changes metadata (see stopped).
func (m *jmeta) commitFinal(wait, final bool) error {
	_, err := m.commitWith(wait, final, nil)
	return err
}

// commitData is commit(true) that also journals file data (atomicjournal.go):
// once it holds txnGate exclusively, and queued conversions are applied,
// it calls stage, which returns the data blocks to log with the pending
// set, by block number (nil for none; the journal owns the slices). They
// are logged as ordinary journalled blocks at their home block numbers,
// so that recovery writes them home, but are not metadata: they never
// enter the metadata cache, and a pending revoke of one is dropped (this
// copy is newer than whatever the block held when it was freed). It
// returns the tid of the transaction holding them, durable when it
// returns nil.
func (m *jmeta) commitData(stage func() (map[uint64][]byte, error)) (uint32, error) {
	return m.commitWith(true, false, stage)
}

// commitWith is commitFinal with commitData's stage, which may be nil.
func (m *jmeta) commitWith(wait, final bool, stage func() (map[uint64][]byte, error)) (uint32, error) {
	v := m.v
	v.txnGate.Lock()
	if m.stopped {
		v.txnGate.Unlock()
		if wait {
			return 0, fmt.Errorf("ext4io: commit: %w", ErrClosed)
		}
		return 0, nil
	}
	if final {
		// Whatever happens below, nothing commits after this (an
		// operation that enters the gate later fails with ErrClosed).
		m.stopped = true
	}
	// Queued conversions go into this transaction. A batch that fails for
	// space leaves its runs queued and the tree consistent: the commit
	// goes on, and with wait reports the error (the runs are not durable
	// yet). An I/O error or corruption stops committing, as in an
	// operation.
	var convErr error
	if v.queueConv && !m.isFailed.Load() {
		if convErr = v.applyAllConversions(); convErr != nil && (errors.Is(convErr, ErrIO) || errors.Is(convErr, ErrCorrupt)) {
			m.mu.Lock()
			m.setFailedLocked(convErr)
			m.mu.Unlock()
		}
	}
	var data map[uint64][]byte
	if stage != nil && !m.isFailed.Load() {
		var err error
		if data, err = stage(); err != nil {
			v.txnGate.Unlock()
			return 0, err
		}
	}
	m.mu.Lock()
	for b, d := range data {
		m.pending[b] = d
		delete(m.revokes, b)
		if m.cache != nil {
			m.cache.drop(b)
		}
	}
	if err := v.mmpFailed(); err != nil {
		m.setFailedLocked(err) // another node has the filesystem (mmp.go)
	}
	if m.failed != nil {
		err := m.failed
		m.mu.Unlock()
		v.txnGate.Unlock()
		return 0, fmt.Errorf("ext4io: volume stopped committing after an error: %w: %w", ErrReadOnly, err)
	}
	pending, revokes, busy := m.pending, m.revokes, m.busy
	if len(revokes) > 0 {
		m.revokedUnwaited = true
	}
	if len(pending) > 0 || len(revokes) > 0 {
		v.fcFullCommit() // this transaction supersedes the fast commits (fcwrite.go)
	}
	m.pending, m.revokes, m.busy = make(map[uint64][]byte), make(map[uint64]struct{}), nil
	m.countLocked()
	m.committing = pending
	m.mu.Unlock()
	tid, err := m.log(pending, revokes)
	var release func() // a waiting commit's own release, run below
	if err == nil && len(busy) > 0 {
		// Blocks freed in this set become allocatable once it commits,
		// after those of earlier commits (a waiting commit waits for the
		// last release, so for all of them).
		released := make(chan struct{})
		m.mu.Lock()
		prev := m.releasing
		m.releasing = released
		waitCP := m.revokedUnwaited
		m.revokedUnwaited = false
		m.mu.Unlock()
		release = func() {
			defer close(released)
			if prev != nil {
				<-prev
			}
			if m.j.WaitCommit(context.Background(), tid) == nil {
				if waitCP {
					// A checkpoint that began before the revokes
					// committed may still be writing the revoked blocks'
					// last copies home (see journal.Forget): the blocks
					// are reused after it. Revokes committed before an
					// earlier release's wait need none: every checkpoint
					// begun since skips their blocks.
					m.j.WaitCheckpoint()
				}
				for _, release := range busy {
					release()
				}
			}
		}
		if !wait {
			go release()
			release = nil
		}
	}
	m.mu.Lock()
	m.committing = nil
	for b := range data {
		delete(pending, b) // data, not metadata: not for the cache
	}
	if err != nil {
		m.failLocked(err, pending, revokes)
	} else {
		m.installLocked(pending) // the journal holds the blocks now
	}
	m.mu.Unlock()
	v.txnGate.Unlock()
	if err != nil {
		return 0, err
	}
	if wait {
		flushed, err := m.j.SyncFlushed(context.Background())
		if release != nil {
			// On this goroutine rather than another's that this one
			// would wait for: the commit is durable (or the journal
			// aborted, and release frees nothing).
			release()
		}
		if err != nil {
			err = fmt.Errorf("ext4io: journal commit: %w", err)
			// Stop committing, but put nothing back: the blocks are in
			// the journal, which keeps them visible to Lookup after an
			// abort, and operations and commits that ran while this one
			// waited (the gate is released) may have logged newer copies
			// that a restored pending copy would shadow.
			m.mu.Lock()
			m.setFailedLocked(err)
			m.mu.Unlock()
			return 0, err
		}
		m.mu.Lock()
		last := m.releasing
		m.mu.Unlock()
		if last != nil {
			<-last // the blocks this and earlier commits freed are allocatable now
		}
		if len(pending) == 0 && len(revokes) == 0 && !flushed {
			// Nothing to commit, and no commit that began after this call
			// flushed the device (none was running, or only one already
			// under way): data written since (overwrites, write-back into
			// allocated blocks) needs a flush of its own to be durable (as
			// ext4_sync_file issues one when the transaction has no
			// barrier for it). When another goroutine's commit logged this
			// caller's changes and has not committed yet, the Sync above
			// committed them, and that commit's preflush covers the data.
			if err := v.flushDev(); err != nil {
				return 0, err
			}
		}
		return tid, convErr
	}
	// A commit at the end of an operation does not fail that operation
	// for conversions it could not apply: they stay queued for the next
	// commit, and Sync reports them.
	return tid, nil
}

// failLocked stops committing after err and keeps the blocks of a commit
// that failed to log them readable in memory (some never reached the
// journal), so that the volume's in-memory state never goes back in time:
// later reads see what earlier operations wrote, as Linux's page cache
// does after a journal abort. Newer pending copies win. Only for a failed
// log, with txnGate held exclusively: a set that was logged must not come
// back once the gate is released, as newer copies may be in the journal
// by then. m.mu is held.
func (m *jmeta) failLocked(err error, pending map[uint64][]byte, revokes map[uint64]struct{}) {
	m.setFailedLocked(err)
	defer m.countLocked()
	for b, d := range pending {
		if _, newer := m.pending[b]; !newer {
			if _, rev := m.revokes[b]; !rev {
				// A copy: the journal may own d already (DirtyOwned),
				// and pending copies are changed in place.
				m.pending[b] = append([]byte(nil), d...)
			}
		}
	}
	for b := range revokes {
		if _, newer := m.pending[b]; !newer {
			m.revokes[b] = struct{}{}
		}
	}
}

// log puts the blocks and revokes into one journal handle, so that they
// commit in one transaction: the pending set holds whole operations, and
// a crash must replay all of an operation's changes or none. Start
// commits the running transaction first when it cannot take the set. A
// set larger than a transaction of a quarter of the log (MaxCredits)
// takes a transaction of its own of up to the whole log
// (journal.StartLarge). What bounds the set: operations end with a commit
// once it holds commitAt blocks, so it exceeds commitAt only by what the
// operations in flight at that moment changed; a set larger than the
// whole log (one operation, or concurrent ones, changing that many
// metadata blocks) is not committed at all: log fails with an error
// matching ErrNoSpace, which stops the volume (the journal keeps the
// last consistent state), rather than committing part of an operation.
func (m *jmeta) log(pending map[uint64][]byte, revokes map[uint64]struct{}) (tid uint32, err error) {
	n := len(pending) + len(revokes)
	if n == 0 {
		return 0, nil
	}
	blks := make([]uint64, 0, len(pending))
	for b := range pending {
		blks = append(blks, b)
	}
	slices.Sort(blks)
	m.v.stats.handles.Add(1)
	start := m.j.Start
	if n > m.j.MaxCredits() {
		start = m.j.StartLarge
	}
	h, err := start(n)
	if err != nil {
		return 0, fmt.Errorf("ext4io: journal start for %d metadata blocks and revokes: %w", n, err)
	}
	tid = h.TID()
	for b := range revokes {
		if err := h.Revoke(b); err != nil {
			h.Stop()
			return 0, fmt.Errorf("ext4io: journal revoke %d: %w", b, err)
		}
	}
	for _, b := range blks {
		if err := h.GetWriteAccess(b); err != nil {
			h.Stop()
			return 0, fmt.Errorf("ext4io: journal block %d: %w", b, err)
		}
		// The journal keeps the pending copy itself: nothing changes it
		// from here on (the next operations get new pending copies), and
		// the metadata cache shares it once logged.
		if err := h.DirtyOwned(b, pending[b]); err != nil {
			h.Stop()
			return 0, fmt.Errorf("ext4io: journal block %d: %w", b, err)
		}
	}
	if err := h.Stop(); err != nil {
		return 0, fmt.Errorf("ext4io: journal stop: %w", err)
	}
	return tid, nil
}

// endOpErr is endOp that keeps the operation's own error first. An
// operation that failed with an I/O error or found corrupt metadata may
// have left half its changes in the pending set: the volume stops
// committing (the journal keeps the last consistent state, as Linux's
// errors=remount-ro), and later writes fail with ErrReadOnly.
func (v *Volume) endOpErr(err error) error { return v.endOpErrAt(0, err) }

// endOpErrAt is endOpErr for an operation that beginOpAt entered on
// stripe s.
func (v *Volume) endOpErrAt(s int, err error) error {
	if err != nil && v.jm != nil && (errors.Is(err, ErrIO) || errors.Is(err, ErrCorrupt)) {
		v.jm.mu.Lock()
		v.jm.setFailedLocked(err)
		v.jm.mu.Unlock()
	}
	if eerr := v.endOpAt(s); err == nil {
		err = eerr
	}
	return err
}

// failed returns the error that stopped a writable volume, or nil.
func (v *Volume) failed() error {
	if v.jm == nil || !v.jm.isFailed.Load() {
		return v.mmpFailed() // checked on every write: no lock on the fast path
	}
	v.jm.mu.Lock()
	defer v.jm.mu.Unlock()
	return v.jm.failed
}

// beginOp enters a metadata-changing operation (see jmeta). Lock order:
// txnGate (shared) before any inode lock; operations do not nest, and
// endOp is called with no inode lock held. It fails with an error
// matching ErrClosed, holding nothing, once Close has begun: Close's last
// commit takes the gate exclusively, so an operation either entered
// before Close and its changes are in that commit, or fails here.
func (v *Volume) beginOp() error {
	_, err := v.beginOpAt(0)
	return err
}

// beginOpAt is beginOp on txnGate's stripe for hint (stripe.OfBuf of the
// I/O buffer on the direct I/O paths, so that writers on different CPUs
// do not share a reader count). It returns the stripe for endOpAt.
func (v *Volume) beginOpAt(hint int) (int, error) {
	s := v.txnGate.RLock(hint)
	if v.closed.Load() {
		v.txnGate.RUnlock(s)
		return 0, errVolumeClosed()
	}
	return s, nil
}

// beginInternalOp is beginOp for the operations Close itself runs before
// its last commit (write-back, deferred inode updates, orphan release):
// they fail only once the last commit has run, so that nothing changes
// metadata (or the allocator's counts, which Close writes to the
// superblock) after it.
func (v *Volume) beginInternalOp() error {
	s := v.txnGate.RLock(0)
	if v.jm != nil && v.jm.stopped || v.jm == nil && v.internalStopped {
		v.txnGate.RUnlock(s)
		return errVolumeClosed()
	}
	return nil
}

// errVolumeClosed is the error of an operation that found the volume
// closed.
func errVolumeClosed() error { return fmt.Errorf("ext4io: volume is closed: %w", ErrClosed) }

// endOp leaves an operation, committing when the pending set is large.
func (v *Volume) endOp() error { return v.endOpAt(0) }

// endOpAt is endOp for an operation that beginOpAt entered on stripe s.
func (v *Volume) endOpAt(s int) error {
	v.txnGate.RUnlock(s)
	if v.jm == nil {
		return nil
	}
	if v.jm.pendingLen() >= v.jm.commitAt {
		return v.jm.commit(false)
	}
	return nil
}

// journalHeldBytes is the bound on the committed block copies the journal
// of a volume with metadata cache budget mcache keeps until a checkpoint
// (Options.MetaCacheBytes): twice the cache's budget, at least
// journal.DefaultMaxHeldBytes.
func journalHeldBytes(mcache int64) int64 {
	if mcache == 0 {
		mcache = defaultMetaCacheBytes
	}
	if mcache > math.MaxInt64/2 {
		return math.MaxInt64
	}
	return max(journal.DefaultMaxHeldBytes, 2*mcache)
}

// startJournal opens the journal of a writable volume, sets needs_recovery
// (as Linux does while mounted) and switches metadata to jmeta.
func (v *Volume) startJournal() error {
	cfg, err := v.journalConfig()
	if err != nil {
		return err
	}
	cfg.CommitInterval = 0 // jbd2's 5 s
	cfg.MaxHeldBytes = journalHeldBytes(v.opts.MetaCacheBytes)
	if v.home.h != nil {
		cfg.Dev = (&homeDev{inner: v.home.inner, h: v.home.h, journal: true}).wrap()
	}
	j, err := journal.Open(cfg)
	if err != nil {
		return fmt.Errorf("ext4io: opening the journal: %w", err)
	}
	if j.NeedsRecovery() {
		return fmt.Errorf("ext4io: the journal holds transactions but needs_recovery is not set: %w", ErrCorrupt)
	}
	// jbd2's journal_reset: a log shorter than this holds no transaction
	// of the size commits here take (every Sync would fail with ENOSPC).
	if jsb := j.Superblock(); uint64(jsb.First)+journal.MinJournalBlocks > uint64(jsb.MaxLen)+1 {
		return fmt.Errorf("ext4io: opening the journal: %w", errs.Corruptf("journal superblock", 0, 0x14,
			"log too short: blocks %d to %d, at least %d needed", jsb.First, jsb.MaxLen, journal.MinJournalBlocks))
	}
	if err := v.journalMapped(j.Superblock().MaxLen); err != nil {
		return err
	}
	blocks := int(cfg.Blocks)
	v.jm = &jmeta{v: v, j: j, dev: v.meta, cache: v.mcache, pending: make(map[uint64][]byte), revokes: make(map[uint64]struct{}),
		commitAt: max(blocks/16, 8), maxChunk: max(blocks/8, 16)}
	v.meta = v.jm
	v.sb.FeatureIncompat |= layout.IncompatRecover
	return nil
}

// journalMapped fails with ErrCorrupt unless the journal inode maps its
// blocks [0, n) with written blocks: a hole, found only when a commit
// reaches it, would abort the journal and lose what that commit held.
func (v *Volume) journalMapped(n uint32) error {
	jn, err := v.getInode(v.sb.JournalInum)
	if err != nil {
		return fmt.Errorf("ext4io: journal inode %d: %w", v.sb.JournalInum, err)
	}
	next := uint64(0)
	err = jn.m.walk(func(e extent.Extent) error {
		if uint64(e.Lblk) > next || e.Unwritten {
			return errStop
		}
		next = max(next, uint64(e.Lblk)+uint64(e.Len))
		if next >= uint64(n) {
			return errStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return fmt.Errorf("ext4io: journal inode %d: %w", v.sb.JournalInum, err)
	}
	if next < uint64(n) {
		return &errs.CorruptError{What: "journal inode", Ino: v.sb.JournalInum, Off: -1,
			Msg: fmt.Sprintf("journal block %d of %d is not mapped", next, n)}
	}
	return nil
}

// stopJournal commits everything, checkpoints and empties the journal;
// after it no internal operation starts (beginInternalOp), with or
// without a journal.
func (v *Volume) stopJournal() error {
	if v.jm == nil {
		// Nothing changes metadata from here on: the superblock takes
		// the allocator's counts next.
		v.txnGate.Lock()
		v.internalStopped = true
		v.txnGate.Unlock()
		return nil
	}
	if ferr := v.failed(); ferr != nil {
		// Checkpoint what committed; drop the rest.
		v.txnGate.Lock()
		v.jm.stopped = true
		v.txnGate.Unlock()
		if cerr := v.jm.j.Close(); cerr != nil {
			return errs.Join(ferr, cerr)
		}
		return ferr
	}
	err := v.jm.commitFinal(true, true)
	if cerr := v.jm.j.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("ext4io: closing the journal: %w", cerr)
	}
	return err
}

// Sync makes every change made so far durable, like syncfs: deferred inode
// updates are written, the journal commits and the device is flushed.
func (v *Volume) Sync() error {
	return v.SyncContext(context.Background())
}

// SyncContext is Sync that stops when ctx is done, with an error wrapping
// ctx.Err(): between files of the write-back and every 64 MiB of one, and
// before the commit. What it wrote back by then is mapped and committed as
// any write-back is (the image stays consistent); the rest stays dirty in
// the page cache, and nothing is durable until a Sync returns nil. A
// commit already started is waited for.
func (v *Volume) SyncContext(ctx context.Context) error {
	if err := v.checkOpen(); err != nil {
		return err
	}
	if v.alloc == nil {
		return nil
	}
	if v.pc != nil {
		if err := v.pc.SyncContext(ctx); err != nil {
			return fmt.Errorf("ext4io: sync: write-back: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ext4io: sync: %w", err)
	}
	if err := v.writeDirtyInodes(); err != nil {
		return err
	}
	if v.jm != nil {
		v.home.h.waitAll()   // journalled pages written in place (homewrite.go)
		v.jm.revokeAllLive() // journalled data copies (atomicjournal.go)
		return v.jm.commit(true)
	}
	return v.flushDev()
}

// freeMapped frees blocks that committed metadata may still map (tree
// blocks, and data or directory blocks unmapped by truncate, punch or
// unlink). On a journaled volume they stay unallocatable until the
// transaction freeing them commits (see alloc.FreeDeferred): otherwise a
// block whose newest metadata copy was already checkpointed could be
// overwritten by new data before the free is durable, and a crash would
// leave the old owner pointing at it.
func (v *Volume) freeMapped(start, n uint64) error {
	if v.jm == nil {
		return v.freeDiscarding(start, n)
	}
	v.jm.liveFreed(start, n) // journalled data copies of the blocks are revoked
	release, err := v.alloc.FreeDeferred(start, n)
	if err != nil {
		return err
	}
	m := v.jm // v.jm is cleared at Close, maybe before the release runs
	m.busyBlocks.Add(int64(n))
	m.mu.Lock()
	// Discarded once committed, before the blocks become allocatable.
	m.busy = append(m.busy, func() { v.discardFreed(start, n); release(); m.busyBlocks.Add(-int64(n)) })
	m.mu.Unlock()
	return nil
}

// retryNoSpace reports whether an operation that failed with err should
// be retried because blocks freed by uncommitted transactions will be
// allocatable after a commit; it commits and waits for them first
// (ext4_should_retry_alloc). The caller holds no lock and no operation.
// ErrTooManyLinks matches ErrNoSpace too but is no lack of space: a
// commit frees no links, and Linux retries on ENOSPC only.
func (v *Volume) retryNoSpace(err error) bool {
	if !errors.Is(err, ErrNoSpace) || errors.Is(err, ErrTooManyLinks) || v.jm == nil || v.jm.busyBlocks.Load() == 0 {
		return false
	}
	return v.jm.commit(true) == nil
}

// startCommitter starts the background committer: every tick it writes
// the volume's deferred inode updates and, when anything is pending
// (blocks, revokes or queued conversions), commits and waits for the
// journal, so that no change waits in memory much longer than every.
// Errors stop the volume as they would in an operation and are reported
// by the next Sync; the committer itself goes on ticking and does
// nothing once the volume has failed.
func (m *jmeta) startCommitter(every time.Duration) {
	stop, done := make(chan struct{}), make(chan struct{})
	m.stopTimer, m.timerDone = stop, done
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			m.timedCommit()
		}
	}()
}

// timedCommit is one tick of the background committer.
func (m *jmeta) timedCommit() {
	v := m.v
	if v.failed() != nil {
		return
	}
	if err := v.writeDirtyInodes(); err != nil {
		return
	}
	if m.pendingLen() == 0 && !v.conversionsQueued() {
		return
	}
	_ = m.commit(true) // a failure stops the volume; Sync reports it
}

// stopCommitter stops the background committer, if any, and waits for
// its tick in progress.
func (m *jmeta) stopCommitter() {
	if m.stopTimer == nil {
		return
	}
	close(m.stopTimer)
	<-m.timerDone
	m.stopTimer, m.timerDone = nil, nil
}
