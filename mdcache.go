package ext4io

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ext4io/ext4io/alloc"
	"github.com/ext4io/ext4io/blockdev"
)

// The metadata buffer cache.
//
// metaCache holds the current contents of metadata blocks (bitmaps, group
// descriptors, inode tables, directory, extent tree and xattr blocks) of a
// writable volume, so that a block is read from the device or copied out
// of the journal once rather than on every access (ext4's buffer heads).
// It holds clean blocks only: on a journaled volume a block changed by the
// running or committing transaction lives in jmeta's pending or
// committing set, which is where reads find it first and which keeps it
// in memory however small the cache's budget (such blocks are pinned, in
// buffer-head terms). When a commit has logged a transaction, the
// transaction's block copies become the cache's blocks (jmeta.installLocked):
// the journal writes them home at checkpoint from its own copies, and the
// cache's copy of a block is then what the device holds. A block is
// evicted, least recently used first, whenever the cache holds more than
// its byte budget (Options.MetaCacheBytes).
//
// With Tuning.NoJournal (cachedIO.writeBack) the cache also holds dirty
// blocks: Dirty installs the new copy without writing it, and the dirty
// blocks are written home, sorted and in runs of adjacent blocks, when
// they fill half the budget and before every device flush (flushDev:
// Sync, Close). Dirty blocks are off the recency list, so never evicted;
// written home they join it as clean blocks.
//
// The cache's slices are not changed once handed out: Read hands them out
// shared (alloc.MetaIO's callers do not modify what Read returns), and
// GetWrite hands out a private copy, which Dirty then keeps as the
// cached block rather than copying it again (cachedIO.owned). Only a dirty block no reader or
// write-back refers to is changed in place (cachedIO.update).
//
// A reader that misses fills the cache after reading the journal or the
// device without any lock held; a newer copy installed, or a block
// dropped, meanwhile must not be replaced by the older contents it read.
// Every install and drop advances gen, and a fill taken at an older gen
// is not inserted (the reader still uses what it read, which was current
// when it started).
type metaCache struct {
	bs     int
	budget int64 // bytes; fixed at creation

	mu     sync.Mutex
	blocks map[uint64]*cblock // guarded by mu
	lru    cblock             // sentinel of the recency list, most recent first; guarded by mu
	used   int64              // bytes held; guarded by mu
	gen    uint64             // advanced by every install and drop; guarded by mu
	dirty  int64              // bytes of dirty blocks (write-back only); guarded by mu
	// spare holds block buffers for reuse: the data of dirty blocks
	// nobody else referred to (not shared) when a newer copy replaced
	// them; at most maxSpareBlocks. Guarded by mu.
	spare [][]byte

	hits, misses, evictions atomic.Int64
}

// cblock is one cached block.
type cblock struct {
	blk   uint64
	data  []byte // changed in place only while dirty and not shared
	dirty bool   // not yet written home (write-back only); not on the recency list
	// shared is set once data may be referenced outside the cache (handed
	// out by Read, or being written home): cachedIO.update then changes a
	// copy, never data in place.
	shared     bool
	prev, next *cblock
}

// defaultMetaCacheBytes is Options.MetaCacheBytes's default.
const defaultMetaCacheBytes = 16 << 20

// newMetaCache returns a cache of budget bytes of bs-byte blocks, or nil
// when budget is negative (no cache: callers check for nil).
func newMetaCache(bs int, budget int64) *metaCache {
	if budget < 0 {
		return nil
	}
	if budget == 0 {
		budget = defaultMetaCacheBytes
	}
	c := &metaCache{bs: bs, budget: budget, blocks: make(map[uint64]*cblock)}
	c.lru.prev, c.lru.next = &c.lru, &c.lru
	return c
}

// get returns blk's cached contents (shared: not to be modified), or
// false and the generation a fill of blk must present to put.
func (c *metaCache) get(blk uint64) ([]byte, uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.blocks[blk]; e != nil {
		if !e.dirty {
			c.unlinkLocked(e)
			c.pushLocked(e)
		}
		e.shared = true
		c.hits.Add(1)
		return e.data, 0, true
	}
	c.misses.Add(1)
	return nil, c.gen, false
}

// getInto copies blk's cached contents into buf and reports whether it
// was cached.
func (c *metaCache) getInto(blk uint64, buf []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.blocks[blk]
	if e == nil {
		return false
	}
	if !e.dirty {
		c.unlinkLocked(e)
		c.pushLocked(e)
	}
	copy(buf, e.data)
	c.hits.Add(1)
	return true
}

// put inserts b, read at generation gen, as blk's contents unless a newer
// copy was installed or blk dropped since. b is the cache's from now on.
func (c *metaCache) put(blk uint64, b []byte, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen || c.blocks[blk] != nil {
		return
	}
	c.insertLocked(blk, b)
}

// installLocked makes b blk's contents, replacing any cached copy: b is
// newer than anything a reader may be filling. b is the cache's from now
// on. c.mu is held.
func (c *metaCache) installLocked(blk uint64, b []byte) {
	c.gen++
	if e := c.blocks[blk]; e != nil && !e.dirty {
		c.used += int64(len(b) - len(e.data))
		e.data = b // readers holding the old slice keep it unchanged
		c.unlinkLocked(e)
		c.pushLocked(e)
		return
	} else if e != nil {
		c.removeLocked(e)
	}
	c.insertLocked(blk, b)
}

// installDirtyLocked makes b blk's contents, not yet written home. c.mu
// is held.
func (c *metaCache) installDirtyLocked(blk uint64, b []byte) {
	c.gen++
	if e := c.blocks[blk]; e != nil {
		c.removeLocked(e)
		if e.dirty && !e.shared && len(e.data) == c.bs && len(c.spare) < maxSpareBlocks {
			c.spare = append(c.spare, e.data)
		}
	}
	e := &cblock{blk: blk, data: b, dirty: true}
	c.blocks[blk] = e
	c.used += int64(len(b))
	c.dirty += int64(len(b))
	c.evictLocked()
}

// maxSpareBlocks bounds metaCache.spare.
const maxSpareBlocks = 16

// spareBlock returns a block buffer of unspecified contents: a spare one
// or a new one.
func (c *metaCache) spareBlock() []byte {
	c.mu.Lock()
	if n := len(c.spare); n > 0 {
		b := c.spare[n-1]
		c.spare = c.spare[:n-1]
		c.mu.Unlock()
		return b
	}
	c.mu.Unlock()
	return make([]byte, c.bs)
}

// install is installLocked taking c.mu.
func (c *metaCache) install(blk uint64, b []byte) {
	c.mu.Lock()
	c.installLocked(blk, b)
	c.mu.Unlock()
}

// drop forgets blk (freed, or written around the cache).
func (c *metaCache) drop(blk uint64) { c.dropRange(blk, 1) }

// dropRange forgets blocks blk to blk+n-1.
func (c *metaCache) dropRange(blk, n uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if n <= uint64(len(c.blocks)) {
		for b := blk; b < blk+n; b++ {
			if e := c.blocks[b]; e != nil {
				c.removeLocked(e)
			}
		}
		return
	}
	for b, e := range c.blocks {
		if b >= blk && b-blk < n {
			c.removeLocked(e)
		}
	}
}

func (c *metaCache) insertLocked(blk uint64, b []byte) {
	e := &cblock{blk: blk, data: b, shared: true}
	c.blocks[blk] = e
	c.pushLocked(e)
	c.used += int64(len(b))
	c.evictLocked()
}

func (c *metaCache) removeLocked(e *cblock) {
	if e.dirty {
		c.dirty -= int64(len(e.data))
	} else {
		c.unlinkLocked(e)
	}
	delete(c.blocks, e.blk)
	c.used -= int64(len(e.data))
}

// evictLocked evicts clean blocks, least recently used first, while the
// cache is over its budget. c.mu is held.
func (c *metaCache) evictLocked() {
	for c.used > c.budget && c.lru.prev != &c.lru {
		c.removeLocked(c.lru.prev)
		c.evictions.Add(1)
	}
}

func (c *metaCache) pushLocked(e *cblock) {
	e.prev, e.next = &c.lru, c.lru.next
	c.lru.next.prev = e
	c.lru.next = e
}

func (c *metaCache) unlinkLocked(e *cblock) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

// len returns the number of cached blocks and their bytes.
func (c *metaCache) len() (int, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.blocks), c.used
}

// cachedIO is the alloc.MetaIO of a writable volume without a journal
// (or with Tuning.NoJournal): the device's MetaIO behind a metaCache.
// Dirty writes through to the device and installs a copy, or with
// writeBack installs the copy dirty, for writeBackAll. It is safe for
// concurrent use; the cache's lock guards its state, and wbMu serializes
// write-backs.
type cachedIO struct {
	dev       alloc.MetaIO
	c         *metaCache
	writeBack bool // fixed at creation
	devW      blockdev.Device
	bs        int

	// owned is the first byte of the block GetWrite or getNew last
	// handed out: the caller's private slice, which Dirty then installs
	// without copying it (callers do not use a block after passing it to
	// Dirty: alloc.MetaIO). Any other slice is copied. Atomic, no lock.
	owned atomic.Pointer[byte]

	wbMu sync.Mutex
}

var _ alloc.MetaIO = (*cachedIO)(nil)

// Read returns blk's contents, shared with the cache: not to be modified.
func (m *cachedIO) Read(blk uint64) ([]byte, error) {
	b, gen, ok := m.c.get(blk)
	if ok {
		return b, nil
	}
	b, err := m.dev.Read(blk)
	if err != nil {
		return nil, err
	}
	m.c.put(blk, b, gen)
	return b, nil
}

// GetWrite returns a private copy of blk's contents.
func (m *cachedIO) GetWrite(blk uint64) ([]byte, error) {
	b, err := m.copyOf(blk)
	if err == nil {
		m.owned.Store(&b[0])
	}
	return b, err
}

// copyOf returns a private copy of blk's contents: copied under the
// cache's lock when cached (which leaves the cached block unshared), into
// a spare buffer where there is one.
func (m *cachedIO) copyOf(blk uint64) ([]byte, error) {
	buf := m.c.spareBlock()
	if m.c.getInto(blk, buf) {
		return buf, nil
	}
	b, err := m.Read(blk)
	if err != nil {
		return nil, err
	}
	if len(b) != len(buf) {
		return nil, fmt.Errorf("ext4io: metadata block %d: read %d bytes, not a block: %w", blk, len(b), ErrIO)
	}
	copy(buf, b)
	return buf, nil
}

// getNew is GetWrite for a block just allocated, whose old contents do
// not matter (jbd2's get_create_access): a zeroed private block, not
// read from the cache or the device.
func (m *cachedIO) getNew() []byte {
	b := make([]byte, m.c.bs)
	m.owned.Store(&b[0])
	return b
}

// keep returns b, or a copy of it when it is not the slice GetWrite or
// getNew last handed out, for the cache to hold.
func (m *cachedIO) keep(b []byte) []byte {
	if len(b) > 0 && m.owned.CompareAndSwap(&b[0], nil) {
		return b
	}
	return append([]byte(nil), b...)
}

// Dirty writes b to the device and makes it, or a copy of it, the cached
// block. A failed write drops the block, whose device contents are
// unknown.
func (m *cachedIO) Dirty(blk uint64, b []byte) error {
	if m.writeBack {
		m.c.mu.Lock()
		m.c.installDirtyLocked(blk, m.keep(b))
		full := m.c.dirty > m.c.budget/2
		m.c.mu.Unlock()
		if full {
			return m.writeBackAll()
		}
		return nil
	}
	b = m.keep(b)
	if err := m.dev.Dirty(blk, b); err != nil {
		m.c.drop(blk)
		return err
	}
	m.c.install(blk, b)
	return nil
}

// update changes block blk with fn, for a write-back cachedIO: in place
// when the cache holds it dirty and nobody else refers to its slice, else
// in a copy installed dirty. The caller serializes updates of blk
// (blkLocks, as writeInode does); fn runs with the cache's lock held and
// must not call m.
func (m *cachedIO) update(blk uint64, fn func(b []byte)) error {
	c := m.c
	c.mu.Lock()
	if e := c.blocks[blk]; e != nil && e.dirty && !e.shared {
		fn(e.data)
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	b, err := m.copyOf(blk)
	if err != nil {
		return err
	}
	c.mu.Lock()
	fn(b)
	c.installDirtyLocked(blk, b)
	full := c.dirty > c.budget/2
	c.mu.Unlock()
	if full {
		return m.writeBackAll()
	}
	return nil
}

// writeBackAll writes the dirty blocks home, sorted, each run of adjacent
// blocks (up to 1 MiB) in one device write, and marks them clean unless a
// newer copy was installed meanwhile. A failed write leaves the blocks
// dirty and returns an error wrapping ErrIO.
func (m *cachedIO) writeBackAll() error {
	if !m.writeBack {
		return nil
	}
	m.wbMu.Lock()
	defer m.wbMu.Unlock()
	type wb struct {
		blk  uint64
		data []byte
	}
	m.c.mu.Lock()
	var todo []wb
	for blk, e := range m.c.blocks {
		if e.dirty {
			e.shared = true // written outside the lock: update must copy
			todo = append(todo, wb{blk, e.data})
		}
	}
	m.c.mu.Unlock()
	if len(todo) == 0 {
		return nil
	}
	slices.SortFunc(todo, func(a, b wb) int { return cmp.Compare(a.blk, b.blk) })
	maxRun := max(1, (1<<20)/m.bs)
	run := make([]byte, 0, maxRun*m.bs)
	for i := 0; i < len(todo); {
		j := i + 1
		for j < len(todo) && j-i < maxRun && todo[j].blk == todo[j-1].blk+1 {
			j++
		}
		run = run[:0]
		for _, w := range todo[i:j] {
			run = append(run, w.data...)
		}
		if _, err := m.devW.WriteAt(run, int64(todo[i].blk)*int64(m.bs)); err != nil {
			return fmt.Errorf("ext4io: writing back metadata blocks %d+%d: %w", todo[i].blk, j-i, wrapIO(err))
		}
		i = j
	}
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	for _, w := range todo {
		if e := m.c.blocks[w.blk]; e != nil && e.dirty && &e.data[0] == &w.data[0] {
			e.dirty = false
			m.c.dirty -= int64(len(e.data))
			m.c.pushLocked(e)
		}
	}
	m.c.evictLocked()
	return nil
}

// getNewMeta returns a buffer for the new contents of blk, a block just
// allocated: a zeroed one not read back where the volume has no journal
// (cachedIO.getNew), else GetWrite's copy. The caller fills it whole.
func (v *Volume) getNewMeta(blk uint64) ([]byte, error) {
	if m, ok := v.meta.(*cachedIO); ok {
		return m.getNew(), nil
	}
	return v.meta.GetWrite(blk)
}

// writeBackMeta writes the dirty metadata blocks of a Tuning.NoJournal
// volume home (before a device flush).
func (v *Volume) writeBackMeta() error {
	if m, ok := v.meta.(*cachedIO); ok {
		return m.writeBackAll()
	}
	return nil
}

// ZeroOut zeroes the blocks on the device and forgets them.
func (m *cachedIO) ZeroOut(blk, n uint64) error {
	err := m.dev.ZeroOut(blk, n)
	m.c.dropRange(blk, n)
	return err
}

// forgetMeta is called for a metadata block being freed (a directory,
// extent tree or xattr block): on a journaled volume it is revoked
// (jmeta.revoke, which also drops it from the cache); without a journal
// it is dropped from the cache, whose copy would otherwise outlive the
// block's next user's writes to the device.
func (v *Volume) forgetMeta(blk uint64) {
	switch {
	case v.jm != nil:
		v.jm.revoke(blk)
	case v.mcache != nil:
		v.mcache.drop(blk)
	}
}

// installLocked makes the blocks of a set the journal has logged the
// cache's blocks: the journal and the cache share the buffers, which
// nothing changes any more (journal.Handle.DirtyOwned). m.mu is held.
func (m *jmeta) installLocked(set map[uint64][]byte) {
	if m.cache == nil {
		return
	}
	m.cache.mu.Lock()
	defer m.cache.mu.Unlock()
	for blk, b := range set {
		m.cache.installLocked(blk, b)
	}
}

// metaReaderInto is a MetaIO that can copy a block into the caller's
// buffer without allocating a copy of its own (jmeta, cachedIO).
type metaReaderInto interface {
	readInto(blk uint64, buf []byte) error
}

// readInto copies blk's contents into buf: from its pending or committing
// copy under m.mu, else from the cache's block or what fills it.
func (m *jmeta) readInto(blk uint64, buf []byte) error {
	m.mu.Lock()
	if b, ok := m.pending[blk]; ok {
		copy(buf, b)
		m.mu.Unlock()
		return nil
	}
	if b, ok := m.committing[blk]; ok {
		copy(buf, b)
		m.mu.Unlock()
		return nil
	}
	m.mu.Unlock()
	b, _, err := m.read(blk) // pending again first: it may have changed meanwhile
	if err != nil {
		return err
	}
	copy(buf, b)
	return nil
}

func (m *cachedIO) readInto(blk uint64, buf []byte) error {
	if m.c.getInto(blk, buf) {
		return nil
	}
	b, err := m.Read(blk)
	if err != nil {
		return err
	}
	copy(buf, b)
	return nil
}

// blockBufs recycles block-sized scratch buffers (directory scans), one
// pool per power-of-two block size from 1 KiB to 64 KiB.
var blockBufs [7]sync.Pool

func blockBufPool(bs int) *sync.Pool {
	for i := range blockBufs {
		if 1024<<i == bs {
			return &blockBufs[i]
		}
	}
	return nil
}

// getBlockBuf returns a scratch buffer of bs bytes (contents undefined);
// putBlockBuf gives it back once nothing refers to it.
func getBlockBuf(bs int) []byte {
	if p := blockBufPool(bs); p != nil {
		if b, ok := p.Get().(*[]byte); ok {
			return *b
		}
	}
	return make([]byte, bs)
}

func putBlockBuf(b []byte) {
	if p := blockBufPool(len(b)); p != nil {
		p.Put(&b)
	}
}
