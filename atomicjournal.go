package ext4io

import (
	"bytes"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
)

// Journalled atomic writes (ext4's data=journal, per write).
//
// A small untorn write (WriteAtomic or WriteAtomicBatch of at most
// Tuning.AtomicJournalMax bytes) over blocks that are already written and
// mapped inside the on-disk size keeps its blocks: the new data goes into
// a journal transaction as ordinary journalled blocks at their home block
// numbers, the transaction commits (durably: the write is synchronous),
// and only then is the data written in place, without a flush, in the
// background (homewrite.go): the call returns once the commit is durable.
// A crash before the commit is durable leaves the old data (nothing was
// written in place); after it, recovery (ext4io's, Linux's jbd2,
// e2fsck's) writes the logged blocks home, repairing an in-place write
// the crash tore or never made. The file does not fragment, as the remap
// path (atomic.go) does.
//
// Sequence (atomicJournal): the ranges are looked up under the shared
// inode lock; jmeta.commitData takes txnGate exclusively, and its stage
// callback takes the inode lock exclusively, looks the ranges up again
// and hands the data blocks over; the commit logs them with the pending
// metadata (one transaction, so that fast commits written before it stay
// covered) and waits until it is durable; the runs are registered as
// pending home writes (homewrite.go) and a goroutine writes them in place;
// the inode lock is released and the call returns. When the write in
// place has completed, Journal.MarkHome tells the journal that those
// copies are home, so that no checkpoint writes them home later (over a
// newer in-place write) and Lookup never returns them; only then are the
// runs no longer pending. Until then every device request of the volume
// overlapping them waits (reads see the new data, later writes land after
// it), and every flush waits for the write to complete, so that a
// transaction revoking the logged copies (below) commits only once its
// preflush has made the page durable in place.
//
// Stale log copies. Until a checkpoint moves the log's tail past the
// transaction, or a later transaction revokes the blocks, recovery would
// write the logged copies home again, over anything written to the blocks
// since without the journal (WriteAt, write-back, zeroing, another file
// or metadata reusing the blocks). Such a write must not be acknowledged
// as durable while the copies could be replayed. jmeta.live records, per
// file, the blocks of its last journalled write and their contents:
//   - the file's next journalled write revokes the blocks of the previous
//     one it does not log again, in its own transaction;
//   - freeing a block (freeMapped: truncate, punch, unlink, a remap)
//     revokes the file's recorded blocks in the freeing transaction, which
//     commits before the block can be reused;
//   - zeroing a block in place in an operation (the tail of a truncate's
//     or a punch's partial block, write-zeroes over written blocks:
//     liveZeroed) revokes them in that operation's transaction, so that
//     the operation never commits without its zeroes;
//   - File.Sync and Datasync wait for the file's pending writes in place
//     and compare the recorded blocks with what the device holds
//     (liveCheck); when one differs (something overwrote it since), the
//     blocks are revoked and the sync commits in full, fast commits or
//     not; Volume.Sync revokes every file's recorded blocks.
//     A record whose transaction has left the log (InLog) is dropped:
//     there, and oldest first after each journalled write (pruneLive),
//     so that the records hold about what the log holds.
//
// Datasync right after: inode.jclean is set when the stage hands the data
// over, unless the file has pages dirty in the page cache (their
// write-back needs a flush the commit did not give), and stays set through
// the write's end unless a data change of the file (a write, a truncate,
// a fallocate, a remap: dataChanged) comes meanwhile. While it is set,
// everything the file's data depends on was durable before the commit or
// is in it, and the in-place write, done or still in flight, is covered by
// the replay: Datasync returns without any I/O or wait, provided that
// nothing else is pending or committing (Datasync commits every pending
// change, an xattr set since included; Journal.Idle). Files whose iomap
// ops were handed out (noReadahead) take neither that shortcut nor
// liveCheck's skip of the compare, as their writes bypass dataChanged.
//
// Size: a journalled write is at most a sixteenth of the journal
// (jmeta.commitAt), so that with a pending set of up to that size it fits
// jbd2's quarter of the log.
//
// Policy: a journalled write costs a commit of its own, where a remapped
// one joins the next commit. WriteAtomic journals only when the file was
// synced (Sync, Datasync) since its previous atomic write, or has had
// none: a writer that syncs after each write gets one commit per write
// either way and keeps its blocks in place, and one that writes many
// pages before a sync pays a commit for the first only.

// The states of inode.jclean.
const (
	jcleanBusy = 1
	jcleanDone = 2
)

// dataChanged records that n's data or size changed (inode.jclean).
func (n *inode) dataChanged() {
	if n.jclean.Load() != 0 {
		n.jclean.Store(0)
	}
}

// defaultAtomicJournalMax is Tuning.AtomicJournalMax's default.
const defaultAtomicJournalMax = 64 << 10

// atomicJournalMax is the largest atomic write total v journals, 0 for
// none.
func (v *Volume) atomicJournalMax() int64 {
	switch t := v.opts.Tuning.AtomicJournalMax; {
	case t < 0:
		return 0
	case t == 0:
		return defaultAtomicJournalMax
	default:
		return t
	}
}

// liveData is the record of a file's last journalled write whose log
// copies recovery may still replay (see the top of the file).
type liveData struct {
	tid  uint32
	blks []uint64 // sorted
	data [][]byte // blks' contents as logged, slices of buf
	buf  *pageBuf
}

// A pageBuf holds the copy of a journalled write's data that the journal,
// the write in place and the live record share. Each holder releases it
// when it is done: the write in place once the journal has marked every
// block home (Journal.MarkHome: the journal never reads the copy again),
// the live record when it is dropped, liveCheck after its compare. The
// last release returns it to a pool, so that the next write reuses
// memory the cache holds rather than allocating the page again. A holder
// that cannot tell that the journal is done with the copy (a write in
// place that failed, a commit that failed) never releases it, and the
// garbage collector takes it.
type pageBuf struct {
	b    []byte
	refs atomic.Int32
}

// Pool classes: capacities of 1<<pageBufMinShift to 1<<pageBufMaxShift
// bytes; larger copies are allocated and left to the garbage collector.
const (
	pageBufMinShift = 12
	pageBufMaxShift = 20
)

var pageBufPools [pageBufMaxShift - pageBufMinShift + 1]sync.Pool

// newPageBuf returns a buffer of n bytes (n > 0, contents undefined) with
// refs references.
func newPageBuf(n int, refs int32) *pageBuf {
	c := max(bits.Len(uint(n-1)), pageBufMinShift)
	var p *pageBuf
	if c <= pageBufMaxShift {
		p, _ = pageBufPools[c-pageBufMinShift].Get().(*pageBuf)
		if p == nil {
			p = &pageBuf{b: make([]byte, 0, 1<<c)}
		}
	} else {
		p = &pageBuf{b: make([]byte, 0, n)}
	}
	p.b = p.b[:n]
	p.refs.Store(refs)
	return p
}

// acquire adds a reference to p, which must hold one already.
func (p *pageBuf) acquire() {
	if p != nil {
		p.refs.Add(1)
	}
}

// release drops a reference to p; the last returns it to its pool.
func (p *pageBuf) release() {
	if p == nil || p.refs.Add(-1) != 0 {
		return
	}
	c := bits.Len(uint(cap(p.b) - 1))
	if c < pageBufMinShift || c > pageBufMaxShift || cap(p.b) != 1<<c {
		return
	}
	p.b = p.b[:0]
	pageBufPools[c-pageBufMinShift].Put(p)
}

// atomicJournalRuns returns the physical runs mapping the ranges rs, in
// order, if every block is written and inside the on-disk size; ok is
// false otherwise. The caller holds n.mu.
func (f *File) atomicJournalRuns(rs []atomicRange) (runs [][2]uint64, ok bool) {
	disk := f.n.diskSize()
	for _, r := range rs {
		if uint64(r.off)+uint64(len(r.p)) > disk || uint64(r.off)+uint64(len(r.p)) > f.n.in.Size {
			return nil, false
		}
		for b := r.lblk; b < r.lblk+r.nblk; {
			m, err := f.m.lookupN(b, r.lblk+r.nblk-b)
			if err != nil || m.kind != mapWritten || m.n == 0 {
				return nil, false
			}
			k := min(m.n, r.lblk+r.nblk-b)
			if m.pblk+k > f.v.sb.BlocksCount || f.v.zone.overlaps(0, m.pblk, k) {
				return nil, false
			}
			if l := len(runs); l > 0 && runs[l-1][0]+runs[l-1][1] == m.pblk {
				runs[l-1][1] += k
			} else {
				runs = append(runs, [2]uint64{m.pblk, k})
			}
			b += k
		}
		if !f.cacheCleanLocked(r.off, r.off+int64(len(r.p))) {
			return nil, false
		}
	}
	return runs, true
}

// atomicJournal writes rs (sorted, total bytes) through the journal and
// in place (see the top of the file). ok is false, with nothing written,
// when the write does not qualify; the caller then remaps.
func (f *File) atomicJournal(rs []atomicRange, total int64) (ok bool, err error) {
	m := f.v.jm
	if m == nil || total > f.v.atomicJournalMax() || f.n.atomicUnsynced.Load() {
		return false, nil
	}
	if total>>f.v.bshift > int64(m.commitAt) {
		// The data joins the pending set's transaction: at most a
		// sixteenth of the journal, so that with a set of up to that
		// size it stays within jbd2's quarter.
		return false, nil
	}
	s := f.n.mu.RLockAt(int(rs[0].lblk))
	_, ok = f.atomicJournalRuns(rs)
	f.n.mu.RUnlockAt(s)
	if !ok {
		return false, nil
	}
	var runs [][2]uint64
	var runData [][]byte // each run's data, one slice of the copy
	var pb *pageBuf
	locked := false
	var data map[uint64][]byte
	tid, err := m.commitData(func() (map[uint64][]byte, error) {
		f.n.mu.Lock()
		locked = true
		if err := f.closedLocked(); err != nil {
			return nil, err
		}
		if f.v.closed.Load() {
			// Under the inode lock (Volume.drainInodeWriters): a write
			// that got here before Close took the lock registers its
			// write in place before Close waits for them; a later one
			// must not commit or write once Close has waited.
			return nil, fmt.Errorf("ext4io: inode %d: atomic write: %w", f.ino, ErrClosed)
		}
		var ok bool
		if runs, ok = f.atomicJournalRuns(rs); !ok {
			return nil, nil // changed meanwhile: remapped instead
		}
		// One copy of the data: the journal keeps it (DirtyOwned), as
		// do the write in place and the live record (a reference each).
		pb = newPageBuf(int(total), 2)
		buf := pb.b
		n := 0
		for _, r := range rs {
			n += copy(buf[n:], r.p)
		}
		bs := uint64(f.v.bs)
		data = make(map[uint64][]byte, uint64(total)/bs)
		i := uint64(0)
		runData = make([][]byte, len(runs))
		for k, run := range runs {
			runData[k] = buf[i*bs : (i+run[1])*bs]
			for b := run[0]; b < run[0]+run[1]; b++ {
				data[b] = buf[i*bs : (i+1)*bs : (i+1)*bs]
				i++
			}
		}
		m.reviseLive(f.ino, data)
		// Every write that ended before this point is on the device,
		// so durable once the commit is (its preflush), or was durable
		// before; one that ends after clears it. Pages still dirty in
		// the page cache are not: their write-back needs a flush of
		// its own, which the Datasync shortcut would skip. Buffered
		// writes and write-back hold the inode lock, so none of the
		// file's pages is dirtied or written back meanwhile.
		f.n.jclean.Store(jcleanBusy)
		if f.mayHavePages() && f.v.pc.Dirty(f.n.bops.key(), 0, math.MaxInt64) > 0 {
			f.n.jclean.Store(0)
		}
		return data, nil
	})
	if locked {
		defer f.n.mu.Unlock()
	}
	if err != nil {
		return true, err
	}
	if data == nil {
		return false, nil
	}
	f.v.stats.exclusive.Add(1)
	f.v.stats.atomicJournalled.Add(1)
	f.v.touch.stamp(f.n)
	sh := f.v.bshift
	blks := make([]uint64, 0, len(data))
	devRuns := make([][2]int64, len(runs))
	for k, run := range runs {
		for b := run[0]; b < run[0]+run[1]; b++ {
			blks = append(blks, b)
		}
		devRuns[k] = [2]int64{int64(run[0]) << sh, int64(run[1]) << sh}
	}
	slices.Sort(blks) // shared by the record and the write in place, which only read it
	// The write in place goes on in the background (homewrite.go): the
	// runs are pending before the inode lock is released, so that every
	// later request touching them waits for it.
	ws := f.v.home.h.add(f.ino, devRuns)
	f.homeWriteRuns(ws, runData, tid, blks, pb.release)
	rec := &liveData{tid: tid, blks: blks, data: make([][]byte, len(blks)), buf: pb}
	for i, b := range blks {
		rec.data[i] = data[b]
	}
	m.setLive(f.ino, rec)
	m.pruneLive()
	f.n.atomicUnsynced.Store(true)
	f.n.jclean.CompareAndSwap(jcleanBusy, jcleanDone)
	return true, nil
}

// reviseLive revokes, in the pending set, the blocks of ino's live
// record that data does not log again, and drops the record: the commit
// about to log data supersedes it.
func (m *jmeta) reviseLive(ino uint32, data map[uint64][]byte) {
	m.mu.Lock()
	rec := m.live[ino]
	var gone []uint64
	if rec != nil {
		for _, b := range rec.blks {
			if _, again := data[b]; !again {
				gone = append(gone, b)
			}
		}
		m.dropLiveLocked(ino, rec)
		m.revokeDataLocked(gone)
	}
	m.mu.Unlock()
	for _, b := range gone {
		m.j.Forget(b)
	}
}

// setLive records rec as ino's live record.
func (m *jmeta) setLive(ino uint32, rec *liveData) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old := m.live[ino]; old != nil {
		m.dropLiveLocked(ino, old)
	}
	if m.live == nil {
		m.live, m.liveBlk = map[uint32]*liveData{}, map[uint64]uint32{}
	}
	m.live[ino] = rec
	for _, b := range rec.blks {
		m.liveBlk[b] = ino
	}
	m.nlive.Store(int64(len(m.liveBlk)))
	m.liveOrder = append(m.liveOrder, liveRef{ino, rec})
}

// liveRef is an entry of jmeta.liveOrder.
type liveRef struct {
	ino uint32
	rec *liveData
}

// pruneLive drops the oldest records while their transaction has left
// the log (recovery no longer replays it), so that the records (which
// hold the logged blocks' contents) stay within what the log holds rather
// than growing with every file written until each is synced.
func (m *jmeta) pruneLive() {
	for {
		m.mu.Lock()
		if len(m.liveOrder) == 0 {
			m.mu.Unlock()
			return
		}
		r := m.liveOrder[0]
		if m.live[r.ino] != r.rec {
			m.popLiveLocked() // dropped or replaced since
			m.mu.Unlock()
			continue
		}
		m.mu.Unlock()
		if m.j.InLog(r.rec.tid) {
			return
		}
		m.mu.Lock()
		if len(m.liveOrder) > 0 && m.liveOrder[0] == r {
			m.popLiveLocked()
			if m.live[r.ino] == r.rec {
				m.dropLiveLocked(r.ino, r.rec)
			}
		}
		m.mu.Unlock()
	}
}

// popLiveLocked removes liveOrder's first entry. m.mu is held.
func (m *jmeta) popLiveLocked() {
	m.liveOrder[0] = liveRef{}
	m.liveOrder = m.liveOrder[1:]
	if len(m.liveOrder) == 0 {
		m.liveOrder = nil
	}
}

// dropLiveLocked removes ino's record rec. m.mu is held.
func (m *jmeta) dropLiveLocked(ino uint32, rec *liveData) {
	delete(m.live, ino)
	rec.buf.release()
	for _, b := range rec.blks {
		if m.liveBlk[b] == ino {
			delete(m.liveBlk, b)
		}
	}
	m.nlive.Store(int64(len(m.liveBlk)))
}

// revokeDataLocked adds revokes of the data blocks blks to the pending
// set. The caller calls Journal.Forget for each after releasing m.mu.
// m.mu is held.
func (m *jmeta) revokeDataLocked(blks []uint64) {
	for _, b := range blks {
		delete(m.pending, b)
		m.revokes[b] = struct{}{}
	}
	m.countLocked()
}

// liveFreed revokes the live records holding any block of [start,
// start+n), which is being freed: in the freeing operation's pending set,
// so that the revokes commit before the blocks can be reused.
func (m *jmeta) liveFreed(start, n uint64) {
	if m.nlive.Load() == 0 {
		return
	}
	m.mu.Lock()
	var hit []uint32
	if n <= uint64(len(m.liveBlk)) {
		for b := start; b < start+n; b++ {
			if ino, ok := m.liveBlk[b]; ok && !slices.Contains(hit, ino) {
				hit = append(hit, ino)
			}
		}
	} else {
		for b, ino := range m.liveBlk {
			if b >= start && b < start+n && !slices.Contains(hit, ino) {
				hit = append(hit, ino)
			}
		}
	}
	var gone []uint64
	for _, ino := range hit {
		rec := m.live[ino]
		gone = append(gone, rec.blks...)
		m.dropLiveLocked(ino, rec)
	}
	m.revokeDataLocked(gone)
	m.mu.Unlock()
	for _, b := range gone {
		m.j.Forget(b)
	}
}

// liveZeroed revokes the live records holding any block of [start,
// start+n), which an operation zeroes in place, without the journal (the
// tail of a truncate's or a punch's partial block, write-zeroes over
// written blocks): in the operation's pending set, so that its metadata
// (a truncate's size) never commits while replay could still write the
// logged bytes back over the zeroes. A fast commit, which carries no
// revokes, needs none: the first one after the journalled write's (full)
// commit starts a new area, which checkpoints the log first (fcBuild).
func (v *Volume) liveZeroed(start, n uint64) {
	if v.jm != nil {
		v.jm.liveFreed(start, n)
	}
}

// liveCheck is File.Sync's part (see the top of the file): when a block
// of the file's live record no longer holds what was logged, the record's
// blocks are revoked and the sync must commit in full (fast commits are
// made ineligible). A record whose transaction has left the log is
// dropped.
func (f *File) liveCheck() error {
	m := f.v.jm
	if m == nil || m.nlive.Load() == 0 {
		return nil
	}
	s := f.n.mu.RLockAt(0)
	defer f.n.mu.RUnlockAt(s)
	m.mu.Lock()
	rec := m.live[f.ino]
	if rec != nil {
		rec.buf.acquire() // the compare below reads it
	}
	m.mu.Unlock()
	if rec == nil {
		return nil
	}
	defer rec.buf.release()
	if f.n.jclean.Load() == jcleanDone && !f.n.noReadahead.Load() {
		// Nothing wrote to the file since the record was made (writes
		// through iomap ops handed out do not clear jclean).
		return nil
	}
	if !m.j.InLog(rec.tid) {
		m.mu.Lock()
		if m.live[f.ino] == rec {
			m.dropLiveLocked(f.ino, rec)
		}
		m.mu.Unlock()
		return nil
	}
	// One read per run of adjacent blocks.
	bs := f.v.bs
	buf := make([]byte, len(rec.blks)*bs)
	same := true
	for i := 0; i < len(rec.blks) && same; {
		k := 1
		for i+k < len(rec.blks) && rec.blks[i+k] == rec.blks[i]+uint64(k) {
			k++
		}
		run := buf[:k*bs]
		if _, err := readFull(f.v.dev, run, int64(rec.blks[i])<<f.v.bshift); err != nil {
			return fmt.Errorf("ext4io: inode %d: reading journalled blocks %d+%d: %w", f.ino, rec.blks[i], k, wrapIO(err))
		}
		for j := range k {
			if !bytes.Equal(run[j*bs:(j+1)*bs], rec.data[i+j]) {
				same = false
				break
			}
		}
		i += k
	}
	if same {
		return nil
	}
	m.mu.Lock()
	if m.live[f.ino] != rec {
		m.mu.Unlock()
		return nil
	}
	m.dropLiveLocked(f.ino, rec)
	m.revokeDataLocked(rec.blks)
	m.mu.Unlock()
	for _, b := range rec.blks {
		m.j.Forget(b)
	}
	f.v.fcIneligible("journalled data overwritten")
	return nil
}

// revokeAllLive revokes every live record's blocks in the pending set,
// for Volume.Sync.
func (m *jmeta) revokeAllLive() {
	if m.nlive.Load() == 0 {
		return
	}
	m.mu.Lock()
	var gone []uint64
	for ino, rec := range m.live {
		gone = append(gone, rec.blks...)
		m.dropLiveLocked(ino, rec)
	}
	m.liveOrder = nil
	m.revokeDataLocked(gone)
	m.mu.Unlock()
	for _, b := range gone {
		m.j.Forget(b)
	}
}
