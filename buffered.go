package ext4io

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"time"

	"github.com/ext4io/ext4io/alloc"
	"github.com/ext4io/ext4io/esc"
	"github.com/ext4io/ext4io/extent"
	"github.com/ext4io/ext4io/iomap"
)

// Buffered I/O with delayed allocation (ext4's delalloc, on iomap's page
// cache).
//
// A buffered write copies into page-cache pages under the inode lock held
// exclusively. Where it lands on a hole, Begin reserves one block per page
// (alloc.Reserve) and records the range Delayed in the extent-status cache
// (consecutive appends through the mapper's appended run: delayrun.go):
// no journal handle, no metadata change, no device I/O. i_size grows in
// memory; the on-disk size (i_disksize) stays.
//
// Write-back (File.Sync, Volume.Sync, the background flusher, or a writer
// that finds the cache full of dirty pages) takes one metadata operation
// and the inode lock shared for the file (LockWriteback), then for each
// run of dirty pages: Begin(Writeback) allocates contiguous blocks for
// Delayed ranges out of the reservation, the pages go to the device in one
// write per mapping, and End(Writeback) maps the blocks as written extents,
// converts unwritten ones and moves i_disksize to cover the data, all in
// that operation's transaction. Data is on the device before the metadata
// that maps it, so a crash never exposes stale blocks.
//
// Lock order: write-back takes the operation (txnGate) before the inode
// lock, like every metadata operation. A thread holding an inode lock
// therefore never waits for write-back: the page cache is created with
// iomap's NoInlineWriteback, and a writer that finds it full of dirty
// pages drops its lock, writes back the oldest dirty run, and goes on
// (balance_dirty_pages). Reads never cache pages (NoReadCache): the cache
// holds exactly the pages writes touched, so only buffered writes (under
// the exclusive inode lock) add pages. Sequential reads of uncached data
// go through the File's own read-ahead window instead (readahead.go).
//
// Operations that change the mapping (truncate, punch, zero-range,
// write-zeroes) zero and drop the cached pages of their range and release
// the reservations of Delayed blocks in it; direct I/O, collapse-range and
// insert-range write back the range first.

// bufOps are the iomap ops of one inode's buffered I/O.
type bufOps struct {
	v *Volume
	n *inode
	f *File // an internal File of the inode, for the write-path helpers
}

func newBufOps(v *Volume, n *inode) *bufOps {
	return &bufOps{v: v, n: n, f: &File{v: v, n: n, ino: n.ino, name: fmt.Sprintf("<inode %d>", n.ino), in: n.in, m: n.m}}
}

func (o *bufOps) key() iomap.Key { return iomap.Key(o.n.ino) }

// Begin maps [off, off+length) for reads (flags 0), buffered writes (Write,
// reserving blocks for holes) and write-back (Writeback, allocating
// Delayed ranges).
func (o *bufOps) Begin(off, length int64, flags iomap.Flags) (iomap.Mapping, error) {
	if o.n.cstate.Load() == inoForgotten {
		// Ops handed out (File.BufferedOps) and driven after the inode
		// was freed or dropped: its number, and with it the page-cache
		// key, may belong to another inode now.
		return iomap.Mapping{}, fmt.Errorf("ext4io: inode %d: buffered I/O through the ops of a file closed since: %w", o.n.ino, ErrClosed)
	}
	f := o.f
	bs := int64(o.v.bs)
	lblk := uint64(off / bs)
	endBlk := min(uint64((off+length+bs-1)/bs), maxFileBlocks)
	if lblk >= endBlk {
		return iomap.Mapping{}, fmt.Errorf("ext4io: inode %d: mapping at %d past the largest file: %w", o.n.ino, off, ErrInvalid)
	}
	if flags&(iomap.Write|iomap.Writeback) != 0 {
		o.n.dataMu.Lock()
		defer o.n.dataMu.Unlock()
	}
	if flags&(iomap.Write|iomap.Writeback|iomap.Zero) == iomap.Write {
		// An append to the run of Delayed blocks the previous writes
		// made (delayrun.go): no lookup, no extent-status insert.
		if n, holeEnd := f.m.delayedAppendable(lblk, endBlk); n > 0 && o.v.alloc.Reserve(n) == nil {
			if err := f.m.appendDelayed(lblk, n, holeEnd); err != nil {
				o.v.alloc.Unreserve(n)
				return iomap.Mapping{}, err
			}
			o.n.delayed += n
			return iomap.Mapping{Offset: int64(lblk) * bs, Length: int64(n) * bs, Addr: iomap.NoAddr,
				Type: iomap.Delalloc, Flags: iomap.MapNew, Cookie: f.m.seq.Load()}, nil
		}
	}
	m, err := f.m.lookup(lblk)
	if err != nil {
		return iomap.Mapping{}, err
	}
	nblk := min(m.n, endBlk-lblk)
	out := iomap.Mapping{Offset: int64(lblk) * bs, Length: int64(nblk) * bs, Addr: iomap.NoAddr}
	switch {
	case m.kind == mapWritten:
		out.Type, out.Addr = iomap.Mapped, int64(m.pblk)*bs
	case m.kind == mapUnwritten:
		out.Type, out.Addr = iomap.Unwritten, int64(m.pblk)*bs
	case flags&iomap.Writeback != 0:
		// Delayed (or, defensively, a hole under a dirty page): allocate
		// now, contiguously near the previous block; End maps it.
		req := f.allocRequest(lblk, min(nblk, extent.MaxWrittenLen))
		if m.kind == mapDelayed {
			req.Flags = alloc.Delalloc
		}
		start, got, err := o.v.allocate(req)
		if err != nil {
			return iomap.Mapping{}, fmt.Errorf("ext4io: inode %d: allocating %d blocks for write-back at block %d: %w", o.n.ino, req.Max, lblk, err)
		}
		out.Type, out.Addr, out.Length, out.Flags = iomap.Mapped, int64(start)*bs, int64(got)*bs, iomap.MapNew
		if m.kind != mapDelayed {
			out.Flags |= iomap.MapDirty // not from a reservation (see End)
		}
	case m.kind == mapDelayed:
		out.Type = iomap.Delalloc
	case flags&iomap.Write != 0 && flags&iomap.Zero == 0:
		// A hole: reserve its blocks and make it Delayed. Near a full
		// volume, block by block, so the write gets as far as space allows.
		if err := o.v.alloc.Reserve(nblk); err != nil {
			if nblk == 1 || o.v.alloc.Reserve(1) != nil {
				return iomap.Mapping{}, fmt.Errorf("ext4io: inode %d: reserving %d blocks for a write at block %d: %w", o.n.ino, nblk, lblk, err)
			}
			nblk = 1
			out.Length = bs
		}
		if err := f.m.appendDelayed(lblk, nblk, lblk+m.n); err != nil {
			o.v.alloc.Unreserve(nblk)
			return iomap.Mapping{}, err
		}
		o.n.delayed += nblk
		out.Type, out.Flags = iomap.Delalloc, iomap.MapNew
	default:
		out.Type = iomap.Hole
	}
	out.Cookie = f.m.seq.Load()
	return out, nil
}

// Valid reports whether m, from Begin, still describes the file: no
// mapping change since (iomap.Validator; the validity cookie is the
// inode's extent change counter). Reads under the shared inode lock can
// race with write-back mapping delayed blocks.
func (o *bufOps) Valid(m iomap.Mapping) bool { return m.Cookie == o.f.m.seq.Load() }

// End releases the reservations of blocks a buffered write did not reach,
// and after write-back maps what reached the device.
func (o *bufOps) End(off, length, written int64, flags iomap.Flags, m iomap.Mapping) error {
	switch {
	case flags&iomap.Writeback != 0:
		return o.endWriteback(off, length, written, m)
	case flags&iomap.Write != 0 && m.Type == iomap.Delalloc && m.Flags&iomap.MapNew != 0:
		bs := int64(o.v.bs)
		from := (off + written + bs - 1) / bs
		if to := m.End() / bs; from < to {
			o.n.dataMu.Lock()
			o.dropDelayedLocked(uint64(from), uint64(to-from))
			o.n.dataMu.Unlock()
		}
	}
	return nil
}

// endWriteback finishes write-back of [off, off+length) through m, of
// which written bytes reached the device.
func (o *bufOps) endWriteback(off, length, written int64, m iomap.Mapping) error {
	f, n, bs := o.f, o.n, int64(o.v.bs)
	lblk := uint64(off / bs)
	wblk := uint64(written / bs)
	n.dataMu.Lock()
	defer n.dataMu.Unlock()
	var err error
	changed := false
	switch m.Type {
	case iomap.Mapped:
		if m.Flags&iomap.MapNew == 0 {
			break
		}
		start := uint64((m.Addr + (off - m.Offset)) / bs)
		got := uint64(m.Length-(off-m.Offset)) / uint64(bs)
		fromResv := m.Flags&iomap.MapDirty == 0
		if wblk > 0 {
			e := extent.Extent{Lblk: uint32(lblk), Len: uint32(wblk), Pblk: start}
			if err = f.m.tree.InsertMustSucceed(e); err != nil {
				// The data is on the device but unmapped: give the blocks
				// back; the pages stay dirty.
				o.v.alloc.Free(start, got)
				o.reReserve(got, fromResv)
				return err
			}
			if err = (treeAlloc{o.v, n}).addBlocks(int64(wblk)); err != nil {
				return err
			}
			if d, rerr := f.m.drop(uint32(lblk), uint32(wblk)); rerr == nil && fromResv {
				n.delayed -= min(n.delayed, d)
			}
			f.m.set(esc.Extent{Lblk: uint32(lblk), Len: uint32(wblk), Pblk: start, Status: esc.Written})
			o.v.stats.delalloc.Add(wblk)
			changed = true
		}
		if got > wblk {
			// Allocated but not written (a failed or short write-back).
			o.v.alloc.Free(start+wblk, got-wblk)
			o.reReserve(got-wblk, fromResv)
		}
	case iomap.Unwritten:
		if wblk > 0 {
			if err = f.convertExactLocked(lblk, wblk, uint64((m.Addr+(off-m.Offset))/bs)); err != nil {
				return err
			}
			changed = true
		}
	}
	if written > 0 {
		// i_disksize covers the data now on the device, up to i_size.
		if end := uint64(off + written); n.sizeAhead.Load() && end > n.disksize.Load() {
			n.coverLocked(end)
			changed = true
		}
	}
	if changed {
		err = o.v.writeInodeLocked(n)
	}
	return err
}

// reReserve puts back the reservation of n blocks allocated for Delayed
// ranges that were not mapped after all (they stay Delayed). If the space
// is gone meanwhile, the reservation is lost and counted, not the data:
// the pages stay dirty and the next write-back allocates without it.
func (o *bufOps) reReserve(n uint64, fromResv bool) {
	if !fromResv || n == 0 {
		return
	}
	if err := o.v.alloc.Reserve(n); err != nil {
		o.n.delayed -= min(o.n.delayed, n)
	}
}

// dropDelayedLocked forgets the Delayed blocks in [lblk, lblk+n) and
// releases their reservations. The caller holds n.mu exclusively or
// dataMu.
func (o *bufOps) dropDelayedLocked(lblk, n uint64) {
	if lblk >= maxFileBlocks {
		return
	}
	n = min(n, maxFileBlocks-lblk)
	d, err := o.f.m.drop(uint32(lblk), uint32(n))
	if err != nil || d == 0 {
		return
	}
	d = min(d, o.n.delayed)
	o.n.delayed -= d
	o.v.alloc.Unreserve(d)
}

// LockWriteback makes write-back of the inode one metadata operation with
// the inode lock held shared (see iomap.WritebackLocker).
func (o *bufOps) LockWriteback() (func(), error) {
	if err := o.v.failed(); err != nil {
		return nil, fmt.Errorf("%w after an earlier error: %w", ErrReadOnly, err)
	}
	if err := o.v.beginInternalOp(); err != nil {
		return nil, err
	}
	o.n.mu.RLock()
	if o.n.freed {
		// Deleted while this write-back waited for the lock: its pages
		// are gone (PageCache.Forget), so there is nothing to write.
		o.n.mu.RUnlock()
		o.v.endOp()
		return func() {}, nil
	}
	return func() {
		o.n.mu.RUnlock()
		o.v.endOp()
	}, nil
}

// writeBuffered is WriteAt through the page cache.
func (f *File) writeBuffered(p []byte, off int64) (int, error) {
	done := 0
	retried := false
	for spins := 0; ; {
		n, err := f.writeBufferedOnce(p[done:], off+int64(done))
		done += n
		if !retried && f.v.retryNoSpace(err) {
			retried = true // blocks freed by uncommitted transactions are back
			continue
		}
		if err == nil || !errors.Is(err, iomap.ErrCacheFull) {
			return done, err
		}
		// The cache is full of dirty pages: write the oldest back with no
		// lock held, then go on.
		wrote, werr := f.v.pc.WritebackOldest()
		if werr != nil {
			return done, werr
		}
		if wrote || n > 0 {
			spins = 0
			continue
		}
		// Every page is pinned by other readers and writers: let them go.
		if spins++; spins > 1000 {
			return done, fmt.Errorf("ext4io: inode %d: page cache stays full: %w", f.ino, err)
		}
		time.Sleep(time.Duration(spins) * 10 * time.Microsecond)
	}
}

func (f *File) writeBufferedOnce(p []byte, off int64) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n := f.n
	n.mu.Lock()
	defer n.mu.Unlock()
	// Checked under the inode lock, so that Close waits for the write (see
	// Volume.drainInodeWriters): once it has written the cache back, a
	// write into it would be lost.
	if f.v.closed.Load() {
		return 0, errVolumeClosed()
	}
	if err := f.closedLocked(); err != nil {
		return 0, err
	}
	f.v.stats.buffered.Add(1)
	n.mayCache.Store(true)
	size := int64(n.in.Size)
	k, err := iomap.BufferedWrite(f.v.pc, n.bops, n.bops.key(), p, off, size)
	if k > 0 {
		f.wroteBufferedLocked(off, k)
	}
	return k, err
}

// wroteBufferedLocked records k bytes copied into the page cache at off:
// the size grows in memory (the on-disk size stays until write-back) and
// the times change, stamped with the touch clock as a shared-lock direct
// write's are (touchclock.go): the clock is read once per epoch, not per
// write, and the time goes into the inode when it is next read or
// written (applyTouchLocked). The caller holds n.mu exclusively.
func (f *File) wroteBufferedLocked(off int64, k int) {
	n := f.n
	n.dataMu.Lock()
	if end := uint64(off) + uint64(k); end > n.in.Size {
		if !n.sizeAhead.Load() {
			n.disksize.Store(n.in.Size)
			n.sizeAhead.Store(true)
		}
		n.in.Size = end
	}
	f.v.touch.stamp(n)
	n.dirty = true
	n.dataMu.Unlock()
}

// readBuffered is ReadAt for a file with cached pages: cached pages are
// copied, the rest read from the device. The caller holds n.mu shared and
// has clamped p to the file size.
func (f *File) readBuffered(p []byte, off int64) (int, error) {
	return iomap.BufferedRead(f.v.pc, f.n.bops, f.n.bops.key(), p, off, int64(f.in.Size))
}

// mayHavePages reports whether the page cache may hold pages of the file
// (inode.mayCache); false lets direct I/O skip the cache's lock.
func (f *File) mayHavePages() bool { return f.n.bops != nil && f.n.mayCache.Load() }

// cached reports whether the file has pages in the page cache.
func (f *File) cached() bool { return f.mayHavePages() && f.v.pc.Cached(f.n.bops.key()) }

// flushCache writes back the file's dirty pages overlapping [off, end)
// (filemap_write_and_wait_range). The caller holds no lock and no
// operation.
func (f *File) flushCache(off, end int64) error {
	if !f.mayHavePages() {
		return nil // a buffered write racing in is caught by cacheCleanLocked
	}
	if err := f.v.pc.Writeback(f.n.bops.key(), off, end); err != nil {
		return fmt.Errorf("ext4io: inode %d: write-back: %w", f.ino, err)
	}
	return nil
}

// cacheCleanLocked reports whether [off, end) has no dirty pages (after
// flushCache, unless a buffered write raced in), and drops its clean
// pages. When the file has no dirty page at all, every page of it is
// dropped: a file written directly gains little from pages its earlier
// buffered writes left, and later direct I/O then skips the cache. The
// caller holds n.mu (shared or exclusive), so no buffered write adds
// pages meanwhile.
func (f *File) cacheCleanLocked(off, end int64) bool {
	if !f.mayHavePages() {
		return true
	}
	key := f.n.bops.key()
	if f.v.pc.DropClean(key) {
		f.n.mayCache.Store(false)
		return true
	}
	return f.v.pc.InvalidateClean(key, off, end)
}

// dropCacheLocked makes [off, off+length) of the cache read as zeroes for
// a truncate, punch or zero: cached bytes are zeroed, whole pages dropped
// and the reservations of Delayed blocks released. The caller holds n.mu
// exclusively (so no write-back of the file is running).
func (f *File) dropCacheLocked(off, length int64) {
	if f.n.bops == nil {
		return
	}
	end := off + length
	if length == math.MaxInt64-off || end > int64(maxFileBlocks)*int64(f.v.bs) {
		end = int64(maxFileBlocks) * int64(f.v.bs)
	}
	bs := int64(f.v.bs)
	first, last := (off+bs-1)/bs, end/bs
	if key := f.n.bops.key(); f.v.pc.Cached(key) {
		if first < last {
			// Whole pages are dropped; only the partial ones at either
			// end are zeroed in place.
			f.v.pc.ZeroCached(key, off, first*bs-off)
			f.v.pc.ZeroCached(key, last*bs, end-last*bs)
			f.v.pc.Invalidate(key, first*bs, last*bs)
		} else {
			f.v.pc.ZeroCached(key, off, end-off)
		}
	}
	if first < last && f.n.delayed > 0 {
		f.n.bops.dropDelayedLocked(uint64(first), uint64(last-first))
	}
}

// Datasync makes the file's data durable (fdatasync): dirty pages are
// written back and the metadata needed to read them (allocations,
// conversions, the size) committed, but a change of the inode's times
// alone is left for Sync, Close or the next commit. After direct
// overwrites it is one device flush, where Sync logs the inode and
// commits.
func (f *File) Datasync() error { return f.sync(false) }

// syncCache writes back the file's dirty pages (for Sync).
func (f *File) syncCache() error {
	if f.n.bops == nil {
		return nil
	}
	if err := f.v.pc.Writeback(f.n.bops.key(), 0, math.MaxInt64); err != nil {
		return &fs.PathError{Op: "sync", Path: f.name, Err: err}
	}
	return nil
}
