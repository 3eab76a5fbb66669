package ext4io

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ext4io/ext4io/blockdev"
)

// In-place writes of journalled atomic pages, in the background.
//
// Once a journalled atomic write's commit is durable (atomicjournal.go),
// its data is safe: recovery writes the logged copies home. The write in
// place (the "home write") is then issued by a goroutine and WriteAtomic
// returns. Until the home write has completed and the journal knows the
// copies are home (Journal.MarkHome), the blocks are "pending" here, and
// every device request of the volume goes through homeDev, which orders
// requests overlapping a pending block after it:
//   - ReadAt, WriteAt, WriteVAt, WriteAtSync, ZeroOut and Discard of v.dev
//     (file reads and writes, the page cache, direct I/O, readahead,
//     metadata, zeroing, discards) wait until the pending blocks they
//     overlap are settled (written and marked home, or failed);
//   - the iomap ops handed out (dioOps.Begin and MapOverwrite) wait the
//     same way before they map written blocks, as their caller may do the
//     I/O on a device handle of its own (a NoWait request gets
//     iomap.ErrWouldBlock instead);
//   - the journal's view of the device (homeDev with journal set) waits
//     only until the overlapping home writes have completed: MarkHome may
//     wait for a checkpoint in progress, whose writes home go through it;
//   - every Flush and durable write (WriteAtSync) waits until every home
//     write in flight has completed, and fails when one of them failed. A transaction that revokes a
//     pending block (the file's next journalled write, a free, a zeroing,
//     Sync's liveCheck) therefore commits only after its preflush made
//     the home write durable, as the commit's preflush comes before its
//     commit block.
//
// A failed home write is not marked home (the checkpoint writes the log
// copy home), stops the volume committing (setFailedLocked) and is
// reported by the file's next Sync, Datasync or Close. The bytes in flight
// are capped (homeMaxBytes): a writer over the cap waits.

// homeMaxBytes caps the bytes of home writes in flight per volume.
const homeMaxBytes = 4 << 20

// homeWrites is a volume's set of pending home writes.
type homeWrites struct {
	n     atomic.Int64 // len(list), for the fast path
	mu    sync.Mutex
	list  []*homeWrite
	bytes int64      // in flight, at most homeMaxBytes (but one)
	room  *sync.Cond // on mu, signalled when bytes drops
	errs  map[uint32]error
}

// homeWrite is one pending run of blocks written in place.
type homeWrite struct {
	off, end int64 // bytes on the device
	ino      uint32
	err      error         // set before written is closed
	written  chan struct{} // closed once the device write returned
	done     chan struct{} // closed once settled and removed from the list
}

func newHomeWrites() *homeWrites {
	h := &homeWrites{}
	h.room = sync.NewCond(&h.mu)
	return h
}

// add registers runs (device byte ranges) of ino as pending, waiting for
// room first.
func (h *homeWrites) add(ino uint32, runs [][2]int64) []*homeWrite {
	var total int64
	for _, r := range runs {
		total += r[1]
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.bytes > 0 && h.bytes+total > homeMaxBytes {
		h.room.Wait()
	}
	h.bytes += total
	ws := make([]*homeWrite, len(runs))
	for i, r := range runs {
		ws[i] = &homeWrite{off: r[0], end: r[0] + r[1], ino: ino, written: make(chan struct{}), done: make(chan struct{})}
	}
	h.list = append(h.list, ws...)
	h.n.Store(int64(len(h.list)))
	return ws
}

// remove settles w: it leaves the list and its waiters go on.
func (h *homeWrites) remove(w *homeWrite) {
	h.mu.Lock()
	for i, x := range h.list {
		if x == w {
			h.list = append(h.list[:i], h.list[i+1:]...)
			break
		}
	}
	h.n.Store(int64(len(h.list)))
	h.bytes -= w.end - w.off
	if w.err != nil {
		if h.errs == nil {
			h.errs = map[uint32]error{}
		}
		if h.errs[w.ino] == nil {
			h.errs[w.ino] = w.err
		}
	}
	h.room.Broadcast()
	h.mu.Unlock()
	close(w.done)
}

// matching returns the pending writes that overlap [off, off+n) (all with
// n < 0) or, with ino != 0, those of ino.
func (h *homeWrites) matching(off, n int64, ino uint32) []*homeWrite {
	if h == nil || h.n.Load() == 0 {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var ws []*homeWrite
	for _, w := range h.list {
		if (ino != 0 && w.ino == ino) || (ino == 0 && (n < 0 || (w.off < off+n && off < w.end))) {
			ws = append(ws, w)
		}
	}
	return ws
}

// wait waits until the pending writes overlapping [off, off+n) are
// settled.
func (h *homeWrites) wait(off, n int64) {
	if !h.idle() {
		h.waitOverlapping(off, n)
	}
}

// waitOverlapping is wait's slow path, kept out of line so that wait,
// the check alone, inlines.
//
//go:noinline
func (h *homeWrites) waitOverlapping(off, n int64) {
	for _, w := range h.matching(off, n, 0) {
		<-w.done
	}
}

// pending reports whether a pending write overlaps [off, off+n).
func (h *homeWrites) pending(off, n int64) bool {
	return !h.idle() && len(h.matching(off, n, 0)) > 0
}

// idle reports whether no write is pending: the check inlined in the
// waits of every device request.
func (h *homeWrites) idle() bool { return h == nil || h.n.Load() == 0 }

// waitWritten waits until the pending writes overlapping [off, off+n)
// (all with n < 0) have completed, and returns the first one's error.
func (h *homeWrites) waitWritten(off, n int64) error {
	var err error
	for _, w := range h.matching(off, n, 0) {
		<-w.written
		if err == nil {
			err = w.err
		}
	}
	return err
}

// waitAll waits until every pending write is settled.
func (h *homeWrites) waitAll() {
	for _, w := range h.matching(0, -1, 0) {
		<-w.done
	}
}

// waitIno waits until ino's pending writes are settled and returns (and
// clears) the error of a failed one not reported yet.
func (h *homeWrites) waitIno(ino uint32) error {
	if h == nil {
		return nil
	}
	for _, w := range h.matching(0, 0, ino) {
		<-w.done
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	err := h.errs[ino]
	delete(h.errs, ino)
	return err
}

// takeErr returns (and clears) the error of a failed home write of ino
// not reported yet, without waiting.
func (h *homeWrites) takeErr(ino uint32) error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	err := h.errs[ino]
	delete(h.errs, ino)
	return err
}

// homeWriteRuns writes data (runs of blocks and their bytes) in place in
// the background (see the top of the file) and then marks tid's copies of
// blks home, calling done once every one is marked (the journal no longer
// reads them). The caller registered ws with add.
func (f *File) homeWriteRuns(ws []*homeWrite, runData [][]byte, tid uint32, blks []uint64, done func()) {
	v, m := f.v, f.v.jm
	dev := v.home.inner
	ino := f.ino
	go func() {
		var failed error
		for i, w := range ws {
			if failed == nil {
				if _, err := dev.WriteAt(runData[i], w.off); err != nil {
					failed = fmt.Errorf("ext4io: inode %d: journalled atomic write in place at block %d: %w", ino, w.off>>v.bshift, wrapIO(err))
				}
			}
		}
		if failed != nil {
			// The commit holds the data: recovery writes it home. Stop
			// committing, so that nothing revokes it; the checkpoint at
			// Close writes it home too (not marked home).
			m.mu.Lock()
			m.setFailedLocked(failed)
			m.mu.Unlock()
		}
		for _, w := range ws {
			w.err = failed
			close(w.written)
		}
		if failed == nil && m.j.MarkHome(tid, blks) {
			done() // the journal no longer reads runData
		}
		for _, w := range ws {
			v.home.h.remove(w)
		}
	}()
}

// homeDev is the volume's device (v.dev) when journalled atomic writes can
// write in place in the background: it orders requests after the pending
// home writes they overlap (see the top of the file). With journal set it
// is the journal's view, which waits for the writes only, not for them to
// be marked home.
type homeDev struct {
	inner   blockdev.Device
	h       *homeWrites
	journal bool
}

func (d *homeDev) before(off, n int64) {
	if d.journal {
		_ = d.h.waitWritten(off, n) // a failure shows at the next Flush
		return
	}
	d.h.wait(off, n)
}

func (d *homeDev) ReadAt(p []byte, off int64) (int, error) {
	if !d.h.idle() {
		d.before(off, int64(len(p)))
	}
	return d.inner.ReadAt(p, off)
}

func (d *homeDev) WriteAt(p []byte, off int64) (int, error) {
	if !d.h.idle() {
		d.before(off, int64(len(p)))
	}
	return d.inner.WriteAt(p, off)
}

func (d *homeDev) WriteAtSync(p []byte, off int64) (int, error) {
	if !d.h.idle() {
		d.before(off, int64(len(p)))
	}
	if err := d.h.waitWritten(0, -1); err != nil {
		return 0, err
	}
	return blockdev.WriteAtSync(d.inner, p, off)
}

func (d *homeDev) Flush() error {
	if err := d.h.waitWritten(0, -1); err != nil {
		return fmt.Errorf("ext4io: flush: a journalled page's write in place failed: %w", err)
	}
	return d.inner.Flush()
}

func (d *homeDev) ZeroOut(off, n int64) error {
	if !d.h.idle() {
		d.before(off, n)
	}
	return d.inner.ZeroOut(off, n)
}

func (d *homeDev) Discard(off, n int64) error {
	if !d.h.idle() {
		d.before(off, n)
	}
	return d.inner.Discard(off, n)
}

func (d *homeDev) Size() int64           { return d.inner.Size() }
func (d *homeDev) LogicalBlockSize() int { return d.inner.LogicalBlockSize() }
func (d *homeDev) Close() error          { return d.inner.Close() }

func (d *homeDev) AtomicWriteUnitMax() int64 {
	if aw, ok := d.inner.(blockdev.AtomicWriter); ok {
		return aw.AtomicWriteUnitMax()
	}
	return 0
}

func (d *homeDev) Invalidate(off, n int64) error {
	if inv, ok := d.inner.(blockdev.Invalidator); ok {
		return inv.Invalidate(off, n)
	}
	return nil
}

// The variants of homeDev for the inner device's optional interfaces that
// callers test for (Aligner, VectorWriter).
type (
	homeDevA  struct{ *homeDev }
	homeDevV  struct{ *homeDev }
	homeDevAV struct{ *homeDev }
)

func (d homeDevA) Alignment() (mem, off int)  { return d.inner.(blockdev.Aligner).Alignment() }
func (d homeDevAV) Alignment() (mem, off int) { return d.inner.(blockdev.Aligner).Alignment() }
func (d homeDevV) WriteVAt(bufs [][]byte, off int64) (int, error) {
	return d.writeVAt(bufs, off)
}
func (d homeDevAV) WriteVAt(bufs [][]byte, off int64) (int, error) {
	return d.writeVAt(bufs, off)
}

func (d *homeDev) writeVAt(bufs [][]byte, off int64) (int, error) {
	var n int64
	for _, b := range bufs {
		n += int64(len(b))
	}
	if !d.h.idle() {
		d.before(off, n)
	}
	return d.inner.(blockdev.VectorWriter).WriteVAt(bufs, off)
}

// wrap returns d as a blockdev.Device with the inner device's Aligner and
// VectorWriter.
func (d *homeDev) wrap() blockdev.Device {
	_, a := d.inner.(blockdev.Aligner)
	_, vw := d.inner.(blockdev.VectorWriter)
	switch {
	case a && vw:
		return homeDevAV{d}
	case a:
		return homeDevA{d}
	case vw:
		return homeDevV{d}
	}
	return d
}

// volumeHome is a volume's background home writes: h, and inner, the
// device under v.dev.
type volumeHome struct {
	h     *homeWrites
	inner blockdev.Device
}
