package journal

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/internal/errs"
)

// BlockMap maps a journal logical block (0 = the journal superblock) to a
// block of Config.Dev, in units of the file system block size. For the
// journal inode it is the inode's block map; for an external journal device
// it is jblk + offset.
type BlockMap func(jblk uint32) (devBlock uint64, err error)

// Config describes where a journal lives.
type Config struct {
	Dev       blockdev.Device // device holding the journal
	FSDev     blockdev.Device // device holding home locations; nil means Dev
	Map       BlockMap        // journal block -> Dev block; nil means identity
	Blocks    uint32          // journal blocks Map covers (journal inode size / block size)
	BlockSize int             // file system block size in bytes
	// CommitInterval is the age at which the running transaction is
	// committed (jbd2's commit=5 default). Zero means 5 s; negative
	// disables timed commits.
	CommitInterval time.Duration
	// BeforeCommit, when set, is called by the commit goroutine before the
	// commit block of every transaction is written: ordered mode's "make
	// newly mapped data durable" hook. An error aborts the journal.
	BeforeCommit func(tid uint32) error
	// MinBatchTime and MaxBatchTime bound how long a Sync waits for
	// other goroutines' changes to join the transaction it commits
	// (jbd2's min_batch_time and max_batch_time; see Sync). Zero
	// MaxBatchTime means jbd2's 15 ms; negative disables the wait.
	MinBatchTime, MaxBatchTime time.Duration
	// Now supplies commit timestamps; nil means time.Now.
	Now func() time.Time
	// MaxHeldBytes bounds the block copies committed transactions keep
	// in memory until a checkpoint writes them home: past it the
	// checkpoint goroutine is woken whatever the log's use, and past
	// twice it Start checkpoints before a handle joins, as it does when
	// the log is short of space. Zero means DefaultMaxHeldBytes; negative,
	// no bound (checkpoints only as the log fills, so memory grows with
	// the log's size).
	MaxHeldBytes int64
	// FastCommit, when set, is called by Recover on a journal with the
	// fast_commit feature, after the log's blocks are written home and
	// before the journal superblock is emptied (as jbd2 calls
	// j_fc_replay_callback at the end of PASS_REPLAY).
	FastCommit FastCommitReplayer
}

// Journal is a jbd2 journal: recovery, running/committing transactions,
// checkpointing. It is safe for concurrent use.
//
// Lock order: commitMu, then cpMu, then sbMu, then mu (a commit takes no
// cpMu, a checkpoint no commitMu). No goroutine holds mu while doing I/O.
type Journal struct {
	dev, fsdev blockdev.Device
	bmap       BlockMap
	bs         int
	f          Format
	first      uint32 // first log block (s_first)
	last       uint32 // one past the last log block (s_maxlen, less the fast-commit area)
	fcFirst    uint32 // first fast-commit block (j_fc_first); 0 without fast_commit
	fcLast     uint32 // j_fc_last (s_maxlen); fast commits use [fcFirst, fcLast)
	fcReplay   FastCommitReplayer
	fcState          // fast commits written (fcwrite.go)
	maxTxn     int   // largest log footprint of one transaction
	maxCredits int   // MaxCredits: the most credits whose log footprint fits maxTxn
	maxHeld    int64 // Config.MaxHeldBytes, the default applied; negative: none
	interval   time.Duration
	minBatch   time.Duration // Config.MinBatchTime
	maxBatch   time.Duration // Config.MaxBatchTime; negative: no batching
	before     func(uint32) error
	now        func() time.Time

	cpMu sync.Mutex // serializes checkpoints

	// commitMu serializes commits (commitRunning): the commit
	// goroutine's, a Sync's on its own goroutine and Close's. It guards
	// logBuf.
	commitMu sync.Mutex
	// logBuf stages the log blocks of a commit (logRun). Guarded by
	// commitMu.
	logBuf []byte

	stats struct {
		commits, checkpoints, logBlocks, batchWaits, spaceWaits atomic.Uint64
	} // Stats

	sbMu sync.Mutex // guards sb and serializes superblock writes
	sb   Superblock // the on-disk superblock as last written

	mu struct {
		sync.Mutex
		nextTid    uint32         // tid of the next transaction created
		running    *transaction   // accepting handles; nil if none yet
		committing *transaction   // being written to the log
		checkpoint []*transaction // committed, not yet home; oldest first
		// heldRevokes counts the revoke records of the transactions in
		// checkpoint, which they keep in memory until checkpointed
		// (maxHeldRevokes).
		heldRevokes int
		// heldBytes counts the bytes of the block copies the transactions
		// in checkpoint keep (their non-nil buffers: MarkHome drops
		// some), once per transaction holding a copy, shared with the
		// metadata cache (DirtyOwned) or not: the journal keeps each
		// alive until checkpointed (maxHeld).
		heldBytes int64
		// cpUpTo is the newest transaction a checkpoint in progress
		// writes home, valid while cpActive (MarkHome).
		cpUpTo    uint32
		cpActive  bool
		commitSeq uint32 // newest committed tid
		commitReq uint32 // newest tid a caller asked to commit
		head      uint32 // next log block to write
		tail      uint32 // log block of the oldest live transaction
		tailSeq   uint32 // its tid
		used      uint32 // log blocks from the on-disk tail to head
		err       error  // set when the journal aborts
		closed    bool
		started   bool // commit and checkpoint goroutines running
		// Group commit (Sync): syncers counts the Syncs in progress;
		// overlapAt is when one last began while another was in
		// progress; peak is the most Syncs in progress at once since
		// peakAt; avgCommit is the running average of a commit's
		// duration (j_average_commit_time); avgGap that of the time
		// between the starts of two Syncs, the last at lastSync.
		syncers   int
		overlapAt time.Time
		peak      int
		peakAt    time.Time
		avgCommit time.Duration
		avgGap    time.Duration
		lastSync  time.Time
		changed   chan struct{}
		// forgotten maps a block freed by the file system to its Forget
		// calls, oldest first (jbd2_journal_forget). Entries go once the
		// transactions they concern are checkpointed.
		forgotten map[uint64][]forgetEvent
		// newest maps a block to the newest of running, committing and
		// checkpoint whose buffers or revokes hold it, for Lookup: one
		// map access instead of a walk of every live transaction (an
		// fsync-heavy workload keeps a thousand waiting for checkpoint).
		// A block leaves when its newest transaction is checkpointed: the
		// older ones went with it.
		newest map[uint64]*transaction
	}
	kick   chan struct{} // wakes the commit goroutine
	cpKick chan struct{} // wakes the checkpoint goroutine
	stop   chan struct{} // closed by Close
	done   chan struct{} // closed when the commit goroutine exits
	cpDone chan struct{} // closed when the checkpoint goroutine exits
}

// Open reads and validates the journal superblock the way jbd2's
// journal_load_superblock does. It starts no goroutine and writes nothing;
// call Recover when NeedsRecovery reports true, before starting handles.
// Recover replays a log written with async_commit as jbd2 does; the first
// commit then rewrites the superblock without that feature, as ext4's
// mounts without journal_async_commit do: every commit block follows a
// flush of what was written before it.
func Open(cfg Config) (*Journal, error) {
	if cfg.Dev == nil || cfg.BlockSize < 1024 || cfg.BlockSize > 65536 || cfg.BlockSize&(cfg.BlockSize-1) != 0 || cfg.Blocks < 2 {
		return nil, fmt.Errorf("journal: bad config (block size %d, %d blocks): %w", cfg.BlockSize, cfg.Blocks, ErrInvalid)
	}
	j := &Journal{dev: cfg.Dev, fsdev: cfg.FSDev, bmap: cfg.Map, bs: cfg.BlockSize,
		interval: cfg.CommitInterval, before: cfg.BeforeCommit, now: cfg.Now,
		minBatch: max(cfg.MinBatchTime, 0), maxBatch: cfg.MaxBatchTime}
	if j.maxBatch == 0 {
		j.maxBatch = 15 * time.Millisecond
	}
	j.maxHeld = cfg.MaxHeldBytes
	if j.maxHeld == 0 {
		j.maxHeld = DefaultMaxHeldBytes
	}
	if j.fsdev == nil {
		j.fsdev = j.dev
	}
	if j.bmap == nil {
		j.bmap = func(b uint32) (uint64, error) { return uint64(b), nil }
	}
	if j.interval == 0 {
		j.interval = 5 * time.Second
	}
	if j.now == nil {
		j.now = time.Now
	}
	j.last = cfg.Blocks
	buf := make([]byte, j.bs)
	if err := j.readLog(0, buf); err != nil {
		return nil, err
	}
	sb, err := DecodeSuperblock(buf)
	if err != nil {
		return nil, err
	}
	if err := j.validate(sb, cfg.Blocks); err != nil {
		return nil, err
	}
	j.sb = *sb
	j.f = sb.format()
	j.first, j.last = sb.First, sb.MaxLen
	if err := j.setFastCommitArea(sb); err != nil {
		return nil, err
	}
	j.fcReplay = cfg.FastCommit
	j.setMaxTxn()
	j.mu.changed = make(chan struct{})
	j.mu.nextTid = sb.SeqTail
	j.mu.commitSeq = sb.SeqTail - 1
	j.mu.commitReq = sb.SeqTail - 1
	j.mu.tailSeq = sb.SeqTail
	j.mu.head, j.mu.tail = j.first, j.first
	j.kick = make(chan struct{}, 1)
	j.cpKick = make(chan struct{}, 1)
	j.stop = make(chan struct{})
	j.done = make(chan struct{})
	j.cpDone = make(chan struct{})
	return j, nil
}

func (j *Journal) validate(sb *Superblock, blocks uint32) error {
	bad := func(off int, format string, args ...any) error {
		return errs.Corruptf("journal superblock", 0, off, format, args...)
	}
	if int(sb.BlockSize) != j.bs {
		return bad(0x0C, "block size %d, file system block size %d", sb.BlockSize, j.bs)
	}
	if sb.MaxLen > blocks || sb.MaxLen < 2 {
		return bad(0x10, "s_maxlen %d, journal has %d blocks", sb.MaxLen, blocks)
	}
	if sb.First == 0 || sb.First >= sb.MaxLen {
		return bad(0x14, "invalid start block of journal: %d", sb.First)
	}
	if sb.Start != 0 && (sb.Start < sb.First || sb.Start >= sb.MaxLen) {
		return bad(0x1C, "s_start %d outside the log [%d,%d)", sb.Start, sb.First, sb.MaxLen)
	}
	compat, incompat, _ := sb.features()
	if bad := incompat &^ knownIncompat; bad != 0 {
		return fmt.Errorf("journal: %s not supported: %w", incompatNames(bad), ErrUnsupported)
	}
	f := sb.format()
	if incompat&FeatureIncompatCsumV2 != 0 && incompat&FeatureIncompatCsumV3 != 0 {
		return bad(0x28, "both checksum v2 and v3 set")
	}
	if f.csumV2or3() {
		if compat&FeatureCompatChecksum != 0 {
			return bad(0x24, "checksum v1 and v2/v3 both set")
		}
		if sb.ChecksumType != ChecksumTypeCRC32C {
			return bad(0x50, "unknown checksum type %d", sb.ChecksumType)
		}
		if got := sb.ComputeChecksum(); got != sb.Checksum {
			return bad(0xFC, "checksum %#x, computed %#x", sb.Checksum, got)
		}
	}
	return nil
}

// Superblock returns a copy of the journal superblock as last written.
func (j *Journal) Superblock() Superblock {
	j.sbMu.Lock()
	defer j.sbMu.Unlock()
	return j.sb
}

// Format returns the block format parameters of this journal as Open read
// them; Superblock shows the features written since (the first commit
// clears async_commit).
func (j *Journal) Format() Format { return j.f }

// CreateOptions selects the features of a new journal.
type CreateOptions struct {
	UUID       [16]byte // s_uuid (the file system UUID for an internal journal)
	Is64Bit    bool     // FeatureIncompat64Bit
	CsumV3     bool     // FeatureIncompatCsumV3 (crc32c)
	CsumV2     bool     // FeatureIncompatCsumV2 (ignored with CsumV3)
	CsumV1     bool     // FeatureCompatChecksum: crc32_be over each transaction (ignored with CsumV2 or V3, as jbd2 does)
	Sequence   uint32   // first tid; 0 means 1
	NoZeroLog  bool     // skip zeroing the log area (lazy_journal_init)
	NrUsers    uint32   // s_nr_users; 0 means 1
	FirstBlock uint32   // s_first; 0 means 1
}

// Create writes a fresh, empty v2 journal superblock (as mke2fs does, with
// the revoke feature always on) and zeroes the log unless NoZeroLog, then
// opens the journal.
func Create(cfg Config, o CreateOptions) (*Journal, error) {
	if cfg.Dev == nil || cfg.BlockSize < 1024 || cfg.Blocks < 2 {
		return nil, fmt.Errorf("journal: bad config: %w", ErrInvalid)
	}
	sb := Superblock{Header: Header{Magic, BlockTypeSuperblockV2, 0},
		BlockSize: uint32(cfg.BlockSize), MaxLen: cfg.Blocks, First: max(o.FirstBlock, 1),
		SeqTail: max(o.Sequence, 1), UUID: o.UUID, NrUsers: max(o.NrUsers, 1),
		FeatureIncompat: FeatureIncompatRevoke}
	if o.Is64Bit {
		sb.FeatureIncompat |= FeatureIncompat64Bit
	}
	switch {
	case o.CsumV3:
		sb.FeatureIncompat |= FeatureIncompatCsumV3
	case o.CsumV2:
		sb.FeatureIncompat |= FeatureIncompatCsumV2
	}
	if o.CsumV3 || o.CsumV2 {
		sb.ChecksumType = ChecksumTypeCRC32C
	} else if o.CsumV1 {
		sb.FeatureCompat |= FeatureCompatChecksum
	}
	if sb.First >= sb.MaxLen {
		return nil, fmt.Errorf("journal: s_first %d >= %d blocks: %w", sb.First, sb.MaxLen, ErrInvalid)
	}
	tmp := &Journal{dev: cfg.Dev, bmap: cfg.Map, bs: cfg.BlockSize, last: cfg.Blocks}
	if tmp.bmap == nil {
		tmp.bmap = func(b uint32) (uint64, error) { return uint64(b), nil }
	}
	if !o.NoZeroLog {
		zero := make([]byte, cfg.BlockSize)
		for b := uint32(1); b < cfg.Blocks; b++ {
			if err := tmp.writeLog(b, zero); err != nil {
				return nil, err
			}
		}
	}
	sb.SetChecksum()
	buf := make([]byte, cfg.BlockSize)
	sb.Encode(buf)
	if err := tmp.writeLog(0, buf); err != nil {
		return nil, err
	}
	if err := cfg.Dev.Flush(); err != nil {
		return nil, fmt.Errorf("journal: flush new journal: %w", ioErr(err))
	}
	return Open(cfg)
}

func ioErr(err error) error {
	if errors.Is(err, ErrIO) || errors.Is(err, ErrClosed) || errors.Is(err, ErrCorrupt) || errors.Is(err, ErrInvalid) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrIO, err)
}

// devOffset maps a journal block to a byte offset of Dev.
func (j *Journal) devOffset(jblk uint32) (int64, error) {
	if end := max(j.last, j.fcLast); jblk >= end {
		return 0, errs.Corruptf("journal", 0, -1, "log block %d past the journal end %d", jblk, end)
	}
	db, err := j.bmap(jblk)
	if err != nil {
		return 0, fmt.Errorf("journal: map log block %d: %w", jblk, err)
	}
	off := int64(db) * int64(j.bs)
	if db > uint64(1<<62)/uint64(j.bs) || off+int64(j.bs) > j.dev.Size() {
		return 0, errs.Corruptf("journal", 0, -1, "log block %d maps to device block %d past the device", jblk, db)
	}
	return off, nil
}

// readLog reads journal block jblk (jbd2's jread).
func (j *Journal) readLog(jblk uint32, buf []byte) error {
	off, err := j.devOffset(jblk)
	if err != nil {
		return err
	}
	if _, err := j.dev.ReadAt(buf[:j.bs], off); err != nil {
		return fmt.Errorf("journal: read log block %d: %w", jblk, ioErr(err))
	}
	return nil
}

func (j *Journal) writeLog(jblk uint32, buf []byte) error {
	off, err := j.devOffset(jblk)
	if err != nil {
		return err
	}
	if _, err := j.dev.WriteAt(buf[:j.bs], off); err != nil {
		return fmt.Errorf("journal: write log block %d: %w", jblk, ioErr(err))
	}
	return nil
}

// writeLogSync is writeLog that returns once the block is durable
// (blockdev.WriteAtSync), making no other write durable.
func (j *Journal) writeLogSync(jblk uint32, buf []byte) error {
	off, err := j.devOffset(jblk)
	if err != nil {
		return err
	}
	if _, err := blockdev.WriteAtSync(j.dev, buf[:j.bs], off); err != nil {
		return fmt.Errorf("journal: durable write of log block %d: %w", jblk, ioErr(err))
	}
	return nil
}

// writeHome writes a file system block to its home location on FSDev.
func (j *Journal) writeHome(blk uint64, buf []byte) error {
	if blk > uint64(1<<62)/uint64(j.bs) || int64(blk)*int64(j.bs)+int64(j.bs) > j.fsdev.Size() {
		return errs.Corruptf("journal", 0, -1, "journalled block %d is past the file system device", blk)
	}
	if _, err := j.fsdev.WriteAt(buf[:j.bs], int64(blk)*int64(j.bs)); err != nil {
		return fmt.Errorf("journal: write home block %d: %w", blk, ioErr(err))
	}
	return nil
}

// writeHomeRun writes consecutive file system blocks from blk on with one
// write to FSDev.
func (j *Journal) writeHomeRun(blk uint64, buf []byte) error {
	n := uint64(len(buf) / j.bs)
	if blk > uint64(1<<62)/uint64(j.bs) || n > uint64(1<<62)/uint64(j.bs)-blk || int64(blk+n)*int64(j.bs) > j.fsdev.Size() {
		return errs.Corruptf("journal", 0, -1, "journalled blocks %d-%d are past the file system device", blk, blk+n-1)
	}
	if _, err := j.fsdev.WriteAt(buf, int64(blk)*int64(j.bs)); err != nil {
		return fmt.Errorf("journal: write home blocks %d-%d: %w", blk, blk+n-1, ioErr(err))
	}
	return nil
}

// writeSuperblockLocked encodes sb with its checksum, writes it to journal
// block 0 and, with fua, makes it durable with blockdev.WriteAtSync (jbd2
// writes it REQ_FUA): only the superblock, not writes before it. j.sbMu is
// held.
func (j *Journal) writeSuperblockLocked(sb *Superblock, fua bool) error {
	sb.SetChecksum()
	buf := make([]byte, j.bs)
	if err := j.readLog(0, buf); err != nil {
		return err
	}
	sb.Encode(buf)
	write := j.writeLog
	if fua {
		write = j.writeLogSync
	}
	if err := write(0, buf); err != nil {
		return err
	}
	j.sb = *sb
	return nil
}

// broadcastLocked wakes every waiter. j.mu is held.
func (j *Journal) broadcastLocked() {
	close(j.mu.changed)
	j.mu.changed = make(chan struct{})
}

// waitLocked releases j.mu until the next broadcast. j.mu is held.
func (j *Journal) waitLocked() {
	ch := j.mu.changed
	j.mu.Unlock()
	<-ch
	j.mu.Lock()
}

// Lookup copies into buf the newest journalled contents of file system block
// blk (running, committing or committed but not yet checkpointed) and
// reports whether there was one. Readers of metadata must consult it before
// the device: home locations are only updated at checkpoint. A block revoked
// by the newest transaction holding it reports false.
func (j *Journal) Lookup(blk uint64, buf []byte) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.lookupLocked(blk, buf)
}

func (j *Journal) lookupLocked(blk uint64, buf []byte) bool {
	t := j.mu.newest[blk]
	if t == nil {
		return false
	}
	// A Forget after t's creation hides every copy up to it; newer
	// transactions do not hold blk.
	if evs := j.mu.forgotten[blk]; len(evs) > 0 && tidGT(evs[len(evs)-1].from, t.tid) {
		return false
	}
	if _, ok := t.home[blk]; ok {
		return false // written home by the caller (MarkHome)
	}
	d, ok := t.buffers[blk]
	if ok {
		copy(buf, d)
	}
	return ok // else revoked in t
}

// holdsLocked records that t holds blk in its buffers or revokes. t is
// the running transaction (a handle's transaction cannot commit while the
// handle is open), so it is the newest.
func (j *Journal) holdsLocked(t *transaction, blk uint64) {
	if j.mu.newest == nil {
		j.mu.newest = make(map[uint64]*transaction)
	}
	j.mu.newest[blk] = t
}

// Err returns the error that aborted the journal, or nil.
func (j *Journal) Err() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.mu.err
}

// abortLocked records the first fatal error. j.mu is held.
func (j *Journal) abortLocked(err error) {
	if j.mu.err == nil {
		j.mu.err = fmt.Errorf("journal aborted: %w", err)
	}
	j.broadcastLocked()
}

// Sync commits the running transaction, if it holds changes, and returns
// once every transaction whose handles stopped before the call is durable.
// Concurrent Syncs share one commit (group commit). A Sync that ran
// alone recently, finds no commit in flight and has a context that never
// ends runs the commit on its own goroutine; otherwise it leaves it to
// the commit goroutine, which starts it once the one in flight ends, and
// waits.
//
// Batching follows jbd2_journal_stop: when other Syncs ran alongside one
// recently (jbd2 asks whether the last synchronous writer was another
// process), a Sync lets the transaction run until it is as old as the
// average commit takes, bounded by Config.MinBatchTime and MaxBatchTime,
// before it asks for the commit, so that fsyncs arriving meanwhile join
// it. Where commits are faster than Syncs arrive (memory, fast flash) that
// window gathers nobody, so it is also at least the time the others of a
// recent group take to arrive: the average gap between Syncs times one
// less than the most Syncs seen in progress at once. A Sync stops waiting
// early once that many wait for the transaction (nobody else is likely to
// come, and waiting longer would idle them all), or when the transaction
// commits anyway. A lone fsync stream never waits.
func (j *Journal) Sync(ctx context.Context) error {
	_, err := j.SyncFlushed(ctx)
	return err
}

// SyncFlushed is Sync that also reports whether the commit it waited for
// flushed FSDev after the call began, so that writes to FSDev completed
// before the call are durable without a flush of their own: true when
// the call committed the running transaction (whose preflush, or flush
// after an async commit, follows the call) and FSDev is Dev or is flushed
// before each commit (Config.BeforeCommit set).
func (j *Journal) SyncFlushed(ctx context.Context) (flushed bool, err error) {
	j.mu.Lock()
	if j.mu.err != nil {
		defer j.mu.Unlock()
		return false, j.mu.err
	}
	now := time.Now()
	if !j.mu.lastSync.IsZero() {
		j.mu.avgGap = (now.Sub(j.mu.lastSync) + 3*j.mu.avgGap) / 4
	}
	j.mu.lastSync = now
	j.mu.syncers++
	if j.mu.syncers > 1 {
		j.mu.overlapAt = now
		j.broadcastLocked() // batching Syncs count the newcomer
	}
	if j.mu.syncers >= j.mu.peak || now.Sub(j.mu.peakAt) > batchMemory {
		j.mu.peak, j.mu.peakAt = j.mu.syncers, now
	}
	var target uint32
	need := false
	if t := j.mu.running; t != nil && !t.empty() {
		target, need = t.tid, true
		t.syncers++
		if err := j.batchLocked(ctx, t, now); err != nil {
			j.mu.syncers--
			j.mu.Unlock()
			return false, err
		}
		flushed = j.fsdev == j.dev || j.before != nil
		if ctx.Done() == nil && !j.grouping(now) && j.mu.running == t && j.mu.committing == nil && j.commitMu.TryLock() {
			// A lone Sync, no commit in flight: commit here rather than
			// hand the commit to the commit goroutine and wait to be
			// woken. Not with a context that can end: the wait for
			// the commit returns then, the commit goes on.
			if tidGT(t.tid, j.mu.commitReq) {
				j.mu.commitReq = t.tid
			}
			j.mu.Unlock()
			// Other goroutines ready to run get the processor first, as
			// they would while this one waited for the commit goroutine:
			// one that Syncs meanwhile shows that Syncs run alongside
			// each other (grouping), where a commit in memory would
			// otherwise end before any of them runs.
			runtime.Gosched()
			j.commitRunning()
			j.commitMu.Unlock()
			j.kickCheckpoint()
			j.mu.Lock()
		} else {
			j.requestCommitLocked(t.tid)
		}
	} else if t := j.mu.committing; t != nil {
		target, need = t.tid, true
	}
	j.mu.Unlock()
	if need {
		err = j.WaitCommit(ctx, target)
	}
	j.mu.Lock()
	j.mu.syncers--
	j.mu.Unlock()
	return flushed && err == nil, err
}

// batchMemory is how long Syncs running alongside each other keep Sync
// batching, and how long the most seen at once counts as the group size.
const batchMemory = time.Second

// grouping reports whether Syncs ran alongside each other recently (see
// Sync). Such Syncs leave their commits to the commit goroutine, as
// jbd2's fsyncs do: the transaction a Sync asks to commit stays open to
// other handles until the commit goroutine takes it, which in memory,
// where commits take microseconds, is much of what the group shares. j.mu
// is held.
func (j *Journal) grouping(now time.Time) bool {
	return !j.mu.overlapAt.IsZero() && now.Sub(j.mu.overlapAt) <= batchMemory
}

// batchLocked waits, for Sync, while the running transaction t may gather
// more changes before its commit (see Sync). j.mu is held.
func (j *Journal) batchLocked(ctx context.Context, t *transaction, now time.Time) error {
	if j.maxBatch < 0 || !j.grouping(now) {
		return nil
	}
	window := min(max(j.mu.avgCommit, time.Duration(j.mu.peak-1)*j.mu.avgGap, j.minBatch), j.maxBatch)
	born := t.born
	if born.IsZero() {
		born = now
	}
	deadline := born.Add(window)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	waited := false
	for {
		if j.mu.err != nil || j.mu.closed || j.mu.running != t || t.locked || t.syncers >= j.mu.peak {
			break
		}
		d := time.Until(deadline)
		if d <= 0 {
			break
		}
		if timer == nil {
			timer = time.NewTimer(d)
		}
		if !waited {
			waited = true
			j.stats.batchWaits.Add(1)
		}
		ch := j.mu.changed
		j.mu.Unlock()
		select {
		case <-ch:
		case <-timer.C:
		case <-ctx.Done():
			j.mu.Lock()
			return ctx.Err()
		}
		j.mu.Lock()
	}
	return nil
}

// WaitCommit returns once transaction tid is committed (or the journal
// aborts, or ctx is done). It does not request the commit.
func (j *Journal) WaitCommit(ctx context.Context, tid uint32) error {
	j.mu.Lock()
	for {
		if j.mu.err != nil {
			err := j.mu.err
			j.mu.Unlock()
			return err
		}
		if tidGEQ(j.mu.commitSeq, tid) {
			j.mu.Unlock()
			return nil
		}
		ch := j.mu.changed
		j.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		j.mu.Lock()
	}
}

// Commit requests the commit of the running transaction and waits for it;
// it is Sync without a context.
func (j *Journal) Commit() error { return j.Sync(context.Background()) }

// requestCommitLocked asks the commit goroutine to commit tid. j.mu is held.
func (j *Journal) requestCommitLocked(tid uint32) {
	if tidGT(tid, j.mu.commitReq) {
		j.mu.commitReq = tid
	}
	j.startLocked()
	select {
	case j.kick <- struct{}{}:
	default:
	}
}

// startLocked starts the commit goroutine on first use. j.mu is held.
func (j *Journal) startLocked() {
	if !j.mu.started && !j.mu.closed {
		j.mu.started = true
		go j.commitLoop()
		go j.checkpointLoop()
	}
}

// Stats are a journal's cumulative counters (Journal.Stats).
type Stats struct {
	Commits     uint64 // transactions committed
	Checkpoints uint64 // checkpoint rounds
	LogBlocks   uint64 // blocks written to the log
	BatchWaits  uint64 // Syncs that waited for others to join their transaction
	// SpaceWaits counts Starts that found the log short of space for
	// their transaction, or the committed transactions holding more than
	// twice Config.MaxHeldBytes, and checkpointed, or waited for a commit
	// or a checkpoint, before going on: the background checkpoint had not
	// kept up, and the caller paid for the log's tail itself.
	SpaceWaits uint64
}

// forgetEvent is one Forget of a block.
type forgetEvent struct {
	from uint32 // copies in transactions before tid from are dead
	done bool   // a transaction revoking the block since has committed
}

// Forget tells the journal that metadata block blk was freed by the file
// system (jbd2_journal_forget): Lookup no longer returns the copies of blk
// in transactions already created. Callers revoke blk in the transaction
// that frees it (Handle.Revoke) and keep blk unallocated until that
// transaction has committed and WaitCheckpoint has returned, as ext4 keeps
// freed blocks busy until their transaction commits.
//
// A checkpoint writes such a copy home while the revoke has not
// committed: the log's tail is about to pass the copy, and a crash before
// the revoke commits must find the block as the committed metadata that
// still maps it says. Once the revoke has committed, the block may be
// reused, for data too, and checkpoints skip the copy.
func (j *Journal) Forget(blk uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.mu.forgotten == nil {
		j.mu.forgotten = make(map[uint64][]forgetEvent)
	}
	from := j.mu.nextTid
	if t := j.mu.running; t != nil {
		// Copies in the running transaction are dropped by the revoke the
		// caller logs into it; count them as forgotten too.
		from = t.tid + 1
	}
	j.mu.forgotten[blk] = append(j.mu.forgotten[blk], forgetEvent{from: from})
}

// MarkHome records that the caller has written the copies of blks that
// committed transaction tid holds to their home locations itself, as a
// file system that journals a file's data and then writes it in place
// does: checkpoints no longer write those copies home (the caller may
// overwrite the blocks in place from now on, without the journal) and
// Lookup no longer returns them. A newer transaction's copy of a block is
// left alone. It returns once no checkpoint that began before the call
// and writes tid's blocks home is still running, so that none writes
// such a copy home after it.
// Recovery still replays the copies until a later transaction revokes
// the blocks or a checkpoint moves the log's tail past tid (InLog).
//
// It reports whether, once it has returned, the journal never reads the
// contents it was given for blks in tid (DirtyOwned) again, so that the
// caller may reuse that memory: every block was marked, or tid has left
// the journal. The journal lets go of the contents itself unless a
// checkpoint may still be reading them.
func (j *Journal) MarkHome(tid uint32, blks []uint64) (done bool) {
	j.mu.Lock()
	if (j.mu.running != nil && j.mu.running.tid == tid) || (j.mu.committing != nil && j.mu.committing.tid == tid) {
		j.mu.Unlock()
		return false // not committed: not the caller's to mark
	}
	var t *transaction
	for i := len(j.mu.checkpoint) - 1; i >= 0; i-- {
		if c := j.mu.checkpoint[i]; c.tid == tid {
			t = c
			break
		} else if tidGT(tid, c.tid) {
			break
		}
	}
	wait := t != nil && j.mu.cpActive && tidGEQ(j.mu.cpUpTo, tid)
	done = true
	for _, b := range blks {
		if t == nil {
			break // checkpointed and dropped: nothing holds its copies
		}
		if _, ok := t.buffers[b]; !ok {
			done = false
			continue
		}
		if t.home == nil {
			t.home = make(map[uint64]struct{})
		}
		t.home[b] = struct{}{}
		if !wait && t.buffers[b] != nil {
			// The key stays: the block is still logged in t.
			t.buffers[b] = nil
			t.held--
			j.mu.heldBytes -= int64(j.bs)
		}
	}
	j.mu.Unlock()
	if wait {
		j.WaitCheckpoint()
	}
	return done
}

// Idle reports whether every transaction with changes has committed:
// the running one, if any, is empty and none is committing.
func (j *Journal) Idle() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return (j.mu.running == nil || j.mu.running.empty()) && j.mu.committing == nil
}

// InLog reports whether transaction tid may still be in the log, so that
// a recovery would replay it: it is not older than the log's tail as the
// journal superblock last recorded it.
func (j *Journal) InLog(tid uint32) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return tidGEQ(tid, j.mu.tailSeq)
}

// WaitCheckpoint waits for a checkpoint in progress to finish. A caller
// that makes forgotten blocks allocatable once their revoke has committed
// calls it first: a checkpoint that looked at the block before the commit
// may still be writing its last copy home, and the reuse must come after.
func (j *Journal) WaitCheckpoint() {
	j.cpMu.Lock()
	//lint:ignore SA2001 a barrier: taking cpMu waits out the checkpoint holding it
	j.cpMu.Unlock()
}

// incompatNames names the incompat feature bits in bad for an error:
// "fast commits (incompat 0x20)", then any bits without a name.
func incompatNames(bad uint32) string {
	var parts []string
	if bad&FeatureIncompatFastCommit != 0 {
		parts = append(parts, fmt.Sprintf("fast commits (incompat %#x)", FeatureIncompatFastCommit))
		bad &^= FeatureIncompatFastCommit
	}
	if bad != 0 {
		parts = append(parts, fmt.Sprintf("unknown incompat features %#x", bad))
	}
	return strings.Join(parts, ", ")
}
