package iomap

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

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
	// MaxRunBytes caps the size of one write-back device write; default
	// 1 MiB.
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
// Bound: at most MaxPages pages exist, counted by one atomic counter. A
// request for a page when the cache is full evicts the least recently
// used clean, unpinned page of its file's shard, failing that of another
// shard; if every unpinned page is dirty, the dirty pages of the oldest
// one's run-aligned window (its shard's first) are written back first
// (memory pressure); if every page is pinned, it waits. Each shard keeps
// its clean and its dirty pages in two LRU rings, so neither search walks
// the other kind, and dropped pages (struct and buffer) are reused for new
// ones.
//
// Shards: files are spread over numShards shards by their Key, so that
// I/O on different files does not contend on one mutex. Each shard's mu
// guards its file index, LRU rings and the bookkeeping of its files'
// pages (dirty, wb, pins, cached). Each page's content lock (page.mu)
// guards its data and uptodate bit; it is taken only by a goroutine
// holding a pin, never while holding a shard's mu, and a shard's mu may be
// taken while holding it. No goroutine holds two shards' mu at once:
// eviction from another shard and Sync, WritebackOldest, Len and Close
// lock the shards one after another. space.mu, for waiting until some
// page can be evicted, is a leaf. Lock order:
//
//	page.mu → shard.mu → space.mu
//
// No shard's mu is held across device I/O or calls into Ops; page.mu is
// held across device I/O only by write-back on a blockdev.VectorWriter,
// which holds the content locks of the pages of one device write while
// the device takes them from the pages themselves (writeRun); it is the
// only holder of more than one page.mu, and its pages are claimed for it
// (wb), so no other such holder waits for them. Ops must not call back
// into the PageCache.
type PageCache struct {
	dev      blockdev.Device // immutable
	pageSize int64           // immutable
	shift    uint            // immutable: log2(pageSize)
	maxPages int64           // immutable
	maxRun   int             // immutable: pages per write-back WriteAt
	noInline bool            // immutable: NoInlineWriteback
	noRead   bool            // immutable: NoReadCache
	runPool  sync.Pool       // *runBuf
	pagePool sync.Pool       // *page dropped from the cache, for newPage
	counters CounterSet      // Counters; each shard counts on a stripe
	ctr      *atomicCounters // immutable: stripe 0, for what has no file

	// npages counts the cached pages plus the slots reserved by get for
	// pages about to be inserted; it never exceeds maxPages (I3). It is
	// changed only by compare-and-swap up to maxPages (reserve) and by
	// freeing a slot (unreserve); an evicted page hands its slot to the
	// page that replaces it.
	npages atomic.Int64
	closed atomic.Bool // Close was called (each shard also has its own flag)

	// space lets get wait, when every page is pinned, until a pin drops
	// or a slot is freed: waiters counts the goroutines that will wait,
	// and gen is bumped, with a broadcast, by wakeSpace when waiters > 0.
	space struct {
		sync.Mutex
		cond    sync.Cond // L = &space.Mutex
		waiters atomic.Int32
		gen     atomic.Uint64
	}

	flusher struct {
		sync.Mutex
		stop chan struct{} // closed to stop the flusher; nil if none
		done chan struct{} // closed when the flusher exited
	}

	shards [numShards]shard
}

// numShards is the number of PageCache shards, a power of two.
const (
	shardBits = 5
	numShards = 1 << shardBits
)

// shard is the part of a PageCache holding the files whose keys shardOf
// maps to it, padded to whole cache lines.
type shard struct {
	shardState
	_ [(128 - unsafe.Sizeof(shardState{})%128) % 128]byte
}

type shardState struct {
	ctr *atomicCounters // immutable: the counter stripe of this shard
	idx int             // immutable: index in PageCache.shards

	mu struct {
		sync.Mutex
		cond     sync.Cond // L = &mu.Mutex; broadcast when pins or wb of this shard's pages drop or its pages leave, and waiters > 0
		waiters  int
		files    map[Key]*file
		npages   int  // pages in this shard
		lru      page // sentinel of the LRU ring of clean pages: lru.next is most recent
		dirtyLRU page // sentinel of the LRU ring of dirty pages
		closed   bool
	}
}

// shardOf returns the shard of file key. Keys are mixed with a
// multiply-shift (Fibonacci hashing), which spreads consecutive keys,
// such as inode numbers, evenly over the shards and costs one multiply
// (docs/performance.md compares it with xxhash).
func (c *PageCache) shardOf(key Key) *shard {
	return &c.shards[uint64(key)*0x9E3779B97F4A7C15>>(64-shardBits)]
}

// file is the per-file state. key and s are immutable; the other fields
// are guarded by s.mu.
type file struct {
	key         Key
	s           *shard
	ops         Ops // from the last BufferedWrite/Read/ZeroRange; used by write-back
	pages       pageIndex
	ndirty      int
	dirtySince  int64 // unix nanoseconds when ndirty last became non-zero
	wbErr       error // sticky error of a background write-back, returned by the next Writeback
	inWriteback int   // pages of this file under write-back
}

type page struct {
	mu       sync.Mutex // content lock, held only with a pin
	data     []byte     // guarded by mu
	uptodate bool       // guarded by mu: data matches the file

	// Guarded by f.s.mu. f and idx do not change while the page is in
	// the cache, so a pin holder reads them without the lock; a dropped
	// page (no pins) is reused for another file and index (newPage).
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
	c := &PageCache{dev: dev, pageSize: int64(ps), maxPages: int64(opt.MaxPages), maxRun: max(1, opt.MaxRunBytes/ps),
		noInline: opt.NoInlineWriteback, noRead: opt.NoReadCache}
	for int64(1)<<c.shift < c.pageSize {
		c.shift++
	}
	c.runPool.New = func() any { return &runBuf{vecs: make([][]byte, 0, c.maxRun)} }
	c.ctr = c.counters.first()
	c.space.cond.L = &c.space.Mutex
	for i := range c.shards {
		s := &c.shards[i]
		s.idx = i
		s.ctr = &c.counters.stripes[i%len(c.counters.stripes)].atomicCounters
		s.mu.cond.L = &s.mu.Mutex
		s.mu.files = make(map[Key]*file)
		s.mu.lru.next, s.mu.lru.prev = &s.mu.lru, &s.mu.lru
		s.mu.dirtyLRU.next, s.mu.dirtyLRU.prev = &s.mu.dirtyLRU, &s.mu.dirtyLRU
	}
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
// pages is the count held against MaxPages, which also counts a page
// that a concurrent call is about to insert; dirty is summed over the
// shards one after another. Both are exact when the cache is idle.
func (c *PageCache) Len() (pages, dirty int) {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		for _, f := range s.mu.files {
			dirty += f.ndirty
		}
		s.mu.Unlock()
	}
	return int(c.npages.Load()), dirty
}

// reserve takes a slot of the page budget, reporting false if the cache
// is full.
func (c *PageCache) reserve() bool {
	for {
		n := c.npages.Load()
		if n >= c.maxPages {
			return false
		}
		if c.npages.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// unreserve frees n slots of the page budget.
func (c *PageCache) unreserve(n int) {
	if n > 0 {
		c.npages.Add(int64(-n))
		c.wakeSpace()
	}
}

// wakeSpace wakes the goroutines waiting in get for a page to become
// evictable, if any. Callers call it after unpinning a page or freeing a
// slot; they may hold a shard's mu.
func (c *PageCache) wakeSpace() {
	if c.space.waiters.Load() == 0 {
		return
	}
	c.space.Lock()
	c.space.gen.Add(1)
	c.space.cond.Broadcast()
	c.space.Unlock()
}

// lruRemoveLocked unlinks pg from its shard's LRU ring.
func lruRemoveLocked(pg *page) {
	pg.prev.next, pg.next.prev = pg.next, pg.prev
	pg.prev, pg.next = nil, nil
}

// lruFrontLocked makes pg the most recently used page of its ring in
// shard s: the dirty ring if pg.dirty, else the clean one. Callers that
// change pg.dirty call it to move the page to its ring, so eviction finds
// a clean page, and write-back the oldest dirty one, without walking the
// other kind.
func (s *shard) lruFrontLocked(pg *page) {
	if pg.prev != nil {
		lruRemoveLocked(pg)
	}
	h := &s.mu.lru
	if pg.dirty {
		h = &s.mu.dirtyLRU
	}
	pg.next, pg.prev = h.next, h
	h.next.prev = pg
	h.next = pg
}

// fileLocked returns the file for key, creating it, and records ops as
// its write-back ops if it has none: the first caller's until Forget or
// ForgetUnused drops the file, so that a caller holding the ops of a file
// deleted since (whose key a new file took) cannot make the new file's
// pages go out through them.
func (s *shard) fileLocked(key Key, ops Ops) *file {
	f := s.mu.files[key]
	if f == nil {
		f = &file{key: key, s: s}
		s.mu.files[key] = f
	}
	if ops != nil && f.ops == nil {
		f.ops = ops
	}
	return f
}

func (c *PageCache) file(key Key, ops Ops) (*file, error) {
	s := c.shardOf(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil, fmt.Errorf("iomap: page cache: %w", ErrClosed)
	}
	return s.fileLocked(key, ops), nil
}

// lookup returns the cached page idx of f pinned, or nil.
func (c *PageCache) lookup(f *file, idx int64) *page {
	s := f.s
	s.mu.Lock()
	defer s.mu.Unlock()
	pg := f.pages.get(idx)
	if pg != nil {
		pg.pins++
		s.lruFrontLocked(pg)
	}
	return pg
}

// get returns page idx of f pinned, inserting it (not uptodate) if absent
// and evicting or writing back to stay within the bound. The caller must
// hold no pins.
func (c *PageCache) get(f *file, idx int64) (*page, error) {
	s := f.s
	reserved := false // this call holds one slot of c.npages
	var reuse *page   // an evicted page, recycled for the new one
	s.mu.Lock()
	for {
		if s.mu.closed || c.closed.Load() {
			s.mu.Unlock()
			if reserved {
				c.unreserve(1)
			}
			c.freePage(reuse)
			return nil, fmt.Errorf("iomap: page cache: %w", ErrClosed)
		}
		if pg := f.pages.get(idx); pg != nil {
			pg.pins++
			s.lruFrontLocked(pg)
			s.mu.Unlock()
			if reserved {
				c.unreserve(1)
			}
			c.freePage(reuse)
			return pg, nil
		}
		if !reserved {
			reserved = c.reserve()
		}
		if !reserved {
			// Full: take the slot of this shard's LRU clean page.
			victim, df, didx := s.victimLocked()
			if victim != nil {
				s.dropLocked(victim)
				s.ctr.pagesEvicted.Add(1)
				reuse, reserved = victim, true
			} else {
				s.mu.Unlock()
				var err error
				if reserved, reuse, err = c.evictElsewhere(s, df, didx); err != nil {
					return nil, err
				}
				s.mu.Lock()
				continue // the page may have been inserted meanwhile
			}
		}
		pg := c.newPage(reuse, f, idx)
		f.pages.set(idx, pg)
		s.lruFrontLocked(pg)
		s.mu.npages++
		s.ctr.pagesCached.Add(1)
		s.mu.Unlock()
		return pg, nil
	}
}

// evictElsewhere is get's path for a full cache whose shard own has no
// clean unpinned page; df and didx name own's LRU unpinned dirty page, if
// any (df nil if none). It holds no shard's mu on entry or return. It
// evicts the LRU clean page of another shard and returns its slot
// (reserved) and the page, dropped, for reuse; failing that it writes
// back a dirty run (own's first), or waits until a pin drops or a slot is
// freed, and returns reserved false: the caller tries again.
func (c *PageCache) evictElsewhere(own *shard, df *file, didx int64) (reserved bool, victim *page, err error) {
	for waiting := false; ; waiting = true {
		var gen uint64
		if waiting {
			// Register before the last scan, so that a pin dropped after
			// it wakes us (wakeSpace sees waiters > 0).
			c.space.waiters.Add(1)
			gen = c.space.gen.Load()
		}
		for i := range c.shards {
			t := &c.shards[(own.idx+1+i)%numShards]
			t.mu.Lock()
			if t.mu.closed {
				t.mu.Unlock()
				continue
			}
			v, f, idx := t.victimLocked()
			if v != nil {
				t.dropLocked(v)
				t.ctr.pagesEvicted.Add(1)
				t.mu.Unlock()
				if waiting {
					c.space.waiters.Add(-1)
				}
				return true, v, nil // v's slot
			}
			if df == nil && f != nil {
				df, didx = f, idx
			}
			t.mu.Unlock()
		}
		if c.reserve() { // a slot was freed meanwhile
			if waiting {
				c.space.waiters.Add(-1)
			}
			return true, nil, nil
		}
		switch {
		case c.noInline:
			if waiting {
				c.space.waiters.Add(-1)
			}
			return false, nil, fmt.Errorf("iomap: %d pages cached, none clean and unpinned: %w", c.npages.Load(), ErrCacheFull)
		case df != nil:
			// Memory pressure: write back the oldest dirty run, then retry.
			if waiting {
				c.space.waiters.Add(-1)
			}
			own.ctr.evicWb.Add(1)
			if err := c.writebackCluster(df, didx); err != nil {
				return false, nil, fmt.Errorf("iomap: write-back for eviction: %w", err)
			}
			return false, nil, nil
		case waiting:
			// Every page is pinned: wait for a pin to drop or a slot to
			// be freed, or for Close.
			c.space.Lock()
			for c.space.gen.Load() == gen && !c.closed.Load() {
				c.space.cond.Wait()
			}
			c.space.Unlock()
			c.space.waiters.Add(-1)
			return false, nil, nil
		}
	}
}

// victimLocked returns the least recently used clean unpinned page of s,
// or failing that the file and index of its least recently used unpinned
// dirty page not under write-back (df nil if none). Pages are recycled
// once dropped, so the dirty page is named by file and index, which stay
// meaningful after s.mu is released.
func (s *shard) victimLocked() (clean *page, df *file, didx int64) {
	for pg := s.mu.lru.prev; pg != &s.mu.lru; pg = pg.prev {
		if pg.pins == 0 && !pg.wb {
			return pg, nil, 0
		}
	}
	if pg := s.oldestDirtyLocked(); pg != nil {
		return nil, pg.f, pg.idx
	}
	return nil, nil, 0
}

// oldestDirtyLocked returns the least recently used dirty page of s that
// is neither pinned nor under write-back, or nil.
func (s *shard) oldestDirtyLocked() *page {
	for pg := s.mu.dirtyLRU.prev; pg != &s.mu.dirtyLRU; pg = pg.prev {
		if pg.pins == 0 && !pg.wb {
			return pg
		}
	}
	return nil
}

// newPage returns a page for index idx of f, pinned once and not
// uptodate: reuse (a dropped page) if not nil, else one from the free
// pool, else a new one. A reused page's data holds stale bytes; callers
// fill or overwrite the whole page before marking it uptodate.
func (c *PageCache) newPage(reuse *page, f *file, idx int64) *page {
	pg := reuse
	if pg == nil {
		pg, _ = c.pagePool.Get().(*page)
	}
	if pg == nil {
		return &page{data: make([]byte, c.pageSize), f: f, idx: idx, pins: 1}
	}
	pg.uptodate, pg.dirty, pg.wb, pg.cached = false, false, false, false
	pg.f, pg.idx, pg.pins = f, idx, 1
	return pg
}

// freePage keeps pg, dropped from the cache, for reuse by newPage. pg
// may be nil.
func (c *PageCache) freePage(pg *page) {
	if pg != nil {
		pg.f = nil
		c.pagePool.Put(pg)
	}
}

// dropLocked removes an unpinned page from shard s, leaving its slot of
// the page budget to the caller (unreserve, or a page replacing it).
func (s *shard) dropLocked(pg *page) {
	pg.f.pages.del(pg.idx)
	if pg.dirty {
		pg.f.ndirty--
		pg.dirty = false
	}
	lruRemoveLocked(pg)
	s.mu.npages--
}

// setDirtyLocked marks pg dirty and moves it to the dirty ring.
func (s *shard) setDirtyLocked(pg *page) {
	if pg.dirty {
		return
	}
	pg.dirty = true
	if pg.f.ndirty++; pg.f.ndirty == 1 {
		pg.f.dirtySince = time.Now().UnixNano()
	}
	if pg.prev != nil {
		s.lruFrontLocked(pg)
	}
}

// release unpins pg; if filled, the page is now uptodate; if dirty, it is
// marked dirty. The caller may still hold pg.mu.
func (c *PageCache) release(pg *page, filled, dirty bool) {
	s := pg.f.s
	s.mu.Lock()
	if filled {
		pg.cached = true
	}
	if dirty {
		s.setDirtyLocked(pg)
	}
	pg.pins--
	unpinned := pg.pins == 0
	if unpinned && s.mu.waiters > 0 {
		s.mu.cond.Broadcast()
	}
	s.mu.Unlock()
	if unpinned {
		c.wakeSpace()
	}
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
		pg.f.s.ctr.devReads.Add(1)
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
	done, err := iter(ops, off, n, 0, f.s.ctr, func(m Mapping, pos, n int64) (int64, error) {
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
			if err := c.readDirect(f.s.ctr, p[runStart-off:runEnd-off], m, runStart); err != nil {
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
func (c *PageCache) readDirect(ctr *atomicCounters, dst []byte, m Mapping, pos int64) error {
	if pos < m.Offset || pos+int64(len(dst)) > m.End() {
		return fmt.Errorf("iomap: read [%d, +%d) not inside %v: %w", pos, len(dst), m, ErrBadMapping)
	}
	ctr.devReads.Add(1)
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
	done, err := iter(ops, off, length, flags, f.s.ctr, func(m Mapping, pos, n int64) (int64, error) {
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
				f.s.ctr.zeroed.Add(l)
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
	f.s.mu.Lock()
	var pages []*page
	rangeLocked(f, lo, hi, func(pg *page) bool {
		pg.pins++
		pages = append(pages, pg)
		return true
	})
	f.s.mu.Unlock()
	for _, pg := range pages {
		start := pg.idx << c.shift
		from, to := max(off, start)-start, min(end, start+c.pageSize)-start
		pg.mu.Lock()
		if pg.uptodate {
			clear(pg.data[from:to])
			f.s.ctr.zeroed.Add(to - from)
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
// durability). Contiguous dirty pages go out with one device write per
// mapping from Begin(Writeback) (at most MaxRunBytes each): a WriteVAt of
// the pages themselves when the device is a blockdev.VectorWriter, else a
// WriteAt of a copy. End(Writeback) is called after each write with what
// reached the device: the Ops's end-of-writeback hook (convert unwritten,
// map delalloc, move the on-disk size). If ops implements
// WritebackBatcher, its hooks bracket each run. Failed pages stay dirty.
// It also returns, once, a failure of an earlier background or eviction
// write-back of the file.
func (c *PageCache) Writeback(key Key, from, to int64) error {
	s := c.shardOf(key)
	s.mu.Lock()
	f := s.mu.files[key]
	s.mu.Unlock()
	if f == nil {
		return nil
	}
	err := c.writebackRange(f, from>>c.shift, pageCeil(to, c.shift))
	s.mu.Lock()
	old := f.wbErr
	f.wbErr = nil
	s.mu.Unlock()
	return errs.Join(err, old)
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
	var keys []Key
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		for k, f := range s.mu.files {
			if f.ndirty > 0 || f.wbErr != nil || f.inWriteback > 0 {
				keys = append(keys, k)
			}
		}
		s.mu.Unlock()
	}
	var failed []error
	for _, k := range keys {
		s := c.shardOf(k)
		s.mu.Lock()
		var dirty []int64
		if f := s.mu.files[k]; f != nil && ctx.Done() != nil { // a context that can end
			f.pages.each(0, math.MaxInt64, func(pg *page) bool {
				if pg.dirty || pg.wb {
					dirty = append(dirty, pg.idx)
				}
				return true
			})
		}
		s.mu.Unlock()
		slices.Sort(dirty)
		// The chunks holding dirty pages, then the whole file once more,
		// which also collects an earlier write-back error.
		for i := 0; i < len(dirty); {
			if err := ctx.Err(); err != nil {
				return errs.Join(append(failed, fmt.Errorf("iomap: sync cancelled: %w", err))...)
			}
			from := dirty[i] << c.shift / syncChunk * syncChunk
			failed = append(failed, c.Writeback(k, from, from+syncChunk))
			for i < len(dirty) && dirty[i]<<c.shift < from+syncChunk {
				i++
			}
		}
		if err := ctx.Err(); err != nil {
			return errs.Join(append(failed, fmt.Errorf("iomap: sync cancelled: %w", err))...)
		}
		failed = append(failed, c.Writeback(k, 0, math.MaxInt64))
	}
	return errs.Join(failed...)
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

// writebackCluster writes back the dirty pages of idx's run-aligned
// window (see runBreak): the contiguous dirty run around idx, and any
// other dirty pages of the window, each run with one device write.
func (c *PageCache) writebackCluster(f *file, idx int64) error {
	base := idx - idx%int64(c.maxRun)
	return c.writebackRange(f, base, base+int64(c.maxRun))
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

// WritebackOldest writes back the dirty pages of the run-aligned window
// (MaxRunBytes) holding a dirty page that is not in use, for callers of a
// NoInlineWriteback cache that got ErrCacheFull; they must hold none of
// the locks write-back takes.
// The page is the least recently used such page of its shard; of the
// shards' candidates it takes the one whose file has been dirty longest
// (like the kernel's write-back, which goes by the inode's dirtied_when).
// It reports whether there was such a page; a write-back error is
// returned and also kept for the file's next Writeback.
func (c *PageCache) WritebackOldest() (bool, error) {
	var f *file
	var idx, since int64
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		if pg := s.oldestDirtyLocked(); pg != nil && (f == nil || pg.f.dirtySince < since) {
			f, idx, since = pg.f, pg.idx, pg.f.dirtySince
		}
		s.mu.Unlock()
	}
	if f == nil {
		return false, nil
	}
	f.s.ctr.evicWb.Add(1)
	err := c.writebackCluster(f, idx)
	if err != nil {
		f.s.mu.Lock()
		if f.wbErr == nil {
			f.wbErr = err
		}
		f.s.mu.Unlock()
	}
	return true, err
}

// lookupFile returns the file of key, or nil.
func (c *PageCache) lookupFile(key Key) *file {
	s := c.shardOf(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.files[key]
}

// ZeroCached zeroes the bytes of [off, off+n) of file key that are in
// cached pages, in place, leaving their dirty state alone (for truncate
// and hole punching, which zero the device copy themselves).
func (c *PageCache) ZeroCached(key Key, off, n int64) {
	if f := c.lookupFile(key); f != nil && n > 0 {
		c.zeroCached(f, off, n)
	}
}

// Dirty returns how many pages of file key overlapping [from, to) are
// dirty or under write-back.
func (c *PageCache) Dirty(key Key, from, to int64) int {
	s := c.shardOf(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.mu.files[key]
	if f == nil || f.ndirty == 0 && f.inWriteback == 0 {
		return 0
	}
	n := 0
	rangeLocked(f, from>>c.shift, pageCeil(to, c.shift), func(pg *page) bool {
		if pg.dirty || pg.wb {
			n++
		}
		return true
	})
	return n
}

// rangeLocked calls fn for each cached page of f with index in [lo, hi),
// in no particular order, until fn returns false; f.s.mu is held. It
// visits the range or the file's pages, whichever is smaller, so small
// ranges of files with many cached pages stay cheap (direct I/O checks
// every write's range); see pageIndex.each.
func rangeLocked(f *file, lo, hi int64, fn func(pg *page) bool) {
	f.pages.each(lo, hi, fn)
}

// InvalidateClean drops the cached pages of file key overlapping
// [from, to) if none of them is dirty or under write-back, and reports
// whether it did (false: the range has dirty data; nothing dropped). It
// waits for pages in use, like Invalidate. Direct I/O calls it after
// writing the range back.
func (c *PageCache) InvalidateClean(key Key, from, to int64) bool {
	s := c.shardOf(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.mu.files[key]
	if f == nil || f.pages.len() == 0 {
		return true
	}
	lo, hi := from>>c.shift, pageCeil(to, c.shift)
	clean := true
	rangeLocked(f, lo, hi, func(pg *page) bool {
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
	s := c.shardOf(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.mu.files[key]
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
	s := c.shardOf(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.mu.files[key]
	return f != nil && f.pages.len() > 0
}

// writebackRange writes back the dirty pages of f with index in [lo, hi).
func (c *PageCache) writebackRange(f *file, lo, hi int64) error {
	s := f.s
	s.mu.Lock()
	ops := f.ops
	idle := f.ndirty == 0 && f.inWriteback == 0
	s.mu.Unlock()
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
	rb := c.runPool.Get().(*runBuf)
	defer c.runPool.Put(rb)
	s.mu.Lock()
	pages := rb.claimed[:0]
	for {
		busy := false
		pages = pages[:0]
		rangeLocked(f, lo, hi, func(pg *page) bool {
			if pg.wb {
				busy = true
				return false
			}
			if pg.dirty {
				pages = append(pages, pg)
			}
			return true
		})
		if !busy {
			break
		}
		s.mu.waiters++
		s.mu.cond.Wait()
		s.mu.waiters--
	}
	if !slices.IsSortedFunc(pages, comparePages) {
		slices.SortFunc(pages, comparePages)
	}
	// Claim every page at once; runs are written one after the other.
	for _, pg := range pages {
		pg.wb = true
		pg.pins++
	}
	f.inWriteback += len(pages)
	s.mu.Unlock()

	var failed []error
	for i := 0; i < len(pages); {
		j := i + 1
		for j < len(pages) && !c.runBreak(pages[j].idx) && pages[j].idx == pages[j-1].idx+1 {
			j++
		}
		if err := c.writeRun(f, ops, pages[i:j]); err != nil {
			failed = append(failed, err)
		}
		i = j
	}
	s.mu.Lock()
	for _, pg := range pages {
		pg.wb = false
		pg.pins--
	}
	f.inWriteback -= len(pages)
	if s.mu.waiters > 0 {
		s.mu.cond.Broadcast()
	}
	s.mu.Unlock()
	clear(pages)
	rb.claimed = pages[:0]
	if len(pages) > 0 {
		c.wakeSpace()
	}
	return errs.Join(failed...)
}

// runBreak reports whether a write-back run must end before page idx:
// runs are cut at multiples of maxRun pages of the file, so a file whose
// blocks lie at one offset modulo maxRun pages writes the device in
// aligned runs (see ext4io's allocRequest), whose pages a host holding
// the device in its page cache can keep in large folios.
func (c *PageCache) runBreak(idx int64) bool { return idx%int64(c.maxRun) == 0 }

// writeRun writes consecutive claimed pages with one device write per
// mapping. On a blockdev.VectorWriter the pages go to the device as they
// are, their content locks held across the write so it sees whole pages
// (a write or zeroing of one of them waits, and one that ran before the
// dirty bits were cleared below is either in the device write or marks
// the page dirty again); on other devices they are copied into one buffer
// first, each under its content lock.
func (c *PageCache) writeRun(f *file, ops Ops, pages []*page) error {
	off := pages[0].idx << c.shift
	length := int64(len(pages)) << c.shift
	rb := c.runPool.Get().(*runBuf)
	defer c.runPool.Put(rb)
	vw, vectored := c.dev.(blockdev.VectorWriter)
	if vectored {
		f.s.mu.Lock()
		for _, pg := range pages {
			if pg.dirty {
				pg.dirty = false
				f.ndirty--
				f.s.lruFrontLocked(pg)
			}
		}
		f.s.mu.Unlock()
	} else {
		if rb.buf == nil {
			rb.buf = make([]byte, c.maxRun<<c.shift)
		}
		for i, pg := range pages {
			pg.mu.Lock()
			copy(rb.buf[int64(i)<<c.shift:], pg.data)
			f.s.mu.Lock()
			if pg.dirty {
				pg.dirty = false
				f.ndirty--
				f.s.lruFrontLocked(pg)
			}
			f.s.mu.Unlock()
			pg.mu.Unlock()
		}
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
	ctr := f.s.ctr
	done, err := iter(ops, off, length, Writeback, ctr, func(m Mapping, pos, n int64) (int64, error) {
		// The pages holding bytes [pos, pos+n) of the run: whole pages
		// when mappings are page-aligned, as Begin's must be.
		first, end := pos-off, pos-off+n
		run := pages[first>>c.shift : pageCeil(end, c.shift)]
		switch m.Type {
		case Mapped, Unwritten:
			addr := m.Addr + (pos - m.Offset)
			ctr.devWrites.Add(1)
			var err error
			if vectored {
				rb.vecs = rb.vecs[:0]
				for i, pg := range run {
					pg.mu.Lock()
					at := (first>>c.shift + int64(i)) << c.shift // of pg in the run
					rb.vecs = append(rb.vecs, pg.data[max(first, at)-at:min(end, at+c.pageSize)-at])
				}
				_, err = vw.WriteVAt(rb.vecs, addr)
				for _, pg := range run {
					pg.mu.Unlock()
				}
				clear(rb.vecs)
			} else {
				_, err = c.dev.WriteAt(rb.buf[pos-off:pos-off+n], addr)
			}
			if err != nil {
				return 0, fmt.Errorf("iomap: write-back of file %d [%d, +%d) at device %d: %w", f.key, pos, n, addr, err)
			}
		case Inline:
			for i, pg := range run {
				start := pos + int64(i)<<c.shift
				if start >= m.Offset+m.Length {
					break
				}
				pg.mu.Lock()
				copy(m.InlineData[start-m.Offset:m.Length], pg.data)
				pg.mu.Unlock()
			}
		default:
			return 0, fmt.Errorf("iomap: write-back at %d got %v mapping (Begin must allocate): %w", pos, m.Type, ErrBadMapping)
		}
		return n, nil
	})
	if b != nil {
		if ferr := b.WritebackFinish(off, length, done, err); ferr != nil {
			err = errs.Join(err, fmt.Errorf("iomap: write-back finish [%d, +%d): %w", off, length, ferr))
		}
	}
	written := int(done >> c.shift)
	ctr.pagesWritten.Add(int64(written))
	if err != nil {
		return c.redirty(f, pages[written:], err)
	}
	return nil
}

// runBuf is the scratch space of one writeRun (the copy of the run, for
// devices without vectored writes, and the page buffers of a vectored
// write) or of one writebackRange (the pages it claims). The slices of
// pages are cleared after use, so a pooled runBuf holds no page.
type runBuf struct {
	buf     []byte   // maxRun pages, allocated on first use
	vecs    [][]byte // a vectored write's page buffers
	claimed []*page  // writebackRange: the pages it claimed
}

// comparePages orders pages by index.
func comparePages(a, b *page) int { return cmp.Compare(a.idx, b.idx) }

// redirty marks pages dirty again after a failed write-back and returns err.
func (c *PageCache) redirty(f *file, pages []*page, err error) error {
	f.s.mu.Lock()
	for _, pg := range pages {
		f.s.setDirtyLocked(pg)
	}
	f.s.mu.Unlock()
	return err
}

// Invalidate drops every cached page of file key overlapping [from, to),
// dirty or not, waiting for pages in use (invalidate_inode_pages2_range).
// Partially covered pages are dropped whole: callers write back first
// (before direct I/O) or zero the partial blocks first (truncate, punch).
// Use to = math.MaxInt64 for "to the end".
func (c *PageCache) Invalidate(key Key, from, to int64) {
	s := c.shardOf(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.mu.files[key]; f != nil {
		c.invalidateLocked(f, from>>c.shift, pageCeil(to, c.shift))
	}
}

// invalidateLocked drops the pages of f with index in [lo, hi), waiting
// (on f.s.mu.cond, so f.s.mu is released meanwhile) until none of them
// is pinned; f.s.mu is held.
func (c *PageCache) invalidateLocked(f *file, lo, hi int64) {
	s := f.s
	for {
		busy := false
		var victims []*page
		rangeLocked(f, lo, hi, func(pg *page) bool {
			if pg.pins > 0 {
				busy = true
				return false
			}
			victims = append(victims, pg)
			return true
		})
		if !busy {
			for _, pg := range victims {
				s.dropLocked(pg)
				c.freePage(pg)
			}
			s.ctr.pagesInval.Add(int64(len(victims)))
			if len(victims) > 0 && s.mu.waiters > 0 {
				s.mu.cond.Broadcast()
			}
			c.unreserve(len(victims))
			return
		}
		s.mu.waiters++
		s.mu.cond.Wait()
		s.mu.waiters--
	}
}

// Forget drops every page of file key, dirty or not, and its state,
// including a pending write-back error (for a deleted or closed file).
func (c *PageCache) Forget(key Key) {
	s := c.shardOf(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.mu.files[key]; f != nil {
		c.invalidateLocked(f, 0, math.MaxInt64)
		delete(s.mu.files, key)
	}
}

// ForgetUnused drops the entry of file key, and with it the Ops it
// recorded, if the file has no page cached or under write-back and no
// write-back error waiting for its next Writeback, and reports whether the
// cache now holds nothing of the file. It does not
// wait: a shard busy at the moment reports false.
func (c *PageCache) ForgetUnused(key Key) bool {
	s := c.shardOf(key)
	if !s.mu.TryLock() {
		return false
	}
	defer s.mu.Unlock()
	f := s.mu.files[key]
	if f == nil {
		return true
	}
	if f.pages.len() > 0 || f.ndirty > 0 || f.inWriteback > 0 || f.wbErr != nil {
		return false
	}
	delete(s.mu.files, key)
	return true
}

// Present returns a hook for SeekOptions.Present reporting whether the
// page holding a file offset is cached with data (uptodate or dirty).
func (c *PageCache) Present(key Key) func(off int64) bool {
	s := c.shardOf(key)
	return func(off int64) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		f := s.mu.files[key]
		if f == nil {
			return false
		}
		pg := f.pages.get(off >> c.shift)
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
	var old []*file
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		for _, f := range s.mu.files {
			if f.ndirty > 0 && f.dirtySince <= cutoff {
				old = append(old, f)
			}
		}
		s.mu.Unlock()
	}
	for _, f := range old {
		err := c.writebackRange(f, 0, math.MaxInt64>>c.shift)
		f.s.mu.Lock()
		if err != nil && f.wbErr == nil {
			f.wbErr = err
		}
		if f.ndirty > 0 {
			f.dirtySince = time.Now().UnixNano()
		}
		f.s.mu.Unlock()
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
// back is lost (call Sync first). Later calls fail with ErrClosed. It
// closes the shards one after another, waking get calls waiting for a
// page.
func (c *PageCache) Close() error {
	c.StopFlusher()
	if !c.closed.CompareAndSwap(false, true) {
		return fmt.Errorf("iomap: page cache: %w", errs.ErrClosed)
	}
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		s.mu.closed = true
		for _, f := range s.mu.files {
			c.invalidateLocked(f, 0, math.MaxInt64)
		}
		s.mu.files = nil
		s.mu.Unlock()
	}
	c.space.Lock()
	c.space.gen.Add(1)
	c.space.cond.Broadcast()
	c.space.Unlock()
	return nil
}
