package journal

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ext4io/ext4io/blockdev"
)

// fcState is the fast-commit writing state of a Journal.
//
// Locking: fcMu serializes fast-commit writes with the zeroing of the area
// after a full commit (fcSuperseded) and with Close, and guards
// fcCommitted. It is taken before sbMu and j.mu, and never while either
// is held.
type fcState struct {
	// fcUsed says fast commits were written since the last full commit.
	fcUsed atomic.Bool
	fcMu   sync.Mutex
	// fcCommitted is the tid of the newest full commit made durable
	// (set by fcSuperseded) and fcCommittedSet says there was one.
	fcCommitted    uint32
	fcCommittedSet bool
}

// Writing fast commits.
//
// The file system builds the blocks (ext4 tags, layout/fastcommit.go);
// this package places them in the fast-commit area and makes them
// durable. A fast commit carries the tid of the transaction that would
// commit next (jbd2's running transaction): recovery replays it only when
// that transaction is not complete in the log (FC2 of fastcommit.go), so a
// full commit supersedes every fast commit before it, and the file system
// starts the area again at its first block after one (jbd2 resets j_fc_off
// when a full commit ends).
//
// Invariants:
//   - FW1: a fast commit is built only while the journal is idle: no
//     transaction is committing and the running one, if any, holds nothing
//     (FastCommitTid). Every earlier transaction is then durable, and
//     recovery's end_transaction is the tid the fast commit carries. The
//     file system may let handles start and a full commit begin before the
//     blocks are written: that commit has the fast commit's tid and holds
//     its changes, so it supersedes it. The area's zeroing after that
//     commit (FW4) waits for a fast-commit write in flight, and a write
//     that finds the commit of its tid durable is not made (ErrSuperseded),
//     so no fast commit lands in the area after the zeroing.
//   - FW2: recovery runs only when the on-disk superblock's s_start is not
//     0; a fast commit on an empty (flushed) journal first rewrites the
//     superblock with s_start at the log head and s_sequence the fast
//     commit's tid, as jbd2 keeps s_start set while the file system is
//     mounted.
//   - FW4: a full commit supersedes the area's fast commits; once it is
//     durable the area's first block is zeroed and flushed, before the
//     journal takes another fast commit. e2fsck 1.47.0 fails the whole
//     recovery ("Invalid argument") on a HEAD whose tid is not the
//     expected one, where the kernel stops scanning; a crash between the
//     commit's flush and the zeroing's still leaves such a HEAD.
//   - FW3: the fast-commit blocks are written after the file system's data
//     (the caller writes it first). With preflush the devices are flushed
//     before the blocks are written and once after, as ext4 writes the
//     tail REQ_PREFLUSH|REQ_FUA (FUA emulated by the second flush): the
//     tags never reach the disk before the data they map. Without it the
//     device is flushed once after both, and a crash before that flush may
//     keep tags that map blocks whose data did not arrive (the window of
//     jbd2's async_commit). The fast commit that starts the area may have
//     its blocks after the first written before that first flush: while
//     the area's first block is zero (FW4) no scan reads them. Its first
//     block, with the HEAD, follows the flush, so that a crash never keeps
//     the HEAD without the rest of the first fast commit, which the
//     kernel's and e2fsck's scans take for a corrupt area and fail the
//     whole recovery.

// ErrSuperseded is returned by WriteFastCommit when the full commit of the
// fast commit's tid is durable already: it holds every change the fast
// commit would carry, which is not written.
var ErrSuperseded = errors.New("journal: fast commit superseded by a durable full commit")

// ErrBusy is returned by FastCommitTid while a full commit is running or
// pending: the caller falls back to a full commit.
var ErrBusy = errors.New("journal: a full commit is running or pending")

// EnableFastCommit sets JBD2_FEATURE_INCOMPAT_FAST_COMMIT on an empty
// journal whose superblock reserves a fast-commit area (s_num_fc_blks, or
// the default 256 blocks), as ext4 does at mount with the fast_commit
// feature, and splits the journal into log and area. It must be called
// before the first handle starts. A journal with the feature is left as
// it is.
func (j *Journal) EnableFastCommit() error {
	j.sbMu.Lock()
	defer j.sbMu.Unlock()
	_, incompat, _ := j.sb.features()
	if incompat&FeatureIncompatFastCommit != 0 {
		return nil
	}
	j.mu.Lock()
	busy := j.mu.running != nil || j.mu.committing != nil || len(j.mu.checkpoint) > 0
	j.mu.Unlock()
	if busy || j.sb.Start != 0 {
		return fmt.Errorf("journal: enabling fast commits on a journal in use: %w", ErrInvalid)
	}
	nsb := j.sb
	nsb.FeatureIncompat |= FeatureIncompatFastCommit
	if err := j.setFastCommitArea(&nsb); err != nil {
		return err
	}
	if err := j.writeSuperblockLocked(&nsb, true); err != nil {
		j.last, j.fcFirst, j.fcLast = nsb.MaxLen, 0, 0
		return err
	}
	j.setMaxTxn()
	return nil
}

// ClearFastCommitArea zeroes the area's first block if it is not zero
// already, for a writer that starts on a journal whose area may hold fast
// commits an earlier recovery replayed (FW4): a full commit is about to
// supersede them. No flush: recovery needs a commit, whose flush before
// its commit block covers the write.
func (j *Journal) ClearFastCommitArea() error {
	if j.fcFirst == 0 {
		return nil
	}
	b := make([]byte, j.bs)
	if err := j.readLog(j.fcFirst, b); err != nil {
		return err
	}
	for _, c := range b {
		if c != 0 {
			return j.writeLog(j.fcFirst, make([]byte, j.bs))
		}
	}
	return nil
}

// FastCommitLen returns the number of blocks of the fast-commit area
// ([j_fc_first, j_fc_last)), 0 without the fast_commit feature.
func (j *Journal) FastCommitLen() int {
	if j.fcFirst == 0 {
		return 0
	}
	return int(j.fcLast - j.fcFirst)
}

// FastCommitTid returns the tid a fast commit written now carries: the
// tid of the next full commit. It fails with ErrBusy when the journal is
// not idle (FW1), and with the journal's error after an abort.
func (j *Journal) FastCommitTid() (uint32, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.mu.err != nil {
		return 0, j.mu.err
	}
	if j.mu.closed {
		return 0, fmt.Errorf("journal: fast commit: %w", ErrClosed)
	}
	if j.mu.committing != nil {
		return 0, ErrBusy
	}
	tid := j.mu.nextTid
	if t := j.mu.running; t != nil {
		if !t.empty() || t.locked || t.updates > 0 {
			return 0, ErrBusy
		}
		tid = t.tid
	}
	if tid != j.mu.commitSeq+1 {
		return 0, ErrBusy
	}
	return tid, nil
}

// WriteFastCommit writes blocks (whole blocks, each the journal's block
// size) to the fast-commit area from its block first on, for a fast
// commit of tid (from FastCommitTid, with nothing started since), and
// makes them durable, with preflush also flushing before them (FW2,
// FW3). With preflush it is FlushFastCommit and WriteFastCommitSync,
// without it WriteFastCommitBlocks and FlushFastCommit. It returns
// ErrSuperseded, writing nothing, when the full commit of tid is durable
// (FW1).
func (j *Journal) WriteFastCommit(tid uint32, first int, blocks []byte, preflush bool) error {
	if preflush {
		if err := j.FlushFastCommit(tid); err != nil {
			return err
		}
		return j.WriteFastCommitSync(tid, first, blocks)
	}
	if err := j.WriteFastCommitBlocks(tid, first, blocks); err != nil {
		return err
	}
	return j.FlushFastCommit(tid)
}

// WriteFastCommitSync is WriteFastCommitBlocks that returns once the
// blocks are durable, and the superblock it may rewrite before them: one
// blockdev.WriteAtSync (a FUA write) when the blocks are contiguous on
// the device, else writes and a flush of the journal's device. Like a FUA
// write it makes nothing else durable: the caller calls FlushFastCommit
// first, after the data the blocks map and the area's earlier fast
// commits were written (FW3), and writes nothing the fast commit needs in
// between.
func (j *Journal) WriteFastCommitSync(tid uint32, first int, blocks []byte) error {
	return j.writeFastCommit(tid, first, blocks, true)
}

// WriteFastCommitBlocks writes blocks (whole blocks, each the journal's
// block size) to the fast-commit area from its block first on, for a fast
// commit of tid (from FastCommitTid, with nothing started since), without
// a flush: the fast commit is durable after the next FlushFastCommit. The
// caller orders the flushes (FW3): the data the blocks map was made
// durable by a flush issued after its write completed, and the blocks of
// the area's earlier fast commits by a flush issued after they were
// written, or are written with them before the same flush (a crash that
// keeps the later fast commit without an earlier one replays neither: a
// scan stops at the first block that is not a valid fast commit of its
// tid). Physically contiguous blocks go in one write. If the on-disk
// superblock's s_start is 0, it is rewritten first (FW2); the next flush
// covers it too. It returns ErrSuperseded, writing nothing, when the full
// commit of tid is durable (FW1).
func (j *Journal) WriteFastCommitBlocks(tid uint32, first int, blocks []byte) error {
	return j.writeFastCommit(tid, first, blocks, false)
}

// writeFastCommit is WriteFastCommitBlocks, and with durable
// WriteFastCommitSync.
func (j *Journal) writeFastCommit(tid uint32, first int, blocks []byte, durable bool) error {
	n := len(blocks) / j.bs
	if j.fcFirst == 0 || first < 0 || len(blocks)%j.bs != 0 || first+n > j.FastCommitLen() {
		return fmt.Errorf("journal: fast commit of %d blocks at %d of %d: %w", n, first, j.FastCommitLen(), ErrInvalid)
	}
	j.fcMu.Lock()
	defer j.fcMu.Unlock()
	if j.fcCommittedSet && int32(j.fcCommitted-tid) >= 0 {
		return ErrSuperseded
	}
	if err := j.fcUsable(); err != nil {
		return err
	}
	j.sbMu.Lock()
	if j.sb.Start == 0 {
		// The log starts at its oldest live transaction: a full commit
		// may have begun since the fast commit was built (FW1), and
		// its superblock update (writeTransaction) sees s_start set.
		j.mu.Lock()
		start, seq := j.mu.head, tid
		if len(j.mu.checkpoint) > 0 {
			start, seq = j.mu.checkpoint[0].start, j.mu.checkpoint[0].tid
		} else if c := j.mu.committing; c != nil {
			start, seq = c.start, c.tid
		}
		j.mu.Unlock()
		nsb := j.sb
		nsb.Start, nsb.SeqTail = start, seq
		// With durable it is durable before the blocks are written.
		if err := j.writeSuperblockLocked(&nsb, durable); err != nil {
			j.sbMu.Unlock()
			return err
		}
	}
	j.sbMu.Unlock()
	type run struct {
		i, k int // blocks [i, i+k) of blocks
		off  int64
	}
	var runs []run
	for i := 0; i < n; {
		off, err := j.devOffset(j.fcFirst + uint32(first+i))
		if err != nil {
			return err
		}
		k := 1
		for ; i+k < n; k++ {
			o, err := j.devOffset(j.fcFirst + uint32(first+i+k))
			if err != nil || o != off+int64(k*j.bs) {
				break
			}
		}
		runs = append(runs, run{i, k, off})
		i += k
	}
	for _, r := range runs {
		p := blocks[r.i*j.bs : (r.i+r.k)*j.bs]
		var err error
		if durable && len(runs) == 1 {
			_, err = blockdev.WriteAtSync(j.dev, p, r.off)
		} else {
			_, err = j.dev.WriteAt(p, r.off)
		}
		if err != nil {
			return fmt.Errorf("journal: write fast-commit block %d: %w", first+r.i, ioErr(err))
		}
	}
	j.fcUsed.Store(true)
	if durable && len(runs) > 1 {
		if err := j.dev.Flush(); err != nil {
			return fmt.Errorf("journal: flush fast commit: %w", ioErr(err))
		}
	}
	return nil
}

// FlushFastCommit flushes the file system's device and then the
// journal's (one flush when they are the same device) for fast commits of
// tid and older: every write completed before the call, data and
// fast-commit blocks, is durable when it returns nil. Fast commits use it
// before their blocks (the data they map, FW3) and after them; one flush
// may be both, after one fast commit's blocks and before the next one's.
// It returns ErrSuperseded, flushing nothing, when the full commit of tid
// is durable: that commit holds the changes of every fast commit of tid
// and older, and its flushes came after their data (FW1). It fails on an
// aborted or closed journal.
func (j *Journal) FlushFastCommit(tid uint32) error {
	j.fcMu.Lock()
	defer j.fcMu.Unlock()
	if j.fcCommittedSet && int32(j.fcCommitted-tid) >= 0 {
		return ErrSuperseded
	}
	if err := j.fcUsable(); err != nil {
		return err
	}
	if j.fsdev != j.dev {
		if err := j.fsdev.Flush(); err != nil {
			return fmt.Errorf("journal: flush fast commit: %w", ioErr(err))
		}
	}
	if err := j.dev.Flush(); err != nil {
		return fmt.Errorf("journal: flush fast commit: %w", ioErr(err))
	}
	return nil
}

// fcUsable returns the journal's error after an abort, or ErrClosed once
// it is closed. fcMu is held.
func (j *Journal) fcUsable() error {
	j.mu.Lock()
	err, closed := j.mu.err, j.mu.closed
	j.mu.Unlock()
	if err != nil {
		return err
	}
	if closed {
		return fmt.Errorf("journal: fast commit: %w", ErrClosed)
	}
	return nil
}

// fcSuperseded zeroes the area's first block after a full commit when
// fast commits were written since the last one (FW4). It runs in the
// commit goroutine, after the commit block is durable and before the
// transaction stops counting as committing, so no fast commit runs
// meanwhile (FW1); a fast-commit write in flight ends first.
func (j *Journal) fcSuperseded(tid uint32) error {
	if j.fcFirst == 0 {
		return nil
	}
	j.fcMu.Lock()
	defer j.fcMu.Unlock()
	j.fcCommitted, j.fcCommittedSet = tid, true
	if !j.fcUsed.Load() {
		return nil
	}
	// Durable before the next fast commit writes to the area (FUA).
	if err := j.writeLogSync(j.fcFirst, make([]byte, j.bs)); err != nil {
		return err
	}
	j.fcUsed.Store(false)
	return nil
}
