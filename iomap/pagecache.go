package iomap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/internal/errs"
)

// Key names a file in a PageCache, typically its inode number.
type Key uint64

// PageCacheOptions configure NewPageCache.
type PageCacheOptions struct {
	// PageSize is the page size in bytes, a power of two from 512 to
	// 64 KiB; default 4096. It must equal the filesystem block size: a page
	// is one block, and mappings used with the cache must start and end on
	// page boundaries (ext4 with blocksize == PAGE_SIZE).
	PageSize int
	// MaxPages bounds the number of cached pages; default 1024, minimum 1.
	MaxPages int
	// MaxRunBytes caps the size of one write-back WriteAt; default 1 MiB.
	MaxRunBytes int
	// NoInlineWriteback makes a cache that is full of dirty or pinned
	// pages fail the request with an error wrapping ErrCacheFull instead
	// of writing back or waiting inside it. Filesystems whose write-back
	// takes locks that their readers and writers hold (a journal handle
	// after an inode lock) set it, and on ErrCacheFull drop their locks,
	// call WritebackOldest (the kernel's balance_dirty_pages) and retry.
	NoInlineWriteback bool
	// NoReadCache makes BufferedRead copy cached pages but read pages
	// that are not cached straight from the device into the caller's
	// buffer (one device read per run of them) without caching them: the
	// cache then holds only pages that writes touched. Such reads hold no
	// page, so Invalidate does not wait for them: the filesystem must
	// exclude truncate and hole punching while they run (the inode lock).
	NoReadCache bool
}

// ErrCacheFull is returned (wrapped) by PageCache operations on a cache
// created with NoInlineWriteback when no page can be evicted.
var ErrCacheFull = errors.New("iomap: page cache full of dirty pages")

// PageCache is a bounded write-back cache of file pages over one device.
// It mirrors the part of the Linux page cache iomap's buffered I/O uses:
// pages are read in through mappings, dirtied by writes, and written back
// through Begin(Writeback) mappings. It is safe for concurrent use.
//
// Bound: at most MaxPages pages exist. A request for a page when the cache
// is full evicts the least recently used clean, unpinned page; if every
// unpinned page is dirty, the oldest one's contiguous dirty run is written
// back first (memory pressure); if every page is pinned, it waits.
//
// Locking: mu guards the page index, LRU list and each page's bookkeeping
// (dirty, wb, pins, cached). Each page's content lock (page.mu) guards its
// data and uptodate bit; it is taken only by a goroutine holding a pin,
// never while holding mu waits, and mu may be taken while holding it
// (order: page.mu → PageCache.mu). mu is never held across device I/O or
// calls into Ops. Ops must not call back into the PageCache.
type PageCache struct {
	dev      blockdev.Device // immutable
	pageSize int64           // immutable
	shift    uint            // immutable: log2(pageSize)
	maxPages int             // immutable
	maxRun   int             // immutable: pages per write-back WriteAt
	noInline bool            // immutable: NoInlineWriteback
	noRead   bool            // immutable: NoReadCache
	runPool  sync.Pool       // *[]byte of maxRun pages
	counters CounterSet      // Counters; ctr is its stripe 0
	ctr      *atomicCounters // immutable

	flusher struct {
		sync.Mutex
		stop chan struct{} // closed to stop the flusher; nil if none
		done chan struct{} // closed when the flusher exited
	}

	mu struct {
		sync.Mutex
		cond    sync.Cond // L = &mu.Mutex; broadcast when pins or wb drop and waiters > 0
		waiters int
		files   map[Key]*file
		npages  int
		lru     page // sentinel of the LRU ring: lru.next is most recent
		closed  bool
	}
}

// file is the per-file state. All fields are guarded by PageCache.mu.
type file struct {
	key         Key
	ops         Ops // from the last BufferedWrite/Read/ZeroRange; used by write-back
	pages       map[int64]*page
	ndirty      int
	dirtySince  int64 // unix nanoseconds when ndirty last became non-zero
	wbErr       error // sticky error of a background write-back, returned by the next Writeback
	inWriteback int   // pages of this file under write-back
}

type page struct {
	mu       sync.Mutex // content lock, held only with a pin
	data     []byte     // guarded by mu
	uptodate bool       // guarded by mu: data matches the file

	// Guarded by PageCache.mu.
	f          *file
	idx        int64
	dirty      bool
	wb         bool // under write-back (also pinned)
	cached     bool // uptodate was set at least once (for Present)
	pins       int
	prev, next *page
}

// NewPageCache returns an empty cache over dev.
func NewPageCache(dev blockdev.Device, opt PageCacheOptions) (*PageCache, error) {
	ps := opt.PageSize
	if ps == 0 {
		ps = 4096
	}
	if ps < 512 || ps > 64<<10 || ps&(ps-1) != 0 {
		return nil, fmt.Errorf("iomap: page size %d not a power of two in [512, 64K]: %w", ps, ErrInvalid)
	}
	if opt.MaxPages == 0 {
		opt.MaxPages = 1024
	}
	if opt.MaxPages < 1 {
		return nil, fmt.Errorf("iomap: max pages %d: %w", opt.MaxPages, ErrInvalid)
	}
	if opt.MaxRunBytes == 0 {
		opt.MaxRunBytes = 1 << 20
	}
	c := &PageCache{dev: dev, pageSize: int64(ps), maxPages: opt.MaxPages, maxRun: max(1, opt.MaxRunBytes/ps),
		noInline: opt.NoInlineWriteback, noRead: opt.NoReadCache}
	for int64(1)<<c.shift < c.pageSize {
		c.shift++
	}
	c.runPool.New = func() any { b := make([]byte, c.maxRun*ps); return &b }
	c.ctr = c.counters.first()
	c.mu.cond.L = &c.mu.Mutex
	c.mu.files = make(map[Key]*file)
	c.mu.lru.next, c.mu.lru.prev = &c.mu.lru, &c.mu.lru
	return c, nil
}

// Counters returns a snapshot of the cache's counters: the Begin and End
// calls of its operations (BufferedRead, BufferedWrite, ZeroRange and
// write-back), their device I/O and the pages it cached, evicted, wrote
// back and dropped.
func (c *PageCache) Counters() Counters { return c.counters.Read() }

// PageSize returns the page size in bytes.
func (c *PageCache) PageSize() int64 { return c.pageSize }

// Len returns the number of cached pages and how many of them are dirty.
func (c *PageCache) Len() (pages, dirty int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.mu.files {
		dirty += f.ndirty
	}
	return c.mu.npages, dirty
}

// lruRemoveLocked unlinks pg from the LRU ring.
func (c *PageCache) lruRemoveLocked(pg *page) {
	pg.prev.next, pg.next.prev = pg.next, pg.prev
	pg.prev, pg.next = nil, nil
}

// lruFrontLocked makes pg the most recently used page.
func (c *PageCache) lruFrontLocked(pg *page) {
	if pg.prev != nil {
		c.lruRemoveLocked(pg)
	}
	h := &c.mu.lru
	pg.next, pg.prev = h.next, h
	h.next.prev = pg
	h.next = pg
}

// fileLocked returns the file for key, creating it, and records ops.
func (c *PageCache) fileLocked(key Key, ops Ops) *file {
	f := c.mu.files[key]
	if f == nil {
		f = &file{key: key, pages: make(map[int64]*page)}
		c.mu.files[key] = f
	}
	if ops != nil {
		f.ops = ops
	}
	return f
}

func (c *PageCache) file(key Key, ops Ops) (*file, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return nil, fmt.Errorf("iomap: page cache: %w", ErrClosed)
	}
	return c.fileLocked(key, ops), nil
}

// lookup returns the cached page idx of f pinned, or nil.
func (c *PageCache) lookup(f *file, idx int64) *page {
	c.mu.Lock()
	defer c.mu.Unlock()
	pg := f.pages[idx]
	if pg != nil {
		pg.pins++
		c.lruFrontLocked(pg)
	}
	return pg
}

// get returns page idx of f pinned, inserting it (not uptodate) if absent
// and evicting or writing back to stay within the bound. The caller must
// hold no pins.
func (c *PageCache) get(f *file, idx int64) (*page, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if c.mu.closed {
			return nil, fmt.Errorf("iomap: page cache: %w", ErrClosed)
		}
		if pg := f.pages[idx]; pg != nil {
			pg.pins++
			c.lruFrontLocked(pg)
			return pg, nil
		}
		var data []byte
		if c.mu.npages >= c.maxPages {
			victim, dirty := c.victimLocked()
			switch {
			case victim == nil && c.noInline:
				return nil, fmt.Errorf("iomap: %d pages cached, none clean and unpinned: %w", c.mu.npages, ErrCacheFull)
			case victim != nil:
				data = victim.data
				c.dropLocked(victim)
				c.ctr.pagesEvicted.Add(1)
			case dirty != nil:
				// Memory pressure: write back the oldest dirty run, then retry.
				df, didx := dirty.f, dirty.idx
				c.mu.Unlock()
				c.ctr.evicWb.Add(1)
				err := c.writebackCluster(df, didx)
				c.mu.Lock()
				if err != nil {
					return nil, fmt.Errorf("iomap: write-back for eviction: %w", err)
				}
				continue
			default:
				c.mu.waiters++
				c.mu.cond.Wait()
				c.mu.waiters--
				continue
			}
		}
		if data == nil {
			data = make([]byte, c.pageSize)
		}
		pg := &page{data: data, f: f, idx: idx, pins: 1}
		f.pages[idx] = pg
		c.lruFrontLocked(pg)
		c.mu.npages++
		c.ctr.pagesCached.Add(1)
		return pg, nil
	}
}

// victimLocked returns the least recently used clean unpinned page, or
// failing that the least recently used unpinned dirty page not under
// write-back.
func (c *PageCache) victimLocked() (clean, dirty *page) {
	for pg := c.mu.lru.prev; pg != &c.mu.lru; pg = pg.prev {
		if pg.pins > 0 || pg.wb {
			continue
		}
		if !pg.dirty {
			return pg, nil
		}
		if dirty == nil {
			dirty = pg
		}
	}
	return nil, dirty
}

// dropLocked removes an unpinned page from the cache.
func (c *PageCache) dropLocked(pg *page) {
	delete(pg.f.pages, pg.idx)
	if pg.dirty {
		pg.f.ndirty--
		pg.dirty = false
	}
	c.lruRemoveLocked(pg)
	c.mu.npages--
}

// release unpins pg; if filled, the page is now uptodate; if dirty, it is
// marked dirty. The caller may still hold pg.mu.
func (c *PageCache) release(pg *page, filled, dirty bool) {
	c.mu.Lock()
	if filled {
		pg.cached = true
	}
	if dirty && !pg.dirty {
		pg.dirty = true
		if pg.f.ndirty++; pg.f.ndirty == 1 {
			pg.f.dirtySince = time.Now().UnixNano()
		}
	}
	pg.pins--
	if pg.pins == 0 && c.mu.waiters > 0 {
		c.mu.cond.Broadcast()
	}
	c.mu.Unlock()
}

// readInLocked fills pg (whose content lock is held) from mapping m, and
// zeroes the part at or beyond size. Mapped and Inline mappings must cover
// the page.
func (c *PageCache) readInLocked(pg *page, m Mapping, size int64) error {
	start := pg.idx << c.shift
	switch m.Type {
	case Mapped:
		if m.Flags&MapNew != 0 {
			clear(pg.data)
			break
		}
		if start < m.Offset || start+c.pageSize > m.End() {
			return fmt.Errorf("iomap: page [%d, +%d) not inside %v: %w", start, c.pageSize, m, ErrBadMapping)
		}
		c.ctr.devReads.Add(1)
		addr := m.Addr + (start - m.Offset)
		if _, err := c.dev.ReadAt(pg.data, addr); err != nil {
			return fmt.Errorf("iomap: reading page at file %d from device %d: %w", start, addr, err)
		}
	case Inline:
		if start < m.Offset {
			return fmt.Errorf("iomap: page at %d before inline %v: %w", start, m, ErrBadMapping)
		}
		clear(pg.data[copy(pg.data, m.InlineData[start-m.Offset:m.Length]):])
	default: // Hole, Unwritten, Delalloc read as zeroes
		clear(pg.data)
	}
	if size < start+c.pageSize {
		clear(pg.data[max(0, size-start):])
	}
	pg.uptodate = true
	return nil
}

// BufferedRead reads into p from file key at off through the cache
// (iomap_read_folio and filemap_read). Reads stop at size (the file size):
// a short read returns io.EOF. Cached pages are copied; missing pages over
// Mapped or Inline mappings from Begin(0) are read in and cached; missing
// pages over holes, unwritten and delalloc ranges read as zeroes without
// being cached.
func BufferedRead(c *PageCache, ops Ops, key Key, p []byte, off, size int64) (int, error) {
	if err := checkRange("buffered read", off, int64(len(p))); err != nil {
		return 0, err
	}
	if off >= size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := min(int64(len(p)), size-off)
	f, err := c.file(key, ops)
	if err != nil {
		return 0, err
	}
	v, _ := ops.(Validator)
	done, err := iter(ops, off, n, 0, c.ctr, func(m Mapping, pos, n int64) (int64, error) {
		var done int64
		// [runStart, runEnd) are uncached bytes of a Mapped mapping to be
		// read straight from the device (NoReadCache).
		runStart, runEnd := int64(-1), int64(-1)
		flushRun := func() error {
			if runStart < 0 {
				return nil
			}
			if v != nil && !v.Valid(m) {
				return ErrStale
			}
			if err := c.readDirect(p[runStart-off:runEnd-off], m, runStart); err != nil {
				return err
			}
			runStart, runEnd = -1, -1
			return nil
		}
		for done < n {
			idx := (pos + done) >> c.shift
			po := (pos + done) & (c.pageSize - 1)
			l := min(c.pageSize-po, n-done)
			dst := p[pos+done-off : pos+done-off+l]
			pg := c.lookup(f, idx)
			if pg == nil && c.noRead && m.Type == Mapped {
				if runStart < 0 {
					runStart = pos + done
				}
				runEnd = pos + done + l
				done += l
				continue
			}
			if err := flushRun(); err != nil {
				if pg != nil {
					c.release(pg, false, false)
				}
				return runStart - pos, err
			}
			if pg == nil && m.Type != Mapped && m.Type != Inline {
				if v != nil && !v.Valid(m) {
					return done, ErrStale
				}
				clear(dst)
				done += l
				continue
			}
			if pg == nil {
				if pg, err = c.get(f, idx); err != nil {
					return done, err
				}
			}
			pg.mu.Lock()
			filled := false
			if !pg.uptodate {
				if v != nil && !v.Valid(m) {
					pg.mu.Unlock()
					c.release(pg, false, false)
					return done, ErrStale
				}
				if err := c.readInLocked(pg, m, size); err != nil {
					pg.mu.Unlock()
					c.release(pg, false, false)
					return done, err
				}
				filled = true
			}
			copy(dst, pg.data[po:])
			pg.mu.Unlock()
			c.release(pg, filled, false)
			done += l
		}
		if err := flushRun(); err != nil {
			return runStart - pos, err
		}
		return done, nil
	})
	if err == nil && n < int64(len(p)) {
		err = io.EOF
	}
	return int(done), err
}

// readDirect reads dst, the file bytes at pos inside Mapped mapping m,
// from the device, for pages that are not cached (NoReadCache). Bytes past
// the file size are zeroed by the caller's size clamp (dst stops at size).
func (c *PageCache) readDirect(dst []byte, m Mapping, pos int64) error {
	if pos < m.Offset || pos+int64(len(dst)) > m.End() {
		return fmt.Errorf("iomap: read [%d, +%d) not inside %v: %w", pos, len(dst), m, ErrBadMapping)
	}
	c.ctr.devReads.Add(1)
	addr := m.Addr + (pos - m.Offset)
	if _, err := c.dev.ReadAt(dst, addr); err != nil {
		return fmt.Errorf("iomap: reading file %d from device %d: %w", pos, addr, err)
	}
	return nil
}

// BufferedWrite copies p into file key at off through the cache
// (iomap_file_buffered_write). For each mapping from Begin(Write) it reads
// in partially written pages that are not cached (from the device for
// Mapped, zeroes for Hole, Unwritten, Delalloc and New; bytes at or beyond
// size, the file size before the write, read as zeroes), copies the data,
// marks the pages dirty and calls End. The Ops decides what a write to a
// hole becomes (ext4: Delalloc after reserving blocks). If ops implements
// Validator, each page checks the mapping under its content lock and a
// stale mapping is looked up again. The caller updates the file size, and
// zeroes the tail of the old EOF block before extending (ZeroRange).
func BufferedWrite(c *PageCache, ops Ops, key Key, p []byte, off, size int64) (int, error) {
	return bufferedWrite(c, ops, key, p, off, int64(len(p)), size, Write)
}

// bufferedWrite writes p, or zeroes when p is nil, to [off, off+length).
func bufferedWrite(c *PageCache, ops Ops, key Key, p []byte, off, length, size int64, flags Flags) (int, error) {
	if err := checkRange("buffered write", off, length); err != nil {
		return 0, err
	}
	f, err := c.file(key, ops)
	if err != nil {
		return 0, err
	}
	v, _ := ops.(Validator)
	done, err := iter(ops, off, length, flags, c.ctr, func(m Mapping, pos, n int64) (int64, error) {
		if p == nil && (m.Type == Hole || m.Type == Unwritten) {
			// Zeroing: these read as zeroes already; zero only cached pages.
			c.zeroCached(f, pos, n)
			return n, nil
		}
		var done int64
		for done < n {
			idx := (pos + done) >> c.shift
			po := (pos + done) & (c.pageSize - 1)
			l := min(c.pageSize-po, n-done)
			pg, err := c.get(f, idx)
			if err != nil {
				return done, err
			}
			pg.mu.Lock()
			if v != nil && !v.Valid(m) {
				pg.mu.Unlock()
				c.release(pg, false, false)
				return done, ErrStale
			}
			filled := false
			if !pg.uptodate {
				if po != 0 || l != c.pageSize {
					if err := c.readInLocked(pg, m, size); err != nil {
						pg.mu.Unlock()
						c.release(pg, false, false)
						return done, err
					}
				}
				pg.uptodate, filled = true, true
			}
			if p == nil {
				clear(pg.data[po : po+l])
				c.ctr.zeroed.Add(l)
			} else {
				copy(pg.data[po:po+l], p[pos+done-off:])
			}
			pg.mu.Unlock()
			c.release(pg, filled, true)
			done += l
		}
		return done, nil
	})
	return int(done), err
}

// zeroCached zeroes the cached parts of [off, off+n) of f in place,
// leaving their dirty state alone.
func (c *PageCache) zeroCached(f *file, off, n int64) {
	if n <= 0 {
		return
	}
	end := off + n
	// Pin the cached pages of the range (visiting the file's pages, not
	// the range, which may be huge), then zero them one by one.
	lo, hi := off>>c.shift, pageCeil(end, c.shift)
	c.mu.Lock()
	var pages []*page
	c.rangeLocked(f, lo, hi, func(pg *page) bool {
		pg.pins++
		pages = append(pages, pg)
		return true
	})
	c.mu.Unlock()
	for _, pg := range pages {
		start := pg.idx << c.shift
		from, to := max(off, start)-start, min(end, start+c.pageSize)-start
		pg.mu.Lock()
		if pg.uptodate {
			clear(pg.data[from:to])
			c.ctr.zeroed.Add(to - from)
		}
		pg.mu.Unlock()
		c.release(pg, false, false)
	}
}

// ZeroRange makes [off, off+length) of file key read as zeroes
// (iomap_zero_range), mapping with Begin(Write|Zero): Hole and Unwritten
// ranges already read as zeroes and are skipped, except that cached pages
// there are zeroed in place; Mapped, Delalloc and Inline ranges are zeroed
// through the page cache (read in, cleared, dirtied) and reach the device
// at write-back. size is the file size, as for BufferedWrite. Whole-block
// device zeroing (ZeroOut) is left to the filesystem (fallocate
// write-zeroes), which also invalidates the cache over the range.
func ZeroRange(c *PageCache, ops Ops, key Key, off, length, size int64) error {
	_, err := bufferedWrite(c, ops, key, nil, off, length, size, Write|Zero)
	return err
}

// Writeback writes the dirty pages of file key in [from, to) to the device
// and waits for write-backs of that range already in flight, so that when
// it returns nil every page dirtied before the call is on the device
// (filemap_write_and_wait_range; the caller flushes the device for
// durability). Contiguous dirty pages go out with one WriteAt per mapping
// from Begin(Writeback) (at most MaxRunBytes each); End(Writeback) is
// called after each WriteAt with what reached the device: the Ops's
// end-of-writeback hook (convert unwritten, map delalloc, move the on-disk
// size). If ops implements WritebackBatcher, its hooks bracket each run.
// Failed pages stay dirty. It also returns, once, a failure of an earlier
// background or eviction write-back of the file.
func (c *PageCache) Writeback(key Key, from, to int64) error {
	c.mu.Lock()
	f := c.mu.files[key]
	c.mu.Unlock()
	if f == nil {
		return nil
	}
	err := c.writebackRange(f, from>>c.shift, pageCeil(to, c.shift))
	c.mu.Lock()
	old := f.wbErr
	f.wbErr = nil
	c.mu.Unlock()
	return errors.Join(err, old)
}

// Sync writes back every file (Writeback of the whole of each).
func (c *PageCache) Sync() error {
	return c.SyncContext(context.Background())
}

// syncChunk is how much of a file SyncContext writes back between checks
// of its context.
const syncChunk = 64 << 20

// SyncContext is Sync that stops when ctx is done, returning an error
// wrapping ctx.Err(). It checks ctx before each file and every syncChunk
// bytes of one: what was written back by then stays written back, the rest
// stays dirty.
func (c *PageCache) SyncContext(ctx context.Context) error {
	c.mu.Lock()
	keys := make([]Key, 0, len(c.mu.files))
	for k, f := range c.mu.files {
		if f.ndirty > 0 || f.wbErr != nil || f.inWriteback > 0 {
			keys = append(keys, k)
		}
	}
	c.mu.Unlock()
	var errs []error
	for _, k := range keys {
		c.mu.Lock()
		var dirty []int64
		if f := c.mu.files[k]; f != nil && ctx.Done() != nil { // a context that can end
			for idx, pg := range f.pages {
				if pg.dirty || pg.wb {
					dirty = append(dirty, idx)
				}
			}
		}
		c.mu.Unlock()
		slices.Sort(dirty)
		// The chunks holding dirty pages, then the whole file once more,
		// which also collects an earlier write-back error.
		for i := 0; i < len(dirty); {
			if err := ctx.Err(); err != nil {
				return errors.Join(append(errs, fmt.Errorf("iomap: sync cancelled: %w", err))...)
			}
			from := dirty[i] << c.shift / syncChunk * syncChunk
			errs = append(errs, c.Writeback(k, from, from+syncChunk))
			for i < len(dirty) && dirty[i]<<c.shift < from+syncChunk {
				i++
			}
		}
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, fmt.Errorf("iomap: sync cancelled: %w", err))...)
		}
		errs = append(errs, c.Writeback(k, 0, math.MaxInt64))
	}
	return errors.Join(errs...)
}

// WritebackBatcher is an optional interface of Ops used by write-back: one
// WritebackStart/WritebackFinish pair brackets the Begin/End calls of each
// contiguous dirty run (byte range [off, off+length)), so an Ops can map
// a whole run's delalloc blocks in one transaction. Finish gets the run's
// error, if any, and its error is returned too.
type WritebackBatcher interface {
	WritebackStart(off, length int64) error
	WritebackFinish(off, length, written int64, err error) error
}

func pageCeil(off int64, shift uint) int64 {
	if off > math.MaxInt64-(int64(1)<<shift) {
		return math.MaxInt64 >> shift
	}
	return (off + int64(1)<<shift - 1) >> shift
}

// writebackCluster writes back the contiguous dirty run around page idx,
// inside idx's run-aligned window (see runBreak).
func (c *PageCache) writebackCluster(f *file, idx int64) error {
	c.mu.Lock()
	base := idx - idx%int64(c.maxRun)
	lo, hi := idx, idx+1
	for lo > base {
		if pg := f.pages[lo-1]; pg != nil && pg.dirty {
			lo--
		} else {
			break
		}
	}
	for hi < base+int64(c.maxRun) {
		if pg := f.pages[hi]; pg != nil && pg.dirty {
			hi++
		} else {
			break
		}
	}
	c.mu.Unlock()
	return c.writebackRange(f, lo, hi)
}

// WritebackLocker is an optional interface of Ops: write-back of a file
// calls LockWriteback before it claims any of the file's pages and unlock
// once it has released them, so a filesystem can take the locks its
// write-back needs (a journal handle, then the inode lock shared) in its
// own lock order, never while holding pages that its lock holders wait
// for (truncate invalidating pages under the inode lock).
type WritebackLocker interface {
	LockWriteback() (unlock func(), err error)
}

// WritebackOldest writes back the contiguous dirty run around the least
// recently used dirty page that is not in use, for callers of a
// NoInlineWriteback cache that got ErrCacheFull; they must hold none of
// the locks write-back takes. It reports whether there was such a page;
// a write-back error is returned and also kept for the file's next
// Writeback.
func (c *PageCache) WritebackOldest() (bool, error) {
	c.mu.Lock()
	var dirty *page
	for pg := c.mu.lru.prev; pg != &c.mu.lru; pg = pg.prev {
		if pg.dirty && pg.pins == 0 && !pg.wb {
			dirty = pg
			break
		}
	}
	if dirty == nil {
		c.mu.Unlock()
		return false, nil
	}
	f, idx := dirty.f, dirty.idx
	c.mu.Unlock()
	c.ctr.evicWb.Add(1)
	err := c.writebackCluster(f, idx)
	if err != nil {
		c.mu.Lock()
		if f.wbErr == nil {
			f.wbErr = err
		}
		c.mu.Unlock()
	}
	return true, err
}

// ZeroCached zeroes the bytes of [off, off+n) of file key that are in
// cached pages, in place, leaving their dirty state alone (for truncate
// and hole punching, which zero the device copy themselves).
func (c *PageCache) ZeroCached(key Key, off, n int64) {
	c.mu.Lock()
	f := c.mu.files[key]
	c.mu.Unlock()
	if f != nil && n > 0 {
		c.zeroCached(f, off, n)
	}
}

// Dirty returns how many pages of file key overlapping [from, to) are
// dirty or under write-back.
func (c *PageCache) Dirty(key Key, from, to int64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.mu.files[key]
	if f == nil || f.ndirty == 0 && f.inWriteback == 0 {
		return 0
	}
	n := 0
	c.rangeLocked(f, from>>c.shift, pageCeil(to, c.shift), func(pg *page) bool {
		if pg.dirty || pg.wb {
			n++
		}
		return true
	})
	return n
}

// rangeLocked calls fn for each cached page of f with index in [lo, hi),
// in no particular order, until fn returns false. It visits the range or
// the file's pages, whichever is smaller, so small ranges of files with
// many cached pages stay cheap (direct I/O checks every write's range).
func (c *PageCache) rangeLocked(f *file, lo, hi int64, fn func(pg *page) bool) {
	if hi-lo <= int64(len(f.pages)) {
		for idx := lo; idx < hi; idx++ {
			if pg := f.pages[idx]; pg != nil && !fn(pg) {
				return
			}
		}
		return
	}
	for idx, pg := range f.pages {
		if idx >= lo && idx < hi && !fn(pg) {
			return
		}
	}
}

// InvalidateClean drops the cached pages of file key overlapping
// [from, to) if none of them is dirty or under write-back, and reports
// whether it did (false: the range has dirty data; nothing dropped). It
// waits for pages in use, like Invalidate. Direct I/O calls it after
// writing the range back.
func (c *PageCache) InvalidateClean(key Key, from, to int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.mu.files[key]
	if f == nil || len(f.pages) == 0 {
		return true
	}
	lo, hi := from>>c.shift, pageCeil(to, c.shift)
	clean := true
	c.rangeLocked(f, lo, hi, func(pg *page) bool {
		clean = !pg.dirty && !pg.wb
		return clean
	})
	if clean {
		c.invalidateLocked(f, lo, hi)
	}
	return clean
}

// DropClean drops every page of file key and reports true if none is
// dirty or under write-back; otherwise it drops nothing and reports false.
// The check costs O(1), so a direct-I/O path can call it on every write
// until it succeeds and then skip the cache for the file while its owner
// knows no page was added since. It waits for pages in use, like
// Invalidate.
func (c *PageCache) DropClean(key Key) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.mu.files[key]
	if f == nil {
		return true
	}
	if f.ndirty > 0 || f.inWriteback > 0 {
		return false
	}
	c.invalidateLocked(f, 0, math.MaxInt64)
	return true
}

// Cached reports whether file key has any page in the cache.
func (c *PageCache) Cached(key Key) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.mu.files[key]
	return f != nil && len(f.pages) > 0
}

// writebackRange writes back the dirty pages of f with index in [lo, hi).
func (c *PageCache) writebackRange(f *file, lo, hi int64) error {
	c.mu.Lock()
	ops := f.ops
	idle := f.ndirty == 0 && f.inWriteback == 0
	c.mu.Unlock()
	if idle {
		return nil // nothing to write or wait for: no locks taken
	}
	if l, ok := ops.(WritebackLocker); ok {
		unlock, err := l.LockWriteback()
		if err != nil {
			return fmt.Errorf("iomap: write-back of file %d: %w", f.key, err)
		}
		defer unlock()
	}
	c.mu.Lock()
	var idxs []int64
	for {
		busy := false
		idxs = idxs[:0]
		c.rangeLocked(f, lo, hi, func(pg *page) bool {
			if pg.wb {
				busy = true
				return false
			}
			if pg.dirty {
				idxs = append(idxs, pg.idx)
			}
			return true
		})
		if !busy {
			break
		}
		c.mu.waiters++
		c.mu.cond.Wait()
		c.mu.waiters--
	}
	slices.Sort(idxs)
	// Claim every page at once; runs are written one after the other.
	var pages []*page
	for _, idx := range idxs {
		pg := f.pages[idx]
		pg.wb = true
		pg.pins++
		pages = append(pages, pg)
	}
	f.inWriteback += len(pages)
	c.mu.Unlock()

	var errs []error
	for i := 0; i < len(pages); {
		j := i + 1
		for j < len(pages) && !c.runBreak(pages[j].idx) && pages[j].idx == pages[j-1].idx+1 {
			j++
		}
		if err := c.writeRun(f, ops, pages[i:j]); err != nil {
			errs = append(errs, err)
		}
		i = j
	}
	c.mu.Lock()
	for _, pg := range pages {
		pg.wb = false
		pg.pins--
	}
	f.inWriteback -= len(pages)
	if c.mu.waiters > 0 {
		c.mu.cond.Broadcast()
	}
	c.mu.Unlock()
	return errors.Join(errs...)
}

// runBreak reports whether a write-back run must end before page idx:
// runs are cut at multiples of maxRun pages of the file, so a file whose
// blocks lie at one offset modulo maxRun pages writes the device in
// aligned runs (see ext4io's allocRequest), whose pages a host holding
// the device in its page cache can keep in large folios.
func (c *PageCache) runBreak(idx int64) bool { return idx%int64(c.maxRun) == 0 }

// writeRun writes consecutive claimed pages with one WriteAt per mapping.
func (c *PageCache) writeRun(f *file, ops Ops, pages []*page) error {
	off := pages[0].idx << c.shift
	length := int64(len(pages)) << c.shift
	bp := c.runPool.Get().(*[]byte)
	defer c.runPool.Put(bp)
	buf := (*bp)[:length]
	for i, pg := range pages {
		pg.mu.Lock()
		copy(buf[int64(i)<<c.shift:], pg.data)
		c.mu.Lock()
		if pg.dirty {
			pg.dirty = false
			f.ndirty--
		}
		c.mu.Unlock()
		pg.mu.Unlock()
	}
	if ops == nil {
		return c.redirty(f, pages, fmt.Errorf("iomap: write-back of file %d without ops: %w", f.key, ErrInvalid))
	}
	b, _ := ops.(WritebackBatcher)
	if b != nil {
		if err := b.WritebackStart(off, length); err != nil {
			return c.redirty(f, pages, fmt.Errorf("iomap: write-back start [%d, +%d): %w", off, length, err))
		}
	}
	done, err := iter(ops, off, length, Writeback, c.ctr, func(m Mapping, pos, n int64) (int64, error) {
		src := buf[pos-off : pos-off+n]
		switch m.Type {
		case Mapped, Unwritten:
			addr := m.Addr + (pos - m.Offset)
			c.ctr.devWrites.Add(1)
			if _, err := c.dev.WriteAt(src, addr); err != nil {
				return 0, fmt.Errorf("iomap: write-back of file %d [%d, +%d) at device %d: %w", f.key, pos, n, addr, err)
			}
		case Inline:
			copy(m.InlineData[pos-m.Offset:m.Length], src)
		default:
			return 0, fmt.Errorf("iomap: write-back at %d got %v mapping (Begin must allocate): %w", pos, m.Type, ErrBadMapping)
		}
		return n, nil
	})
	if b != nil {
		if ferr := b.WritebackFinish(off, length, done, err); ferr != nil {
			err = errors.Join(err, fmt.Errorf("iomap: write-back finish [%d, +%d): %w", off, length, ferr))
		}
	}
	written := int(done >> c.shift)
	c.ctr.pagesWritten.Add(int64(written))
	if err != nil {
		return c.redirty(f, pages[written:], err)
	}
	return nil
}

// redirty marks pages dirty again after a failed write-back and returns err.
func (c *PageCache) redirty(f *file, pages []*page, err error) error {
	c.mu.Lock()
	for _, pg := range pages {
		if !pg.dirty {
			pg.dirty = true
			if f.ndirty++; f.ndirty == 1 {
				f.dirtySince = time.Now().UnixNano()
			}
		}
	}
	c.mu.Unlock()
	return err
}

// Invalidate drops every cached page of file key overlapping [from, to),
// dirty or not, waiting for pages in use (invalidate_inode_pages2_range).
// Partially covered pages are dropped whole: callers write back first
// (before direct I/O) or zero the partial blocks first (truncate, punch).
// Use to = math.MaxInt64 for "to the end".
func (c *PageCache) Invalidate(key Key, from, to int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.mu.files[key]; f != nil {
		c.invalidateLocked(f, from>>c.shift, pageCeil(to, c.shift))
	}
}

func (c *PageCache) invalidateLocked(f *file, lo, hi int64) {
	for {
		busy := false
		var victims []*page
		c.rangeLocked(f, lo, hi, func(pg *page) bool {
			if pg.pins > 0 {
				busy = true
				return false
			}
			victims = append(victims, pg)
			return true
		})
		if !busy {
			for _, pg := range victims {
				c.dropLocked(pg)
			}
			c.ctr.pagesInval.Add(int64(len(victims)))
			if len(victims) > 0 && c.mu.waiters > 0 {
				c.mu.cond.Broadcast()
			}
			return
		}
		c.mu.waiters++
		c.mu.cond.Wait()
		c.mu.waiters--
	}
}

// Forget drops every page of file key, dirty or not, and its state,
// including a pending write-back error (for a deleted or closed file).
func (c *PageCache) Forget(key Key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.mu.files[key]; f != nil {
		c.invalidateLocked(f, 0, math.MaxInt64)
		delete(c.mu.files, key)
	}
}

// Present returns a hook for SeekOptions.Present reporting whether the
// page holding a file offset is cached with data (uptodate or dirty).
func (c *PageCache) Present(key Key) func(off int64) bool {
	return func(off int64) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		f := c.mu.files[key]
		if f == nil {
			return false
		}
		pg := f.pages[off>>c.shift]
		return pg != nil && (pg.cached || pg.dirty)
	}
}

// StartFlusher starts a background goroutine that every interval writes
// back files with pages dirty for longer than age (the kernel's
// dirty_expire_centisecs flusher). Errors are kept per file and returned by
// the next Writeback. Close stops it; starting a second one is an error.
func (c *PageCache) StartFlusher(interval, age time.Duration) error {
	if interval <= 0 || age < 0 {
		return fmt.Errorf("iomap: flusher interval %v age %v: %w", interval, age, ErrInvalid)
	}
	c.flusher.Lock()
	defer c.flusher.Unlock()
	if c.flusher.stop != nil {
		return fmt.Errorf("iomap: flusher already running: %w", ErrInvalid)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	c.flusher.stop, c.flusher.done = stop, done
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				c.flushOld(now.Add(-age).UnixNano())
			}
		}
	}()
	return nil
}

// flushOld writes back files dirty since before cutoff (unix nanoseconds).
func (c *PageCache) flushOld(cutoff int64) {
	c.mu.Lock()
	var old []*file
	for _, f := range c.mu.files {
		if f.ndirty > 0 && f.dirtySince <= cutoff {
			old = append(old, f)
		}
	}
	c.mu.Unlock()
	for _, f := range old {
		err := c.writebackRange(f, 0, math.MaxInt64>>c.shift)
		c.mu.Lock()
		if err != nil && f.wbErr == nil {
			f.wbErr = err
		}
		if f.ndirty > 0 {
			f.dirtySince = time.Now().UnixNano()
		}
		c.mu.Unlock()
	}
}

// StopFlusher stops the background flusher, if any, and waits for it.
func (c *PageCache) StopFlusher() {
	c.flusher.Lock()
	defer c.flusher.Unlock()
	if c.flusher.stop != nil {
		close(c.flusher.stop)
		<-c.flusher.done
		c.flusher.stop, c.flusher.done = nil, nil
	}
}

// Close stops the flusher and drops every page; dirty data not written
// back is lost (call Sync first). Later calls fail with ErrClosed.
func (c *PageCache) Close() error {
	c.StopFlusher()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return fmt.Errorf("iomap: page cache: %w", errs.ErrClosed)
	}
	for _, f := range c.mu.files {
		c.invalidateLocked(f, 0, math.MaxInt64)
	}
	c.mu.files = nil
	c.mu.closed = true
	return nil
}
