package journal

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/internal/mutant"
)

// transaction is one jbd2 transaction. All fields are guarded by Journal.mu;
// the slices in buffers are never changed (a block dirtied again gets a new
// one), so a buffer read under the lock may be used after it is released.
type transaction struct {
	tid      uint32
	locked   bool                // no handle may join: a commit is pending
	updates  int                 // open handles
	reserved int                 // credits of open handles + credits used by stopped ones
	declared map[uint64]struct{} // blocks a handle got write access to
	buffers  map[uint64][]byte   // newest contents of dirtied blocks
	revokes  map[uint64]struct{} // revoked blocks
	// home holds blocks whose copy in this transaction the caller has
	// written to the home location itself (MarkHome): a checkpoint
	// skips them and Lookup does not return them.
	home    map[uint64]struct{}
	held    int       // non-nil buffers, counted in Journal.mu.heldBytes once committed
	born    time.Time // when the first handle joined
	syncers int       // Syncs that asked for its commit
	start   uint32    // first log block, once committing
	nblocks uint32    // log blocks, once committing
}

func (t *transaction) empty() bool { return len(t.buffers) == 0 && len(t.revokes) == 0 }

// logBound is the most log blocks a transaction with c credits can take:
// every credit a journalled block or a revoke record, plus descriptor,
// revoke and commit blocks.
func (j *Journal) logBound(c int) int {
	tp, rp := j.f.TagsPerDescriptor(), j.f.RevokesPerBlock()
	return c + (c+tp-1)/tp + (c+rp-1)/rp + 1
}

// logSlack is kept free so a full log never has its head meet its tail.
const logSlack = 2

// Handle is one atomic metadata update, jbd2's handle_t. A Handle is used by
// one goroutine at a time.
type Handle struct {
	j       *Journal
	t       *transaction
	credits int
	used    int
	stopped bool
}

// Start returns a handle with room for credits changes (each GetWriteAccess
// of a block new to the transaction, and each Revoke, takes one) joined to
// the running transaction. When the transaction or the log has no room,
// or the committed transactions hold more than twice Config.MaxHeldBytes
// of block copies, it waits for a commit or runs a checkpoint instead of
// failing.
//
// No deadlock: Start only waits for commits and checkpoints, and a commit
// only waits for open handles to Stop. So a goroutine must not call Start
// while it holds an unstopped Handle (jbd2 nests such handles; this package
// does not). Start fails with ErrInvalid if credits can never fit one
// transaction, with ErrClosed after Close and with the abort error after
// an I/O failure.
func (j *Journal) Start(credits int) (*Handle, error) {
	if credits < 1 || j.logBound(credits) > j.maxTxn {
		return nil, fmt.Errorf("journal: %d credits exceed the transaction limit: %w", credits, ErrInvalid)
	}
	return j.start(credits, j.maxTxn)
}

// setMaxTxn sets the transaction limits from the log's extent [first,
// last): a quarter of the log, as jbd2's j_max_transaction_buffers.
func (j *Journal) setMaxTxn() {
	j.maxTxn = int(j.last-j.first) / 4
	j.maxCredits = j.maxCreditsFor(j.maxTxn)
}

// MaxCredits returns the most credits Start takes for one handle: a
// transaction's log footprint is at most a quarter of the log (jbd2's
// j_max_transaction_buffers).
func (j *Journal) MaxCredits() int { return j.maxCredits }

// MaxLargeCredits returns the most credits StartLarge takes: a
// transaction filling the whole log but logSlack blocks.
func (j *Journal) MaxLargeCredits() int { return j.maxCreditsFor(j.largeTxn()) }

// largeTxn is the largest log footprint of a transaction StartLarge
// builds.
func (j *Journal) largeTxn() int { return int(j.last-j.first) - logSlack }

// maxCreditsFor returns the largest c with logBound(c) <= limit, 0 if none.
func (j *Journal) maxCreditsFor(limit int) int {
	c := limit // logBound(c) > c
	for c > 0 && j.logBound(c) > limit {
		c--
	}
	return c
}

// StartLarge is Start for a handle of more than MaxCredits credits, up to
// MaxLargeCredits, for a change that must not be split between
// transactions: it waits until the log has room for a transaction that
// large (committing the running transaction and checkpointing as needed)
// and joins the handle to it, so that all its changes commit together.
// The transaction may then exceed the quarter of the log Start keeps to
// (recovery sets no limit on a transaction's size); the next Start that
// does not fit commits it first. It fails with an error matching
// ErrNoSpace when credits exceed MaxLargeCredits, as jbd2 refuses a
// handle larger than a transaction with ENOSPC.
func (j *Journal) StartLarge(credits int) (*Handle, error) {
	if credits < 1 {
		return nil, fmt.Errorf("journal: %d credits: %w", credits, ErrInvalid)
	}
	if j.logBound(credits) > j.largeTxn() {
		return nil, fmt.Errorf("journal: %d credits exceed the log (%d at most in one transaction): %w", credits, j.MaxLargeCredits(), ErrNoSpace)
	}
	return j.start(credits, max(j.maxTxn, j.largeTxn()))
}

// start is Start with limit as the largest log footprint of the
// transaction the handle joins.
func (j *Journal) start(credits, limit int) (*Handle, error) {
	short := false // counted in stats.spaceWaits once
	j.mu.Lock()
	for {
		if j.mu.err != nil {
			err := j.mu.err
			j.mu.Unlock()
			return nil, err
		}
		if j.mu.closed {
			j.mu.Unlock()
			return nil, fmt.Errorf("journal: start: %w", ErrClosed)
		}
		j.startLocked()
		t := j.mu.running
		if t == nil {
			t = &transaction{tid: j.mu.nextTid, declared: map[uint64]struct{}{},
				buffers: map[uint64][]byte{}, revokes: map[uint64]struct{}{}}
			j.mu.nextTid++
			j.mu.running = t
		}
		if t.locked {
			j.waitLocked()
			continue
		}
		need := j.logBound(t.reserved + credits)
		if need > limit {
			// Full: commit it and join the next one.
			t.locked = true
			j.requestCommitLocked(t.tid)
			j.waitLocked()
			continue
		}
		if len(j.mu.checkpoint) > 0 && j.heldOverLocked(j.maxHeldHard()) {
			// The background checkpoint has not kept up with commits:
			// write the committed copies home before adding more.
			if !short {
				short = true
				j.stats.spaceWaits.Add(1)
			}
			j.mu.Unlock()
			if err := j.Checkpoint(); err != nil {
				return nil, err
			}
			j.mu.Lock()
			continue
		}
		free := int(j.last-j.first) - int(j.mu.used) - logSlack
		if need > free {
			if !short {
				short = true
				j.stats.spaceWaits.Add(1)
			}
			switch {
			case len(j.mu.checkpoint) > 0:
				j.mu.Unlock()
				if err := j.Checkpoint(); err != nil {
					return nil, err
				}
				j.mu.Lock()
			case j.mu.committing != nil:
				j.waitLocked()
			case t.reserved > 0:
				t.locked = true
				j.requestCommitLocked(t.tid)
				j.waitLocked()
			case !j.cpMu.TryLock():
				// A checkpoint has taken the committed transactions off
				// the list but frees their log space only once the new
				// tail is written: wait for it.
				j.mu.Unlock()
				j.WaitCheckpoint()
				j.mu.Lock()
			default:
				j.cpMu.Unlock()
				j.mu.Unlock()
				return nil, fmt.Errorf("journal: %d credits do not fit an empty log: %w", credits, ErrInvalid)
			}
			continue
		}
		if t.updates == 0 && t.born.IsZero() {
			t.born = j.now()
		}
		t.updates++
		t.reserved += credits
		j.mu.Unlock()
		return &Handle{j: j, t: t, credits: credits}, nil
	}
}

// TID returns the id of the transaction the handle belongs to.
func (h *Handle) TID() uint32 { return h.t.tid }

func (h *Handle) check() error {
	if h.stopped {
		return fmt.Errorf("journal: handle already stopped: %w", ErrInvalid)
	}
	return h.j.mu.err
}

// GetWriteAccess declares that the handle will modify file system block
// blk (jbd2_journal_get_write_access). It takes one credit the first time
// blk joins the transaction.
func (h *Handle) GetWriteAccess(blk uint64) error {
	j := h.j
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := h.check(); err != nil {
		return err
	}
	if _, ok := h.t.declared[blk]; ok {
		return nil
	}
	if h.used >= h.credits {
		return fmt.Errorf("journal: handle out of credits (%d) declaring block %d: %w", h.credits, blk, ErrInvalid)
	}
	h.used++
	h.t.declared[blk] = struct{}{}
	return nil
}

// Dirty records data (one block) as the new contents of blk
// (jbd2_journal_dirty_metadata). The transaction keeps its own copy; data
// may be reused after the call. blk must have been declared with
// GetWriteAccess in this transaction. Dirtying cancels an earlier Revoke of
// blk in the same transaction.
func (h *Handle) Dirty(blk uint64, data []byte) error {
	return h.dirty(blk, data, false)
}

// DirtyOwned is Dirty without the copy: the journal keeps data itself as
// blk's contents until the block is checkpointed or forgotten. The caller
// must not change data after the call; it may go on reading it (share it
// with a cache of clean blocks, as the volume's metadata cache does).
func (h *Handle) DirtyOwned(blk uint64, data []byte) error {
	return h.dirty(blk, data, true)
}

func (h *Handle) dirty(blk uint64, data []byte, own bool) error {
	j := h.j
	if len(data) != j.bs {
		return fmt.Errorf("journal: dirty block %d with %d bytes: %w", blk, len(data), ErrInvalid)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := h.check(); err != nil {
		return err
	}
	if _, ok := h.t.declared[blk]; !ok {
		return fmt.Errorf("journal: block %d dirtied without write access: %w", blk, ErrInvalid)
	}
	// A block dirtied again gets a new buffer rather than an update in
	// place: the old one may be a caller's (DirtyOwned), which it reads.
	if own {
		h.t.buffers[blk] = data
	} else {
		h.t.buffers[blk] = append(make([]byte, 0, j.bs), data...)
	}
	delete(h.t.revokes, blk)
	j.holdsLocked(h.t, blk)
	// Reused as metadata: this copy is the newest and must reach home.
	delete(j.mu.forgotten, blk)
	return nil
}

// Revoke records that blk was freed (jbd2_journal_revoke): recovery will not
// replay older journalled copies of it, and older transactions no longer
// write it home once this one commits. It takes one credit. The caller must
// not reuse blk for data until this transaction has committed.
func (h *Handle) Revoke(blk uint64) error {
	j := h.j
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := h.check(); err != nil {
		return err
	}
	if _, ok := h.t.revokes[blk]; ok {
		return nil
	}
	if h.used >= h.credits {
		return fmt.Errorf("journal: handle out of credits (%d) revoking block %d: %w", h.credits, blk, ErrInvalid)
	}
	h.used++
	h.t.revokes[blk] = struct{}{}
	delete(h.t.buffers, blk)
	delete(h.t.declared, blk)
	j.holdsLocked(h.t, blk)
	return nil
}

// Stop ends the handle and returns its unused credits to the transaction.
func (h *Handle) Stop() error {
	j := h.j
	j.mu.Lock()
	defer j.mu.Unlock()
	if h.stopped {
		return fmt.Errorf("journal: handle stopped twice: %w", ErrInvalid)
	}
	h.stopped = true
	h.t.updates--
	h.t.reserved -= h.credits - h.used
	if h.t.updates == 0 {
		j.broadcastLocked()
	}
	return j.mu.err
}

// Stats returns the journal's counters since Open or Create.
func (j *Journal) Stats() Stats {
	return Stats{Commits: j.stats.commits.Load(), Checkpoints: j.stats.checkpoints.Load(),
		LogBlocks: j.stats.logBlocks.Load(), BatchWaits: j.stats.batchWaits.Load(), SpaceWaits: j.stats.spaceWaits.Load()}
}

// commitLoop is the commit goroutine (jbd2's kjournald2). It commits
// what a Sync could not commit on its own goroutine (another commit was
// in flight), full transactions (Start) and old ones (CommitInterval).
func (j *Journal) commitLoop() {
	defer close(j.done)
	tick := time.Duration(0)
	if j.interval > 0 {
		tick = max(j.interval/4, time.Millisecond)
	}
	var timer <-chan time.Time
	for {
		if tick > 0 {
			timer = time.After(tick)
		}
		select {
		case <-j.stop:
			return
		case <-j.kick:
		case <-timer:
		}
		// Waits out a commit that a Sync runs on its own goroutine; the
		// test below then sees what is left to commit.
		j.commitMu.Lock()
		j.mu.Lock()
		t := j.mu.running
		do := t != nil && j.mu.err == nil && (tidGEQ(j.mu.commitReq, t.tid) || t.locked ||
			(j.interval > 0 && !t.born.IsZero() && j.now().Sub(t.born) >= j.interval))
		j.mu.Unlock()
		if do {
			j.commitRunning()
		}
		j.commitMu.Unlock()
		j.kickCheckpoint()
	}
}

// maxHeldRevokes is how many revoke records the committed transactions
// waiting for a checkpoint may keep in memory before the checkpoint
// goroutine is woken whatever the log's use. A revoke record costs the log
// a few bytes but memory a map entry or two: without this bound a
// workload that frees and reallocates metadata blocks (directories made
// and removed) would hold memory many times the size of half the log.
const maxHeldRevokes = 1 << 16

// DefaultMaxHeldBytes is Config.MaxHeldBytes's default: half of the
// 64 MiB log mkfs.ext4 gives file systems from 4 to 16 GiB (with 4 KiB
// blocks), so that logs of up to 64 MiB are checkpointed as they fill,
// as before the bound, while larger ones hold no more.
const DefaultMaxHeldBytes = 32 << 20

// holdCommittedLocked moves t, just committed (or failed to), onto the
// checkpoint list and counts what it keeps in memory. j.mu is held.
func (j *Journal) holdCommittedLocked(t *transaction) {
	j.mu.checkpoint = append(j.mu.checkpoint, t)
	j.mu.heldRevokes += len(t.revokes)
	t.held = len(t.buffers) // all non-nil: MarkHome drops copies of committed transactions only
	j.mu.heldBytes += int64(t.held) * int64(j.bs)
}

// heldOverLocked reports whether the committed transactions hold more
// than limit bytes of block copies (never with no bound). j.mu is held.
func (j *Journal) heldOverLocked(limit int64) bool {
	return j.maxHeld >= 0 && j.mu.heldBytes > limit
}

// maxHeldHard is the bytes of block copies held past which Start
// checkpoints itself: twice maxHeld.
func (j *Journal) maxHeldHard() int64 {
	if j.maxHeld > math.MaxInt64/2 {
		return math.MaxInt64
	}
	return 2 * j.maxHeld
}

// kickCheckpoint wakes the checkpoint goroutine once more than half the
// log is in use, more than maxHeldRevokes revoke records are held, or
// more than maxHeld bytes of block copies, and committed transactions
// wait to be written home.
func (j *Journal) kickCheckpoint() {
	j.mu.Lock()
	low := j.mu.err == nil && len(j.mu.checkpoint) > 0 &&
		(j.mu.used > (j.last-j.first)/2 || j.mu.heldRevokes > maxHeldRevokes || j.heldOverLocked(j.maxHeld))
	j.mu.Unlock()
	if low {
		select {
		case j.cpKick <- struct{}{}:
		default:
		}
	}
}

// checkpointLoop is the checkpoint goroutine: the commit goroutine wakes
// it once more than half the log is in use (or maxHeldRevokes revoke
// records, or maxHeld bytes of block copies, are held: kickCheckpoint),
// so that commits, and the
// fsyncs waiting for them, go on while it writes blocks home, and Start
// rarely finds the log short of space (a transaction takes at most a
// quarter of it).
func (j *Journal) checkpointLoop() {
	defer close(j.cpDone)
	for {
		select {
		case <-j.stop:
			return
		case <-j.cpKick:
		}
		_ = j.Checkpoint() // errors abort the journal
	}
}

// commitRunning commits the running transaction (jbd2_journal_commit_transaction).
// j.commitMu is held.
func (j *Journal) commitRunning() {
	j.mu.Lock()
	t := j.mu.running
	if t == nil || j.mu.err != nil {
		j.mu.Unlock()
		return
	}
	t.locked = true
	for t.updates > 0 {
		j.waitLocked()
	}
	if j.mu.running != t || j.mu.err != nil {
		j.mu.Unlock()
		return
	}
	if t.empty() {
		// Nothing to log: let handles join it again.
		t.locked = false
		t.born = time.Time{}
		j.broadcastLocked()
		j.mu.Unlock()
		return
	}
	nrev := (len(t.revokes) + j.f.RevokesPerBlock() - 1) / j.f.RevokesPerBlock()
	tp := j.f.TagsPerDescriptor()
	ndesc := (len(t.buffers) + tp - 1) / tp
	t.nblocks = uint32(nrev + ndesc + len(t.buffers) + 1)
	t.start = j.mu.head
	j.mu.head = j.wrap(j.mu.head + t.nblocks)
	j.mu.used += t.nblocks
	j.mu.running = nil
	j.mu.committing = t
	j.broadcastLocked()
	j.mu.Unlock()

	began := time.Now()
	err := j.writeTransaction(t)
	if err == nil {
		err = j.fcSuperseded(t.tid) // fcwrite.go
	}
	took := time.Since(began)

	j.mu.Lock()
	j.mu.committing = nil
	// jbd2's j_average_commit_time: a quarter of the newest, three of the
	// average.
	if j.mu.avgCommit == 0 {
		j.mu.avgCommit = took
	} else {
		j.mu.avgCommit = (took + 3*j.mu.avgCommit) / 4
	}
	if err != nil {
		// Keep the failed transaction visible to Lookup (never written
		// home: Checkpoint refuses to run after an abort), so readers do
		// not fall back to older home copies of its blocks.
		j.holdCommittedLocked(t)
		j.abortLocked(err)
		j.mu.Unlock()
		return
	}
	j.holdCommittedLocked(t)
	j.mu.commitSeq = t.tid
	// The Forgets whose revoke this transaction carries are committed:
	// the blocks may be reused from now on (after WaitCheckpoint).
	for b := range t.revokes {
		evs := j.mu.forgotten[b]
		for i := range evs {
			if !tidGT(evs[i].from, t.tid) {
				evs[i].done = true
			}
		}
	}
	j.stats.commits.Add(1)
	j.broadcastLocked()
	j.mu.Unlock()
}

// writeTransaction writes t to the log. The barrier sequence follows
// fs/jbd2/commit.c jbd2_journal_commit_transaction:
//   - if the on-disk superblock says the log is empty (JBD2_FLUSHED), it is
//     rewritten first with s_start/s_sequence of this transaction, without a
//     flush: the commit block's preflush makes it durable. A superblock
//     with async_commit (JBD2_FEATURE_INCOMPAT_ASYNC_COMMIT) is rewritten
//     without it in the same way, before the first commit block: ext4
//     clears the feature at every mount without journal_async_commit
//     (set_journal_csum_feature_set), and ext4io has no such option;
//   - ordered data is written (Config.BeforeCommit);
//   - revoke blocks (jbd2_journal_write_revoke_records), then descriptor
//     blocks each followed by its journalled blocks, escaped when they begin
//     with the jbd2 magic; each run of them contiguous on the device is one
//     write (logRun);
//   - with an external journal the file system device is flushed before the
//     commit record ("if the journal is not located on the file system
//     device, then we must flush the file system device");
//   - the commit block is written REQ_PREFLUSH|REQ_FUA, as jbd2 does without
//     async_commit (journal_submit_commit_record): here Flush, then
//     blockdev.WriteAtSync (one pwritev2 with RWF_DSYNC on a SyncWriter,
//     else write and Flush).
//     On a shared device the preflush also covers the ordered data the
//     caller wrote before the commit (with or without BeforeCommit): no
//     commit block reaches the log before the data its blocks map.
func (j *Journal) writeTransaction(t *transaction) error {
	j.sbMu.Lock()
	uuid := j.sb.UUID // j.sb is replaced under sbMu by checkpoints
	if j.sb.Start == 0 || j.sb.FeatureIncompat&FeatureIncompatAsyncCommit != 0 {
		nsb := j.sb
		if nsb.Start == 0 {
			nsb.Start, nsb.SeqTail = t.start, t.tid
		}
		nsb.FeatureIncompat &^= FeatureIncompatAsyncCommit
		if err := j.writeSuperblockLocked(&nsb, false); err != nil {
			j.sbMu.Unlock()
			return err
		}
	}
	j.sbMu.Unlock()
	if j.before != nil {
		if err := j.before(t.tid); err != nil {
			return fmt.Errorf("journal: ordered data for transaction %d: %w", t.tid, err)
		}
	}
	lw := j.newLogRun(t.start)
	// Revoke blocks.
	revs := sortedKeys(t.revokes)
	for len(revs) > 0 {
		n := min(len(revs), j.f.RevokesPerBlock())
		r := Revoke{Sequence: t.tid, Blocks: revs[:n]}
		buf, err := lw.next()
		if err != nil {
			return err
		}
		if err := r.Encode(j.f, buf); err != nil {
			return err
		}
		revs = revs[n:]
	}
	// Descriptors and journalled blocks.
	blocks := sortedKeys(t.buffers)
	// The v1 transactional checksum (COMPAT_CHECKSUM) covers every log
	// block; it is computed only for journals that have it, as a bytewise
	// CRC costs a visible share of an fsync-heavy workload's CPU
	// (docs/performance.md, "Buffered, sequential and fsync-heavy writes").
	v1, crcSum := j.f.Compat&FeatureCompatChecksum != 0, ^uint32(0)
	tp := j.f.TagsPerDescriptor()
	tags := make([]Tag, min(len(blocks), tp))
	var escaped []byte // an escaped copy, for the tag checksum
	for len(blocks) > 0 {
		n := min(len(blocks), tp)
		d := Descriptor{Sequence: t.tid, Tags: tags[:n]}
		for i, b := range blocks[:n] {
			tg := Tag{Block: b, Flags: FlagSameUUID}
			if i == 0 {
				tg.Flags, tg.UUID = 0, uuid
			}
			if i == n-1 {
				tg.Flags |= FlagLastTag
			}
			src := t.buffers[b]
			if be.Uint32(src) == Magic {
				tg.Flags |= FlagEscape
			}
			if j.f.csumV2or3() {
				// The checksum covers the block as logged: escaped.
				if tg.Flags&FlagEscape != 0 {
					if escaped == nil {
						escaped = make([]byte, j.bs)
					}
					copy(escaped, src)
					clear(escaped[:4])
					src = escaped
				}
				tg.Checksum = j.f.TagCsum(t.tid, src)
				if !j.f.csumV3() {
					tg.Checksum &= 0xFFFF
				}
			}
			d.Tags[i] = tg
		}
		buf, err := lw.next()
		if err != nil {
			return err
		}
		if err := d.Encode(j.f, buf); err != nil {
			return err
		}
		if v1 {
			crcSum = crc32BE(crcSum, buf)
		}
		for i, b := range blocks[:n] {
			data, err := lw.next()
			if err != nil {
				return err
			}
			copy(data, t.buffers[b])
			if d.Tags[i].Flags&FlagEscape != 0 {
				clear(data[:4])
			}
			if v1 {
				crcSum = crc32BE(crcSum, data)
			}
		}
		blocks = blocks[n:]
	}
	// The commit block is a write of its own after the preflush.
	if err := lw.write(); err != nil {
		return err
	}
	if j.fsdev != j.dev && j.before != nil {
		if err := j.fsdev.Flush(); err != nil {
			return fmt.Errorf("journal: flush data device: %w", ioErr(err))
		}
	}
	if mutant.HomeBeforeCommit {
		if err := lw.write(); err != nil {
			return err
		}
		for _, b := range sortedKeys(t.buffers) {
			if err := j.writeHome(b, t.buffers[b]); err != nil {
				return err
			}
		}
	}
	if !mutant.NoCommitFlush {
		if err := j.dev.Flush(); err != nil {
			return fmt.Errorf("journal: preflush before commit %d: %w", t.tid, ioErr(err))
		}
	}
	now := j.now()
	c := Commit{Sequence: t.tid, Sec: uint64(now.Unix()), Nsec: uint32(now.Nanosecond())}
	if v1 {
		c.ChksumType, c.ChksumSize, c.Chksum[0] = ChecksumTypeCRC32, crc32ChksumSize, crcSum
	}
	buf, err := lw.next()
	if err != nil {
		return err
	}
	c.Encode(j.f, buf)
	// The commit block is durable when its write returns (FUA); the
	// preflush above made everything before it durable.
	if err := lw.writeSync(); err != nil {
		return err
	}
	if end := j.wrap(t.start + t.nblocks); lw.pos != end {
		return fmt.Errorf("journal: transaction %d wrote to %d, expected %d: %w", t.tid, lw.pos, end, ErrInvalid)
	}
	return nil
}

// maxLogRun bounds one coalesced log write, and so the committer's buffer.
const maxLogRun = 1 << 20

// logRun stages consecutive log blocks and writes each physically
// contiguous run of them with one device write (jbd2 submits a
// transaction's log buffers as one batch of bios the block layer merges).
// A run ends where the log wraps, where the journal's BlockMap is not
// contiguous, at maxLogRun bytes, and at write.
type logRun struct {
	j     *Journal
	pos   uint32 // next log block
	first uint32 // log block of the staged run
	off   int64  // its device offset
	n     int    // blocks staged
}

func (j *Journal) newLogRun(start uint32) *logRun {
	return &logRun{j: j, pos: start, first: start}
}

// next returns the buffer of the next log block, to be filled before the
// following next or write; it writes the staged run first when the block
// does not continue it.
func (r *logRun) next() ([]byte, error) {
	j := r.j
	off, err := j.devOffset(r.pos)
	if err != nil {
		return nil, err
	}
	if r.n > 0 && (r.pos != r.first+uint32(r.n) || off != r.off+int64(r.n)*int64(j.bs) || (r.n+1)*j.bs > maxLogRun) {
		if err := r.write(); err != nil {
			return nil, err
		}
	}
	if r.n == 0 {
		r.first, r.off = r.pos, off
	}
	need := (r.n + 1) * j.bs
	if len(j.logBuf) < need {
		// Grown to the largest run seen, at most maxLogRun.
		nb := make([]byte, min(max(need, 2*len(j.logBuf)), max(maxLogRun, j.bs)))
		copy(nb, j.logBuf[:r.n*j.bs])
		j.logBuf = nb
	}
	b := j.logBuf[r.n*j.bs : need]
	r.n++
	r.pos = j.wrap(r.pos + 1)
	j.stats.logBlocks.Add(1)
	return b, nil
}

// write writes the staged run, if any, with one device write.
func (r *logRun) write() error { return r.writeRun(false) }

// writeSync writes the staged run, if any, and makes it durable with one
// blockdev.WriteAtSync: a FUA write, which makes nothing else durable.
func (r *logRun) writeSync() error { return r.writeRun(true) }

func (r *logRun) writeRun(sync bool) error {
	if r.n == 0 {
		return nil
	}
	j := r.j
	n := r.n
	r.n = 0
	var err error
	if sync {
		_, err = blockdev.WriteAtSync(j.dev, j.logBuf[:n*j.bs], r.off)
	} else {
		_, err = j.dev.WriteAt(j.logBuf[:n*j.bs], r.off)
	}
	if err != nil {
		return fmt.Errorf("journal: write log blocks %d-%d: %w", r.first, r.first+uint32(n)-1, ioErr(err))
	}
	return nil
}

func sortedKeys[V any](m map[uint64]V) []uint64 {
	ks := make([]uint64, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// forgottenSince reports whether a Forget after transaction tid, the
// first one, has had its revoke committed: then tid's copy of the block is
// dead and the block may have been reused.
func forgottenSince(evs []forgetEvent, tid uint32) bool {
	for _, ev := range evs {
		if tidGT(ev.from, tid) {
			return ev.done
		}
	}
	return false
}

// Checkpoint writes every committed transaction's blocks to their home
// locations (skipping blocks a newer committed transaction rewrote, and
// forgotten blocks whose revoke has committed; see Forget), flushes the
// file system device, then advances the log tail in the journal superblock (written with FUA), as jbd2_log_do_checkpoint and
// jbd2_cleanup_journal_tail do. It runs in the background when the log is
// half full or the committed transactions hold many revoke records or more
// than Config.MaxHeldBytes of block copies, and from Start when the log is
// short of space or they hold twice that.
func (j *Journal) Checkpoint() error {
	j.cpMu.Lock()
	defer j.cpMu.Unlock()
	j.mu.Lock()
	if j.mu.err != nil {
		defer j.mu.Unlock()
		return j.mu.err
	}
	list := append([]*transaction(nil), j.mu.checkpoint...)
	forgotten := make(map[uint64][]forgetEvent, len(j.mu.forgotten))
	for b, evs := range j.mu.forgotten {
		forgotten[b] = slices.Clone(evs)
	}
	var home map[*transaction]map[uint64]struct{}
	for _, t := range list {
		if len(t.home) > 0 {
			if home == nil {
				home = map[*transaction]map[uint64]struct{}{}
			}
			home[t] = maps.Clone(t.home)
		}
	}
	if len(list) > 0 {
		// MarkHome waits for this checkpoint when it takes a transaction
		// of the list: its home marks may have come after the copy above.
		j.mu.cpActive, j.mu.cpUpTo = true, list[len(list)-1].tid
		defer func() {
			j.mu.Lock()
			j.mu.cpActive = false
			j.mu.Unlock()
		}()
	}
	j.mu.Unlock()
	if len(list) == 0 {
		return nil
	}
	owner := map[uint64]*transaction{}
	for _, t := range list {
		for b := range t.revokes {
			owner[b] = nil
		}
		for b := range t.buffers {
			owner[b] = t
		}
	}
	fail := func(err error) error {
		j.mu.Lock()
		j.abortLocked(err)
		j.mu.Unlock()
		return err
	}
	// Contiguous home blocks go out with one write each run.
	var run []byte
	var runStart uint64
	writeRun := func() error {
		if len(run) == 0 {
			return nil
		}
		err := j.writeHomeRun(runStart, run)
		run = run[:0]
		return err
	}
	todo := sortedKeys(owner)
	n := 0
	for _, b := range todo {
		t := owner[b]
		if t == nil || forgottenSince(forgotten[b], t.tid) {
			continue // revoked, or freed since and the free committed: its home may hold new data
		}
		if _, ok := home[t]; ok {
			if _, ok := home[t][b]; ok {
				continue // written home by the caller, maybe overwritten since (MarkHome)
			}
		}
		todo[n] = b
		n++
	}
	todo = todo[:n]
	for _, b := range todo {
		t := owner[b]
		if len(run) > 0 && (b != runStart+uint64(len(run)/j.bs) || len(run)+j.bs > maxLogRun) {
			if err := writeRun(); err != nil {
				return fail(err)
			}
		}
		if len(run) == 0 {
			runStart = b
			if run == nil {
				run = make([]byte, 0, min(len(todo)*j.bs, max(maxLogRun, j.bs)))
			}
		}
		run = append(run, t.buffers[b]...)
	}
	if err := writeRun(); err != nil {
		return fail(err)
	}
	if !mutant.NoCheckpointFlush {
		if err := j.fsdev.Flush(); err != nil {
			return fail(fmt.Errorf("journal: flush before tail update: %w", ioErr(err)))
		}
	}
	j.sbMu.Lock()
	j.mu.Lock()
	j.mu.checkpoint = j.mu.checkpoint[len(list):]
	for _, t := range list {
		j.dropNewestLocked(t)
		j.mu.heldRevokes -= len(t.revokes)
		j.mu.heldBytes -= int64(t.held) * int64(j.bs)
	}
	tail, seq := j.mu.head, j.mu.nextTid
	if j.mu.running != nil {
		seq = j.mu.running.tid
	}
	if len(j.mu.checkpoint) > 0 {
		tail, seq = j.mu.checkpoint[0].start, j.mu.checkpoint[0].tid
	} else if c := j.mu.committing; c != nil {
		tail, seq = c.start, c.tid
	}
	j.mu.Unlock()
	var freed uint32
	for _, t := range list {
		freed += t.nblocks
	}
	nsb := j.sb
	err := error(nil)
	if nsb.Start != 0 {
		nsb.Start, nsb.SeqTail = tail, seq
		err = j.writeSuperblockLocked(&nsb, true)
	}
	j.sbMu.Unlock()
	j.mu.Lock()
	defer j.mu.Unlock()
	if err != nil {
		j.abortLocked(err)
		return err
	}
	j.mu.tail, j.mu.tailSeq = tail, seq
	j.mu.used -= freed
	for b, evs := range j.mu.forgotten {
		// Events whose transactions before from are all home are done with.
		evs = slices.DeleteFunc(evs, func(ev forgetEvent) bool { return !tidGT(ev.from, seq) })
		if len(evs) == 0 {
			delete(j.mu.forgotten, b)
		} else {
			j.mu.forgotten[b] = evs
		}
	}
	j.stats.checkpoints.Add(1)
	j.broadcastLocked()
	return nil
}

// Close commits the running transaction, stops the commit goroutine,
// checkpoints everything and marks the journal empty (s_start = 0,
// s_sequence = the next tid) with FUA. It waits for open handles to stop.
// It does not close the devices. When fast commits were written since the
// last full commit, they hold changes no commit has (the file system
// stopped after an error without its last commit): the journal is left
// as it is, s_start set, so that recovery replays them; an empty journal
// would make every replay skip the fast-commit area.
func (j *Journal) Close() error {
	j.mu.Lock()
	if j.mu.closed {
		j.mu.Unlock()
		return fmt.Errorf("journal: close: %w", ErrClosed)
	}
	j.mu.closed = true
	started := j.mu.started
	j.broadcastLocked()
	j.mu.Unlock()
	// A fast-commit write in flight ends before the superblock is
	// written for the last time; later ones see the journal closed.
	j.fcMu.Lock()
	//lint:ignore SA2001 the empty critical section waits for the writer
	j.fcMu.Unlock()
	if started {
		close(j.stop)
		<-j.done
		<-j.cpDone
	}
	j.commitMu.Lock() // a Sync may be committing on its own goroutine
	j.commitRunning()
	j.commitMu.Unlock()
	if err := j.Checkpoint(); err != nil {
		return err
	}
	j.mu.Lock()
	if err := j.mu.err; err != nil {
		j.mu.Unlock()
		return err
	}
	seq := j.mu.nextTid
	if j.mu.running != nil {
		seq = j.mu.running.tid // empty: never committed, its tid is free
	}
	j.mu.Unlock()
	if j.fcUsed.Load() {
		return nil // no fast commit runs now: the journal is closed
	}
	j.sbMu.Lock()
	defer j.sbMu.Unlock()
	if j.sb.Start == 0 && j.sb.SeqTail == seq {
		return nil
	}
	nsb := j.sb
	nsb.Start, nsb.SeqTail = 0, seq
	return j.writeSuperblockLocked(&nsb, true)
}

// dropNewestLocked removes t's blocks from j.mu.newest where t is their
// newest transaction; t has left the journal, and every older one with it.
func (j *Journal) dropNewestLocked(t *transaction) {
	drop := func(b uint64) {
		if j.mu.newest[b] == t {
			delete(j.mu.newest, b)
		}
	}
	for b := range t.buffers {
		drop(b)
	}
	for b := range t.revokes {
		drop(b)
	}
}
