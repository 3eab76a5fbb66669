package ext4io

import "sync"

// Read-ahead for buffered sequential reads.
//
// The page cache holds only pages that buffered writes touched (see
// buffered.go): a read of a file without cached pages goes to the device.
// A sequential read of bytes the cache does not hold, in a file that has
// cached pages, drops the clean pages of the window's range, as a direct
// read does, and reads ahead without the cache if none was dirty (see
// ReadAt); bytes the cache holds are copied from it.
// A File opened without Direct keeps a read-ahead window of its own
// instead: a read that continues the previous one on that File and is
// smaller than the window reads the window from the device (one device
// read per mapped run in it) and later reads inside the window are copied
// from it, as Linux's readahead serves sequential reads from pages read
// ahead.
//
// The window is valid while the inode's content generation
// (inode.dataGen) and its mapping's seq are what they were before the
// window was read: every data change through any File of the inode bumps
// dataGen when it is done (WriteAt, Write and WriteAtomic once the inode
// has read ahead, truncateLocked, Fallocate), and every mapping change bumps seq.
// A reader sets inode.readAhead before it loads dataGen, and a writer
// loads readAhead after its data is written: a writer that saw it unset
// finished its data before any window was read. A read racing with a write may see either
// content, as with the device, but a read that starts after a write has
// returned never sees a window read before it. Writes made with the iomap
// ops a File hands out (NormalOps, OverwriteOps) do not go through those
// paths: the inode then stops reading ahead for good (inode.noReadahead).

// readaheadBytes is the window: Linux's default read_ahead_kb (128 KiB).
const readaheadBytes = 128 << 10

// readahead is a File's read-ahead window.
type readahead struct {
	// mu guards the fields below. Readers only TryLock it (a File read
	// from several goroutines at once reads the device for the loser), so
	// it never waits under the inode lock; Close takes it without holding
	// the inode lock.
	mu       sync.Mutex
	buf      []byte // file bytes [off, off+len(buf)); nil until needed
	off      int64
	gen, seq uint64 // inode.dataGen and mapper.seq before buf was read
	next     int64  // where a read continuing the last one starts
}

// readSeq is readAt for a read that ReadAt sends to the device, with
// read-ahead on Files opened without Direct. The caller holds n.mu shared
// and has clamped p to the file size.
func (f *File) readSeq(p []byte, off int64) (int, error) {
	if f.direct || f.m == nil || len(p) >= readaheadBytes || f.n.noReadahead.Load() || !f.ra.mu.TryLock() {
		return f.readAt(p, off)
	}
	defer f.ra.mu.Unlock()
	ra := &f.ra
	end := off + int64(len(p))
	if !f.n.readAhead.Load() {
		f.n.readAhead.Store(true) // before dataGen is loaded (see above)
	}
	gen, seq := f.n.dataGen.Load(), f.m.seq.Load()
	if len(ra.buf) > 0 && ra.gen == gen && ra.seq == seq && off >= ra.off && end <= ra.off+int64(len(ra.buf)) {
		ra.next = end
		return copy(p, ra.buf[off-ra.off:]), nil
	}
	prev := ra.next
	ra.next = end
	k := min(int64(readaheadBytes), int64(f.in.Size)-off)
	if off != prev || k <= int64(len(p)) {
		return f.readAt(p, off)
	}
	if ra.buf == nil {
		ra.buf = make([]byte, readaheadBytes)
	}
	buf := ra.buf[:k]
	if _, err := f.readAt(buf, off); err != nil {
		// An error past p (a corrupt mapping further on) is not this
		// read's: read p alone.
		ra.buf = ra.buf[:0]
		return f.readAt(p, off)
	}
	ra.buf, ra.off, ra.gen, ra.seq = buf, off, gen, seq
	return copy(p, buf), nil
}

// continuesRead reports whether a read of n bytes at off would use the
// read-ahead window: it continues the File's last read or lies in the
// window. ReadAt then drops the clean cached pages of the window's range
// (File.cacheCleanLocked) and reads through readSeq if none is dirty.
func (f *File) continuesRead(off int64, n int) bool {
	if f.direct || f.m == nil || n >= readaheadBytes || f.n.noReadahead.Load() || !f.ra.mu.TryLock() {
		return false
	}
	defer f.ra.mu.Unlock()
	ra := &f.ra
	return off == ra.next || off >= ra.off && off < ra.off+int64(len(ra.buf))
}

// release drops the window's memory (Close).
func (ra *readahead) release() {
	ra.mu.Lock()
	ra.buf = nil
	ra.mu.Unlock()
}
