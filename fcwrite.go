package ext4io

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ext4io/ext4io/extent"
	"github.com/ext4io/ext4io/internal/crc32c"
	"github.com/ext4io/ext4io/journal"
	"github.com/ext4io/ext4io/layout"
)

// Writing fast commits (the fast_commit feature; fcreplay.go replays
// them, layout/fastcommit.go has the tags, journal/fcwrite.go the area).
//
// A writable volume with fast_commit tracks, from one full commit to the
// next, what changed in a form fast-commit tags can express: the inodes
// written (INODE tags carry the whole on-disk inode), the logical range of
// each inode whose mapping changed (ADD_RANGE for what is mapped there
// now, DEL_RANGE for the holes), and the directory entries created,
// linked and unlinked (CREAT, LINK, UNLINK), in order. File.Sync and
// File.Datasync then write the tags of everything tracked since the last
// fast commit to the fast-commit area, after the file's data is durable
// and followed by a flush (one flush per fast commit in steady state, see
// fcGroup), instead of committing the journal; the metadata blocks
// stay in the running transaction (jmeta's pending set) for the next full
// commit, which supersedes the fast commits and empties the tracking.
//
// The layout follows fs/ext4/fast_commit.c: the first fast commit after a
// full commit starts the area with HEAD (fc_features 0, the tid); every
// fast commit writes, for each dentry change in order, the created inode
// (ranges, INODE) before its CREAT, then the ranges and INODE of each
// other inode changed, and ends with a TAIL (tid, crc32c of every record
// since the previous TAIL) that runs to the end of its block; a record
// that does not fit in a block is preceded by a PAD to the block's last
// byte. Ranges go as ADD_RANGE of at most 32768 blocks (32767 unwritten)
// and DEL_RANGE of at most 2^31-1, as ext4_map_blocks caps a lookup.
//
// Eligibility (a Sync falls back to a full commit, which resets the
// tracking and the area, while any holds since the last full commit; the
// reasons follow EXT4_FC_REASON_*):
//   - renames (EXT4_FC_REASON_RENAME_DIR and CROSS_RENAME in Linux; every
//     rename here), xattr changes (XATTR: in-inode xattrs lie past the
//     bytes an INODE tag carries, xattr blocks are not logged at all),
//     collapse and insert range (FALLOC_RANGE);
//   - directory mapping changes: a directory that grows a block (an entry
//     that did not fit, mkdir's first block), an htree split, rmdir;
//     directory blocks are not logged, replay adds entries by name into
//     the blocks it has;
//   - symlinks and device nodes (their i_block is not logged: replay keeps
//     the on-disk i_block of inodes without extents), inline data;
//   - a directory block written without a dentry tag, a mapping change of
//     a reserved inode or of a block-mapped file, an inode freed without
//     an UNLINK since the last full commit;
//   - the area being full, queued conversions, or the journal not idle (a
//     full commit running or waiting: journal.ErrBusy).
//
// Concurrent fsyncs share fast commits, and the writers a fast commit's
// flush releases join the next one together (fcGroup). A fast commit holds txnGate exclusively only
// while it builds its tags: its device writes and flushes run without it
// (fcBuild, fcLead).
//
// Not done: renames of regular files are not logged as UNLINK+LINK as
// Linux logs them; directory growth is not expressed.
//
// Locking: fcState.mu guards every field of fcState but the counters and
// group. It is a leaf lock, taken by the hooks inside operations (under
// inode locks and txnGate shared) and by fcBuild, which holds
// txnGate exclusively while it builds the tags (no operation runs, so
// nothing tracked changes meanwhile) and takes inode locks shared to read
// mappings: the same order as jmeta.commit, which calls fcFullCommit under
// txnGate exclusively. group.mu is taken with no other lock held.
type fcState struct {
	mu sync.Mutex
	// ineligible is the reason the changes since the last full commit
	// cannot be fast-committed; "" if they can.
	ineligible string
	// inodes maps each inode changed since the last fast commit to its
	// changed logical range.
	inodes map[uint32]*fcIno
	// dentries are the entry changes since the last fast commit, in order.
	dentries []fcDentry
	// dirWrites counts directory block writes not matched by a dentry
	// change (each create, link and unlink writes one block).
	dirWrites int
	// off is the next block of the area; 0 when the next fast commit
	// starts it with HEAD. tid is the tid of the area's fast commits.
	off int
	tid uint32
	// unlinked holds the inodes unlinked since the last full commit.
	unlinked map[uint32]bool
	// firstTag holds the tag of each inode's first entry change since
	// the last full commit.
	firstTag map[uint32]uint16
	// sizes holds the i_size of each regular file's INODE tag in the
	// fast commits built since the last full commit: a later tag that
	// changes it needs the data written for the change durable first
	// (fcResized).
	sizes map[uint32]uint64

	// commits and fallbacks count fast commits written and Syncs that
	// fell back to a full commit (Counters).
	commits, fallbacks atomic.Uint64

	// group shares fast commits between concurrent fsyncs; it has its
	// own lock.
	group fcGroup
}

// fcIno is the tracked state of one inode: the logical blocks [lo, hi)
// whose mapping changed (none when hi is 0).
type fcIno struct {
	lo, hi uint64
}

type fcDentry struct {
	tag         uint16 // layout.FCTagCreat, FCTagLink or FCTagUnlink
	parent, ino uint32
	name        string
}

// startFastCommit turns fast commits on for a writable volume whose
// superblock has fast_commit: the journal gets its jbd2 feature (as the
// kernel sets it at mount) and the tracking starts.
func (v *Volume) startFastCommit() error {
	if v.jm == nil || !v.sb.HasCompat(layout.CompatFastCommit) || v.opts.Tuning.NoFastCommit {
		return nil
	}
	if err := v.jm.j.EnableFastCommit(); err != nil {
		return fmt.Errorf("ext4io: enabling fast commits: %w", err)
	}
	if err := v.jm.j.ClearFastCommitArea(); err != nil {
		return fmt.Errorf("ext4io: clearing the fast-commit area: %w", err)
	}
	v.fc = &fcState{inodes: map[uint32]*fcIno{}, unlinked: map[uint32]bool{}, firstTag: map[uint32]uint16{}, sizes: map[uint32]uint64{}}
	return nil
}

// fcIneligible makes the changes since the last full commit ineligible
// for fast commits.
func (v *Volume) fcIneligible(reason string) {
	fc := v.fc
	if fc == nil {
		return
	}
	fc.mu.Lock()
	if fc.ineligible == "" {
		fc.ineligible = reason
	}
	fc.mu.Unlock()
}

// fcInodeLocked returns the tracked state of ino, adding it. fc.mu is
// held.
func (fc *fcState) inodeLocked(ino uint32) *fcIno {
	t := fc.inodes[ino]
	if t == nil {
		t = &fcIno{}
		fc.inodes[ino] = t
	}
	return t
}

// fcTrackInode records that inode ino was written (writeInode).
func (v *Volume) fcTrackInode(ino uint32) {
	fc := v.fc
	if fc == nil {
		return
	}
	fc.mu.Lock()
	fc.inodeLocked(ino)
	fc.mu.Unlock()
}

// fcTrackRange records a mapping change of [lblk, lblk+n) of inode ino
// (the mapper's set and drop).
func (v *Volume) fcTrackRange(ino uint32, dir bool, lblk, n uint64) {
	fc := v.fc
	if fc == nil || n == 0 {
		return
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	switch {
	case dir:
		if fc.ineligible == "" {
			fc.ineligible = "directory mapping changed"
		}
		return
	case ino != layout.RootIno && ino < v.sb.FirstInode():
		if fc.ineligible == "" {
			fc.ineligible = "reserved inode mapping changed"
		}
		return
	}
	t := fc.inodeLocked(ino)
	end := min(lblk+n, maxLblk+1)
	if t.hi == 0 {
		t.lo, t.hi = lblk, end
		return
	}
	t.lo, t.hi = min(t.lo, lblk), max(t.hi, end)
}

// fcDirWrite records a directory block write (writeDirBlock).
func (v *Volume) fcDirWrite() {
	fc := v.fc
	if fc == nil {
		return
	}
	fc.mu.Lock()
	fc.dirWrites++
	fc.mu.Unlock()
}

// fcDentry records an entry change of directory parent: tag is
// layout.FCTagCreat, FCTagLink or FCTagUnlink.
func (v *Volume) fcDentry(tag uint16, parent, ino uint32, name string) {
	fc := v.fc
	if fc == nil {
		return
	}
	fc.mu.Lock()
	fc.dentries = append(fc.dentries, fcDentry{tag, parent, ino, name})
	fc.dirWrites--
	fc.inodeLocked(parent)
	fc.inodeLocked(ino)
	if tag == layout.FCTagUnlink {
		fc.unlinked[ino] = true
	}
	if _, ok := fc.firstTag[ino]; !ok {
		fc.firstTag[ino] = tag
	}
	fc.mu.Unlock()
}

// fcFullCommit resets the tracking when a full commit logs a transaction:
// it holds every change tracked so far and supersedes the fast commits in
// the area, which the next fast commit starts again. txnGate is held
// exclusively.
func (v *Volume) fcFullCommit() {
	fc := v.fc
	if fc == nil {
		return
	}
	fc.mu.Lock()
	fc.ineligible, fc.dentries, fc.dirWrites, fc.off = "", nil, 0, 0
	clear(fc.inodes)
	clear(fc.unlinked)
	clear(fc.firstTag)
	clear(fc.sizes)
	fc.mu.Unlock()
}

// errFCFallback says a fast commit cannot express the changes: the caller
// commits the journal instead.
var errFCFallback = errors.New("fast commit not possible")

// fcRun is one fast commit of the group (fcGroup): the fsyncs that
// joined it return its result. g.mu guards every field.
type fcRun struct {
	// members counts the fsyncs that joined the run.
	members int
	// tagged says the run wrote tags (not only a flush of its data).
	tagged bool
	// tid is the tid of its fast commit, set when it is built.
	tid  uint32
	done bool
	err  error
}

// fcGroup lets concurrent fsyncs share fast commits, in steps run by one
// fsync at a time (the leader, fcLead).
//
// Sharing fast commits, as ext4_fc_commit does: one fast commit writes
// every change tracked when its tags are built, so the fsyncs that arrive
// while a step runs join the open run, which the next step builds for all
// of them. An fsync joins only a run whose tags are not built yet, after
// its own data went to the device and its changes were tracked.
//
// Steps: a flush makes durable every write that completed before it was
// issued. A step waits for the writers the last flush released
// (waitReturning), builds the open run's tags (under txnGate: the data
// they map completed before), issues one flush, then writes the tags;
// the next step flushes them before it builds another run:
//
//	wait ; build(k) ; flush ; write tags(k) ; flush ; wait ; build(k+1) ; ...
//
// The first flush makes run k's data durable before its tags are
// written (ext4's PREFLUSH), the second the tags (the FUA), with ext4's
// ordering: no tag reaches the device before the data it maps is
// durable, and an fsync returns only after a flush issued after its tags
// were written. After a first flush the tags and the second flush are one
// durable write (journal.WriteFastCommitSync, a FUA write on a
// blockdev.SyncWriter): nothing else needs the second flush then, and the
// run ends with the write. A run without ADD_RANGE or DEL_RANGE that changes no
// file's i_size (overwrites, unlinks) exposes no data not durable yet and
// needs no flush before its tags: they are written at once. The others
// are flushed first: an i_size raised within mapped blocks (an append
// inside the last block) exposes the bytes written there, one lowered
// inside a block relies on the truncate's zeroing past it (a later
// extension reads those bytes), and a punch's DEL_RANGE on the zeroing
// of the partial blocks around it. A run with nothing to write (its
// changes went out with an earlier run) needs only the second flush.
//
// The flush after tags(k) could also be run k+1's first flush if run
// k+1 were built before it, but run k's writers wait for that flush and
// could not be in run k+1: consecutive runs would share no writer and n
// writers would put about n/2 fsyncs in each. Flushing tags(k) first and
// then waiting for the writers it released, and for as many as the
// runs built lately held (as jbd2 holds a commit open while other
// writers were active recently), puts every active writer's fsync in one
// run: the same flushes per fsync (two per run of n), half the runs, tag
// writes and leader hand-offs.
//
// Locking: mu guards open, unflushed, leading, returning, flushAvg,
// waiting, flushDone, returnAvg, peak, peakPrev, peakStart and every
// fcRun's fields; it is taken
// with no other lock held and released before the leader takes txnGate
// or does I/O. Only the
// leader takes runs from open, appends to unflushed and ends runs.
type fcGroup struct {
	mu   sync.Mutex
	cond sync.Cond // on mu; broadcast when a run ends or the leader leaves
	// open is the run fsyncs join (nil until one does); the next step
	// builds it.
	open *fcRun
	// unflushed are the runs whose tags are written, or which need only
	// a flush of their data: the next flush completes them.
	unflushed []*fcRun
	// leading says an fsync runs the steps (fcLead).
	leading bool
	// returning counts the fsyncs the last flush released that have not
	// joined a run since: their writers are expected back soon.
	// flushAvg is the average duration of the group's flushes. waiting
	// says the leader waits for the returning writers (each join then
	// broadcasts).
	returning int
	flushAvg  time.Duration
	waiting   bool
	// flushDone is when the last flush completed; returnAvg is the
	// average time the writers it released took to join a run after
	// it (joins by a waitReturning that gave up on them not counted).
	flushDone time.Time
	returnAvg time.Duration
	// peak and peakPrev are the most fsyncs a run built in the current
	// and in the previous fcPeakWindow had, the window starting at
	// peakStart: the writers active lately (recentWriters).
	peak, peakPrev int
	peakStart      time.Time
	// shared counts fsyncs that returned another fsync's fast commit
	// (Counters.FastCommitShared).
	shared atomic.Uint64
}

// fastCommit makes every change tracked since the last full commit
// durable as a fast commit, shared with the fsyncs running concurrently
// (fcGroup); the caller wrote its data back. It returns errFCFallback when
// a full commit is needed instead.
func (v *Volume) fastCommit() error {
	g := &v.fc.group
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cond.L == nil {
		g.cond.L = &g.mu
	}
	if g.open == nil {
		g.open = &fcRun{}
	}
	r := g.open
	r.members++
	if g.returning > 0 {
		g.returning--
		d := time.Since(g.flushDone)
		if g.returnAvg == 0 {
			g.returnAvg = d
		} else {
			g.returnAvg += (d - g.returnAvg) / 8
		}
	}
	if g.waiting {
		g.cond.Broadcast()
	}
	for !r.done {
		if !g.leading {
			g.leading = true
			g.mu.Unlock()
			v.fcLead(r)
			g.mu.Lock()
			g.leading = false
			g.cond.Broadcast()
			continue
		}
		g.cond.Wait()
	}
	return r.err
}

// fcFinish ends runs with err and wakes their fsyncs.
func (v *Volume) fcFinish(err error, runs ...*fcRun) {
	fc, g := v.fc, &v.fc.group
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, r := range runs {
		r.done, r.err = true, err
		switch {
		case err == nil:
			if r.tagged {
				fc.commits.Add(1)
			}
			g.shared.Add(uint64(r.members - 1))
		case errors.Is(err, errFCFallback):
			fc.fallbacks.Add(uint64(r.members))
		}
	}
	g.cond.Broadcast()
}

// fcLead runs the group's steps (fcGroup) until the run mine is done.
// One fsync at a time leads (g.leading); the runs it leaves in flight are
// led on by one of their own fsyncs.
func (v *Volume) fcLead(mine *fcRun) {
	g, j := &v.fc.group, v.jm.j
	for {
		g.mu.Lock()
		if mine.done {
			// The runs still in flight (open, unflushed) are led on
			// by one of their fsyncs, woken when this one leaves.
			g.mu.Unlock()
			return
		}
		// Tagged runs still waiting for their flush get it before the
		// next run is built: their writers then come back into that
		// run together with the others (waitReturning), and a run
		// carries the fsyncs of every active writer.
		var r *fcRun
		if len(g.unflushed) == 0 {
			g.waitReturning()
			r, g.open = g.open, nil
			if r != nil {
				g.built(r.members)
			}
		}
		g.mu.Unlock()
		var b *fcBuilt
		if r != nil {
			var err error
			b, err = v.fcBuild()
			switch {
			case err != nil:
				v.fcFinish(err, r)
				r = nil
			case len(b.w.buf) == 0:
				// Nothing left to write: the run's data needs the next
				// flush.
				g.mu.Lock()
				r.tid = b.tid
				g.unflushed = append(g.unflushed, r)
				g.mu.Unlock()
				r = nil
			}
		}
		// A fast commit that starts the area and spans blocks writes
		// all but its first block now, and that first block, which
		// holds the HEAD, only after a flush: a crash that kept the
		// HEAD without a later block of the first fast commit (before
		// its first TAIL) fails the kernel's and e2fsck's whole
		// recovery (-ECANCELED at a zero tag, -EFSBADCRC at a bad
		// TAIL), and e2fsck then drops the log. Until the HEAD is
		// written the area's first block is zero (journal FW4) and no
		// scan reads the others.
		headLast := r != nil && b.off == 0 && len(b.w.buf) > v.bs
		if headLast {
			err := j.WriteFastCommitBlocks(b.tid, 1, b.w.buf[v.bs:])
			if err != nil {
				b.release()
				if errors.Is(err, journal.ErrSuperseded) {
					v.fcFinish(nil, r) // as for the write below
				} else {
					v.fcFinish(v.fcFailed(err), r)
				}
				r = nil
			}
		}
		g.mu.Lock()
		pending := g.unflushed
		g.mu.Unlock()
		// Blocks newly mapped (ADD_RANGE), the partial blocks a punch
		// or truncate zeroed around blocks it unmapped (DEL_RANGE), and
		// the bytes written for an i_size change (appended, or zeroed
		// past a smaller size) must be durable before the tags that
		// expose them are written (journal FW3), unless
		// Tuning.FastCommitOneFlush accepts the window: flush first.
		preflush := r != nil && (headLast || (b.adds || b.dels || b.resized) && !v.opts.Tuning.FastCommitOneFlush)
		if preflush || r == nil && len(pending) > 0 {
			g.mu.Lock()
			pending, g.unflushed = g.unflushed, nil
			g.mu.Unlock()
			// The newest tid the flush is for: runs are built in tid
			// order.
			var tid uint32
			if r != nil {
				tid = b.tid
			} else {
				tid = pending[len(pending)-1].tid
			}
			t0 := time.Now()
			err := j.FlushFastCommit(tid)
			g.flushed(time.Since(t0), err, pending)
			switch {
			case errors.Is(err, journal.ErrSuperseded):
				// The full commits of these tids are durable (Close's
				// last one, say): they hold the runs' changes, and
				// their flushes came after the runs' data.
				err = nil
			case err != nil:
				err = v.fcFailed(err)
			}
			v.fcFinish(err, pending...)
			if err != nil && r != nil {
				b.release()
				v.fcFinish(err, r)
				r = nil
			}
		}
		if r == nil {
			continue
		}
		buf := b.w.buf
		if headLast {
			buf = buf[:v.bs]
		}
		var err error
		t0 := time.Now()
		if preflush {
			// The flush above came after the run's data, the blocks
			// written before the HEAD and every earlier run (g.unflushed
			// was taken, and only this leader adds to it): the tags need
			// only to be durable themselves, a FUA write
			// (blockdev.WriteAtSync) instead of a write and a flush.
			err = j.WriteFastCommitSync(b.tid, b.off, buf)
		} else {
			err = j.WriteFastCommitBlocks(b.tid, b.off, buf)
		}
		b.release()
		switch {
		case errors.Is(err, journal.ErrSuperseded):
			// A full commit that started after the tags were built is
			// durable: it holds every change they carry, and its flush
			// came after the data.
			v.fcFinish(nil, r)
		case err != nil:
			v.fcFinish(v.fcFailed(err), r)
		case preflush:
			g.mu.Lock()
			r.tagged, r.tid = true, b.tid
			g.mu.Unlock()
			g.flushed(time.Since(t0), nil, []*fcRun{r})
			v.fcFinish(nil, r)
		default:
			g.mu.Lock()
			r.tagged, r.tid = true, b.tid
			g.unflushed = append(g.unflushed, r)
			g.mu.Unlock()
		}
	}
}

// fcMaxWait bounds how long a step waits for returning writers.
const fcMaxWait = time.Millisecond

// waitReturning waits, before a step builds the open run, for the
// writers whose fsyncs the last flush released (g.returning), and until
// the run has as many fsyncs as a run built lately had
// (recentWriters): a writer that fsyncs file after file comes back after
// the CPU its next file costs, and joining this run instead of the next
// saves it two flushes. This is jbd2's batching of a commit while other
// writers were active recently. The second condition counts the writers
// that earlier flushes released: when flushes cost less than a file's
// CPU (a device in RAM) and the writers share few CPUs, they come back
// at different times, a flush releases only some of them, and runs built
// when those are back would hold about half the writers, each needing
// two flushes. The wait ends when both hold, and at the latest twice the
// returning writers' average return time (g.returnAvg) after the flush
// that released them completed, or the average flush if that is longer,
// and at most fcMaxWait: a writer slower than that (or gone) holds the
// run no longer, and writers gone stop counting once the runs of
// fcPeakWindow are smaller. The time counts from the flush, not from the
// wait's start: the step often starts only when the first of them comes
// back. A single writer never waits: its fsync is the one that came
// back. g.mu is held.
func (g *fcGroup) waitReturning() {
	if !g.shortOfWriters() || g.flushAvg == 0 {
		return
	}
	wait := time.Until(g.flushDone.Add(min(max(g.flushAvg, 2*g.returnAvg), fcMaxWait)))
	if wait <= 0 {
		g.returning = 0
		return
	}
	deadline := time.Now().Add(wait)
	t := time.AfterFunc(wait, func() {
		g.mu.Lock()
		g.cond.Broadcast()
		g.mu.Unlock()
	})
	g.waiting = true
	for g.shortOfWriters() && time.Now().Before(deadline) {
		g.cond.Wait()
	}
	g.waiting = false
	t.Stop()
	g.returning = 0
}

// shortOfWriters reports whether the open run waits for more fsyncs
// (waitReturning). g.mu is held.
func (g *fcGroup) shortOfWriters() bool {
	return g.returning > 0 || g.open != nil && g.open.members < g.recentWriters()
}

// fcPeakWindow is how long a run's size counts in recentWriters.
const fcPeakWindow = 20 * time.Millisecond

// built records the size of a run built. g.mu is held.
func (g *fcGroup) built(members int) {
	now := time.Now()
	switch age := now.Sub(g.peakStart); {
	case age > 2*fcPeakWindow:
		g.peakPrev, g.peak, g.peakStart = 0, 0, now
	case age > fcPeakWindow:
		g.peakPrev, g.peak, g.peakStart = g.peak, 0, now
	}
	g.peak = max(g.peak, members)
}

// recentWriters returns the most fsyncs a run built in the last one to
// two fcPeakWindows had. g.mu is held.
func (g *fcGroup) recentWriters() int {
	if time.Since(g.peakStart) > 2*fcPeakWindow {
		return 0
	}
	return max(g.peak, g.peakPrev)
}

// flushed records a step's flush of d that completed the pending runs:
// their fsyncs are the writers expected back (waitReturning).
func (g *fcGroup) flushed(d time.Duration, err error, pending []*fcRun) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.returning = 0
	g.flushDone = time.Now()
	if err != nil {
		return
	}
	if g.flushAvg == 0 {
		g.flushAvg = d
	} else {
		g.flushAvg += (d - g.flushAvg) / 8
	}
	for _, r := range pending {
		g.returning += r.members
	}
}

// fcFailed handles a failed fast-commit write or flush: the changes taken
// from the tracking are in no durable fast commit, so the next fsync
// commits in full. It returns the error for the runs' fsyncs.
func (v *Volume) fcFailed(err error) error {
	fc := v.fc
	fc.mu.Lock()
	fc.ineligible = "fast-commit write failed"
	fc.mu.Unlock()
	return fmt.Errorf("ext4io: fast commit: %w", wrapIO(err))
}

// fcBuilt is a fast commit built by fcBuild, to be written at block off
// of the area.
type fcBuilt struct {
	w       fcBuilder
	tid     uint32
	off     int
	adds    bool // it maps blocks (ADD_RANGE)
	dels    bool // it unmaps blocks (DEL_RANGE)
	resized bool // it changes a file's i_size (fcBuilder.resized)
}

func (b *fcBuilt) release() { b.w.release() }

// fcBuild builds the tags of every change tracked so far and takes the
// tracking with them. It holds txnGate exclusively meanwhile (no
// operation runs, so nothing tracked changes) and releases it before it
// returns: operations go on while the fast commit is written, and what
// they change is tracked for the next one. A full commit that starts
// meanwhile carries this fast commit's tid and supersedes it; the journal
// orders the two (journal.Journal.WriteFastCommitBlocks, FW1). It returns
// a fast commit without blocks when nothing is tracked (earlier fast
// commits carry everything), and errFCFallback when a full commit is
// needed instead.
func (v *Volume) fcBuild() (*fcBuilt, error) {
	fc, m := v.fc, v.jm
	v.txnGate.Lock()
	defer v.txnGate.Unlock()
	if m.stopped {
		// Close's last commit ran (it holds the gate to set stopped):
		// nothing may be written to the journal any more, as for the
		// commits after it.
		return nil, errVolumeClosed()
	}
	if m.isFailed.Load() || v.conversionsQueued() {
		return nil, errFCFallback
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.ineligible == "" && fc.dirWrites > 0 {
		fc.ineligible = "directory block written without a dentry tag"
	}
	if fc.ineligible != "" {
		return nil, errFCFallback
	}
	// A full commit logged but not yet durable (an operation's commit at
	// the end, the background committer) holds changes no longer
	// tracked: wait for it with a full commit.
	tid, err := m.j.FastCommitTid()
	if errors.Is(err, journal.ErrBusy) {
		return nil, errFCFallback
	}
	if err != nil {
		return nil, fmt.Errorf("ext4io: fast commit: %w", err)
	}
	if len(fc.inodes) == 0 && len(fc.dentries) == 0 {
		return &fcBuilt{tid: tid}, nil
	}
	if fc.off > 0 && fc.tid != tid {
		fc.off = 0 // a full commit came between: start the area again
	}
	b := &fcBuilt{w: fcBuilder{bs: v.bs}, tid: tid}
	if fc.off == 0 {
		b.w.add(layout.EncodeFCHead(layout.FCHead{Features: layout.FCSupportedFeatures, Tid: tid}))
	}
	if reason, err := v.fcTags(fc, &b.w); err != nil || reason != "" {
		b.release()
		if err != nil {
			return nil, err
		}
		fc.ineligible = reason
		return nil, errFCFallback
	}
	b.w.tail(tid)
	nblk := len(b.w.buf) / v.bs
	if fc.off+nblk > m.j.FastCommitLen() {
		b.release()
		fc.ineligible = "fast-commit area full"
		return nil, errFCFallback
	}
	if fc.off == 0 {
		// A new area: bring the log's transactions home first. e2fsck
		// 1.47.0 replays fast commits with the group descriptors it read
		// before replaying the log (inodes a logged transaction put in a
		// group's unused area read as zeroes), so it must find the log
		// empty; the cost falls on the first fast commit after each full
		// commit. After the tags, so that a fallback (an ineligible
		// inode found while building them) costs no checkpoint: the
		// tags read the running metadata, which the checkpoint leaves
		// alone.
		if err := m.j.Checkpoint(); err != nil {
			b.release()
			return nil, fmt.Errorf("ext4io: fast commit: %w", err)
		}
	}
	// The tags hold the tracked changes now: the tracking starts again
	// for the next fast commit, whose blocks follow these.
	b.off, b.adds, b.dels, b.resized = fc.off, b.w.adds, b.w.dels, b.w.resized
	fc.off += nblk
	fc.tid = tid
	fc.dentries = nil
	clear(fc.inodes)
	return b, nil
}

// fcTags adds the tags of the tracked changes to w. A non-empty reason
// says they cannot be expressed. fc.mu and txnGate (exclusively) are held.
func (v *Volume) fcTags(fc *fcState, w *fcBuilder) (reason string, err error) {
	// An inode created since the last fast commit and already without
	// links leaves no trace: its tags are skipped.
	gone := map[uint32]bool{}
	for _, d := range fc.dentries {
		if d.tag == layout.FCTagCreat {
			raw, err := v.fcRawInode(d.ino)
			if err != nil {
				return "", err
			}
			if binary.LittleEndian.Uint16(raw[0x1A:]) == 0 { // i_links_count
				gone[d.ino] = true
			}
		}
	}
	for _, d := range fc.dentries {
		if gone[d.ino] {
			continue
		}
		if d.tag == layout.FCTagCreat {
			// The inode before its entry, as replay reads the mode; the
			// inode may have been freed by an UNLINK replayed before
			// (a reused number), hence before every CREAT.
			if r, err := v.fcInodeTags(fc, w, d.ino, true); r != "" || err != nil {
				return r, err
			}
		}
		w.add(layout.EncodeFCDentry(d.tag, layout.FCDentry{Parent: d.parent, Ino: d.ino, Name: []byte(d.name)}))
	}
	inos := make([]uint32, 0, len(fc.inodes))
	for ino := range fc.inodes {
		inos = append(inos, ino)
	}
	sort.Slice(inos, func(i, j int) bool { return inos[i] < inos[j] })
	for _, ino := range inos {
		if gone[ino] {
			continue
		}
		if r, err := v.fcInodeTags(fc, w, ino, false); r != "" || err != nil {
			return r, err
		}
	}
	return "", nil
}

// fcInodeTags adds the range tags of inode ino's tracked range and its
// INODE tag to w; an inode without links gets none (its UNLINK frees it
// on replay). For a created inode (creat) the range tags cover every
// logical block: its number may be a freed inode's whose extents are
// still on disk (e2fsck's replay of UNLINK leaves them).
func (v *Volume) fcInodeTags(fc *fcState, w *fcBuilder, ino uint32, creat bool) (string, error) {
	raw, err := v.fcRawInode(ino)
	if err != nil {
		return "", err
	}
	in, err := layout.DecodeInode(raw, v.sb.InodeSizeBytes())
	if err != nil {
		return "", fmt.Errorf("ext4io: fast commit: inode %d: %w", ino, err)
	}
	if in.LinksCount == 0 {
		if !fc.unlinked[ino] {
			return "inode freed without an unlink", nil
		}
		return "", nil
	}
	if in.IsDir() && !creat {
		// No tags for a directory, as ext4_fc_track_inode tracks none:
		// its entries are the dentry tags, and a mapping change of it is
		// not eligible. Linux's replay of a directory's INODE tag fails
		// the whole recovery for the root directory ("JBD2: journal
		// recovery failed"; TestFastCommitMultiBlock).
		return "", nil
	}
	switch {
	case in.Flags&layout.InodeFlagInlineData != 0:
		return "inline data", nil
	case in.IsSymlink() || isSpecial(in):
		return "symlink or special file", nil
	}
	lo, hi := uint64(0), uint64(0)
	if t := fc.inodes[ino]; t != nil {
		lo, hi = t.lo, t.hi
	}
	n := layout.GoodOldInodeSize
	if v.sb.InodeSizeBytes() > layout.GoodOldInodeSize {
		n += int(in.ExtraIsize)
	}
	n = min(n, len(raw))
	if creat {
		// The replay keeps the on-disk bytes past the tag's n: in a
		// freed inode reused here, its predecessor's in-inode xattrs
		// (Linux's ext4_fc_replay_inode and e2fsck's
		// ext4_fc_handle_inode copy only the tag's bytes too). Bytes
		// there without the in-inode xattr magic at n (where the tag's
		// i_extra_isize puts the header) hold no xattrs for any reader:
		// a slot never used since the format, whose inode table was not
		// zeroed (lazy_itable_init), replays as a file without xattrs,
		// as the new file is.
		logged, err := v.fcLoggedInode(ino)
		if err != nil {
			return "", err
		}
		if logged == nil || !bytes.Equal(logged[n:], raw[n:]) && (fcIbodyXattrs(logged, n) || fcIbodyXattrs(raw, n)) {
			return "created inode over a freed inode's xattr area", nil
		}
		// The replays keep the on-disk i_block too when it has the
		// extent magic, and the range tags then unmap what that tree
		// maps and free its blocks. The tree of a file the last full
		// commit held and that was unlinked since maps its own blocks,
		// which no other file gets before the next full commit
		// (alloc.FreeDeferred); any other (an old filesystem's inode
		// on a reused disk, extents a freed inode kept) may map
		// blocks other files hold now.
		if fcStaleExtents(logged) && !fc.unlinkedSinceCommit(ino) {
			return "created inode over a stale extent tree", nil
		}
	}
	inodeTag := layout.EncodeFCInode(layout.FCInode{Ino: ino, Raw: raw[:n]})
	if creat {
		// INODE first, as ext4_fc_commit_dentry_updates writes a created
		// inode: replay makes the inode (an empty extent root) before its
		// ranges go in.
		w.add(inodeTag)
		lo, hi = 0, maxLblk+1
	}
	if hi > lo {
		if in.Flags&layout.InodeFlagExtents == 0 {
			return "block-mapped file", nil
		}
		if extent.DecodeHeader(in.Block[:]).Depth > 0 {
			// e2fsck 1.47.0 replays an inode's ranges by rebuilding its
			// whole extent tree, and takes the blocks of a tree too
			// large for i_block from the bitmap as replayed so far. A
			// block a later ADD_RANGE maps is still free there: e2fsck
			// wrote a tree block over another file's data and left the
			// block claimed twice. A tree that fits in i_block (depth 0:
			// at most 4 extents) needs no block in that rebuild.
			return "extent tree deeper than i_block", nil
		}
		if err := v.fcRangeTags(w, ino, lo, hi); err != nil {
			return "", err
		}
	}
	if !creat {
		w.add(inodeTag)
	}
	if in.IsReg() {
		resized, err := v.fcResized(fc, ino, in.Size, creat)
		if err != nil {
			return "", err
		}
		w.resized = w.resized || resized
		fc.sizes[ino] = in.Size
	}
	return "", nil
}

// fcIbodyXattrs reports whether the on-disk inode raw, read with an
// i_extra_isize that ends its first n bytes, may have in-inode xattrs:
// the magic at n, which Linux (ext4_iget_extra_inode), e2fsck
// (check_inode_extra_space) and ext4io (layout.DecodeXattrIbody) require
// before they read any entry there. When the tag does not carry
// i_extra_isize itself (n below 128 + 4), the bytes on disk decide where
// the header lies, and raw counts as having xattrs.
func fcIbodyXattrs(raw []byte, n int) bool {
	if n < layout.GoodOldInodeSize+4 {
		return n < len(raw)
	}
	return n+4 <= len(raw) && binary.LittleEndian.Uint32(raw[n:]) == layout.XattrMagic
}

// unlinkedSinceCommit reports whether inode ino is a file the last full
// commit held and that was unlinked since: an UNLINK of it since that
// commit, and its first entry change since then no CREAT (a number
// created and unlinked since holds what the commit left in the slot).
func (fc *fcState) unlinkedSinceCommit(ino uint32) bool {
	tag, ok := fc.firstTag[ino]
	return fc.unlinked[ino] && ok && tag != layout.FCTagCreat
}

// fcStaleExtents reports whether the on-disk inode raw has an i_block
// that the replays of an INODE tag keep and read as an extent tree that
// maps blocks or points to tree blocks: the extent magic and another
// header than an empty root's. Without the magic the replays (Linux's
// ext4_fc_replay_inode, e2fsck's ext4_fc_replay_fixup_iblocks,
// layout.FCMergeInode) give the inode an empty root.
func fcStaleExtents(raw []byte) bool {
	const iblock = 0x28 // i_block
	h := extent.DecodeHeader(raw[iblock:])
	if h.Magic != extent.Magic {
		return false
	}
	return h.Entries != 0 || h.Depth != 0 || h.Max != extent.RootMax
}

// fcResized reports whether size, the i_size of regular file ino's INODE
// tag, differs from the size the replay would give the file without the tag:
// that of its INODE tag in an earlier fast commit since the last full
// commit, else the one that commit logged (0 for an inode created since).
// An inode that cannot be decoded from its logged copy counts as
// resized. fc.mu and txnGate (exclusively) are held: no full commit is in
// flight (fcBuild), so the logged copy is the committed one.
func (v *Volume) fcResized(fc *fcState, ino uint32, size uint64, creat bool) (bool, error) {
	if base, ok := fc.sizes[ino]; ok {
		return size != base, nil
	}
	if creat {
		return size > 0, nil
	}
	raw, err := v.fcLoggedInode(ino)
	if err != nil {
		return false, err
	}
	if raw == nil {
		return true, nil
	}
	old, err := layout.DecodeInode(raw, v.sb.InodeSizeBytes())
	if err != nil || old.LinksCount == 0 {
		return true, nil
	}
	return size != old.Size, nil
}

// fcLoggedInode returns inode ino as the last full commit left it: the
// copy a replay of the log gives, which fast-commit tags are replayed
// onto. nil without a journal. fc.mu and txnGate (exclusively) are held,
// as for fcResized.
func (v *Volume) fcLoggedInode(ino uint32) ([]byte, error) {
	m, ok := v.meta.(*jmeta)
	if !ok {
		return nil, nil
	}
	g, idx := v.sb.InodeLocation(ino)
	isz := v.sb.InodeSizeBytes()
	byteOff := uint64(idx) * uint64(isz)
	blk := v.groups[g].InodeTable + byteOff/uint64(v.bs)
	raw := make([]byte, isz)
	if err := m.readLoggedAt(blk, int(byteOff%uint64(v.bs)), raw); err != nil {
		return nil, fmt.Errorf("ext4io: fast commit: inode %d: %w", ino, err)
	}
	return raw, nil
}

// fcRawInode returns the on-disk inode ino as the next full commit would
// log it (its inode table block in the running transaction).
func (v *Volume) fcRawInode(ino uint32) ([]byte, error) {
	g, idx := v.sb.InodeLocation(ino)
	isz := v.sb.InodeSizeBytes()
	byteOff := uint64(idx) * uint64(isz)
	blk := v.groups[g].InodeTable + byteOff/uint64(v.bs)
	off := int(byteOff % uint64(v.bs))
	b := make([]byte, isz)
	if err := v.readBlockAt(blk, off, b); err != nil {
		return nil, fmt.Errorf("ext4io: fast commit: inode %d: %w", ino, err)
	}
	return b, nil
}

// Largest ranges one tag carries: EXT_INIT_MAX_LEN, EXT_UNWRITTEN_MAX_LEN
// and ext4_map_blocks's INT_MAX cap of a lookup (the kernel's DEL_RANGE).
const (
	fcMaxWritten   = 32768
	fcMaxUnwritten = 32767
	fcMaxDel       = 1<<31 - 1
)

// fcRangeTags adds ADD_RANGE tags for the extents of inode ino's tree in
// [lo, hi) and DEL_RANGE tags for the holes between them, as
// ext4_fc_write_inode_data does with ext4_map_blocks, in logical order
// except for a DEL_RANGE at logical block 0, which goes last. e2fsck
// 1.47.0's replay (ext4_modify_extent_list) empties the only extent of its
// list for the inode when such a tag covers it, keeps the empty extent (its
// ex_sort_and_merge drops them only from two entries up), and a later range
// tag of the inode meets an end of 0+0-1, a wrapped 2^64-1: it "splits"
// the empty extent into one of 2^31-1 blocks and the file is cleared
// (docs/fastcommit.md, "DEL_RANGE at block 0"). Range tags of one inode
// cover disjoint ranges, so their order means nothing to any replay.
func (v *Volume) fcRangeTags(w *fcBuilder, ino uint32, lo, hi uint64) error {
	n, err := v.getInode(ino)
	if err != nil {
		return fmt.Errorf("ext4io: fast commit: inode %d: %w", ino, err)
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.m == nil || n.m.tree == nil {
		return fmt.Errorf("ext4io: fast commit: inode %d has no extent tree: %w", ino, ErrCorrupt)
	}
	var atZero uint64 // length of the DEL_RANGE at block 0, written last
	del := func(from, to uint64) {
		for from < to {
			cnt := min(to-from, fcMaxDel)
			if from == 0 {
				atZero = cnt
			} else {
				w.add(layout.EncodeFCRange(layout.FCRange{Ino: ino, Lblk: uint32(from), Len: uint32(cnt)}, false))
			}
			from += cnt
		}
	}
	next := lo
	err = n.m.walk(func(e extent.Extent) error {
		s, end := max(uint64(e.Lblk), next), min(uint64(e.Lblk)+uint64(e.Len), hi)
		if s >= end {
			return nil
		}
		del(next, s)
		limit := uint64(fcMaxWritten)
		if e.Unwritten {
			limit = fcMaxUnwritten
		}
		for l := s; l < end; {
			cnt := min(end-l, limit)
			w.add(layout.EncodeFCRange(layout.FCRange{Ino: ino, Lblk: uint32(l), Len: uint32(cnt),
				Pblk: e.Pblk + (l - uint64(e.Lblk)), Unwritten: e.Unwritten}, true))
			l += cnt
		}
		next = end
		return nil
	})
	if err != nil {
		return fmt.Errorf("ext4io: fast commit: inode %d: %w", ino, err)
	}
	del(next, hi)
	if atZero > 0 {
		w.add(layout.EncodeFCRange(layout.FCRange{Ino: ino, Len: uint32(atZero)}, false))
	}
	return nil
}

// fcBuilder lays tags out in blocks as ext4_fc_reserve_space does, with
// the running crc of the fast commit.
type fcBuilder struct {
	bs  int
	buf []byte // whole blocks
	off int    // write position in the last block; bs when none is open
	crc uint32
	// adds says an ADD_RANGE was added: the fast commit maps blocks.
	adds bool
	// dels says a DEL_RANGE was added: the fast commit unmaps blocks,
	// and a punch or truncate around them zeroed partial blocks in place.
	dels bool
	// resized says an INODE tag changes a regular file's i_size from
	// the size the replay would give it otherwise (fcResized): a larger
	// size exposes bytes written since in blocks mapped before, a
	// smaller one relies on the truncate's zeroing of its last block
	// past it, which a later extension reads.
	resized bool
}

// reserve returns the position of a record of n bytes (header included),
// padding the current block when the record and a PAD header after it do
// not fit. The first block is a pooled scratch block (release gives it
// back), cleared.
func (w *fcBuilder) reserve(n int) int {
	if len(w.buf) == 0 {
		w.buf = getBlockBuf(w.bs)
		clear(w.buf)
		w.off = 0
	}
	if w.off+n+layout.FCTagBaseLen+1 > w.bs {
		w.putRecord(layout.FCTagPad, nil, w.bs-w.off-1-layout.FCTagBaseLen)
		w.buf = append(w.buf, make([]byte, w.bs)...)
		w.off = 0
	}
	return len(w.buf) - w.bs + w.off
}

func (w *fcBuilder) put(t layout.FCTag) { w.putRecord(t.Tag, t.Value, len(t.Value)) }

// putRecord stores a record of tag with a value of vlen bytes, value
// followed by zeroes (the block is clear past w.off), at the write
// position, and continues the crc over it as stored (layout.FCRecordCrc).
func (w *fcBuilder) putRecord(tag uint16, value []byte, vlen int) {
	at := len(w.buf) - w.bs + w.off
	rec := w.buf[at : at+layout.FCTagBaseLen+vlen]
	binary.LittleEndian.PutUint16(rec[0:], tag)
	binary.LittleEndian.PutUint16(rec[2:], uint16(vlen))
	copy(rec[layout.FCTagBaseLen:], value)
	w.off += len(rec)
	w.crc = crc32c.Kernel(w.crc, rec)
}

// release gives back the pooled first block once the blocks are written
// (or not used).
func (w *fcBuilder) release() {
	if len(w.buf) == w.bs {
		putBlockBuf(w.buf)
	}
	w.buf = nil
}

func (w *fcBuilder) add(t layout.FCTag) {
	w.adds = w.adds || t.Tag == layout.FCTagAddRange
	w.dels = w.dels || t.Tag == layout.FCTagDelRange
	w.reserve(layout.FCTagBaseLen + len(t.Value))
	w.put(t)
}

// tail ends the fast commit with a TAIL running to the end of its block.
func (w *fcBuilder) tail(tid uint32) {
	w.reserve(layout.FCTagBaseLen + 8)
	at := len(w.buf) - w.bs + w.off
	vlen := w.bs - w.off - layout.FCTagBaseLen
	crc := layout.FCTailCrc(w.crc, tid, vlen)
	b, le := w.buf[at:], binary.LittleEndian
	le.PutUint16(b[0:], layout.FCTagTail)
	le.PutUint16(b[2:], uint16(vlen))
	le.PutUint32(b[4:], tid)
	le.PutUint32(b[8:], crc)
	w.off = w.bs
	w.crc = 0
}
