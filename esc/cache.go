package esc

import (
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/google/btree"

	"github.com/ext4io/ext4io/internal/stripe"
)

// Options configure a Cache. The zero value means no budget, cache
// everything. New copies it; it is not retained.
type Options struct {
	// Budget bounds the bytes accounted to all inodes' cached ranges and
	// per-inode bookkeeping; <= 0 means unlimited. When an insertion takes
	// the total over Budget the shrinker drops clean ranges of the least
	// recently used inodes until the total is 1/16 under Budget. Delayed
	// ranges are never dropped, so the total can stay above Budget when
	// they alone exceed it; then a sweep that frees little is not repeated
	// until another Budget/32 bytes have been added.
	Budget int64
	// SkipInRoot makes Fill return, without caching, extents the lookup
	// reports as coming from the inode's in-inode root (i_block): they cost
	// no block read to find again. It saves memory for small files at the
	// price of a LookupFunc call on every miss.
	SkipInRoot bool
	// PrecacheLimit bounds how many on-disk extents Precache loads; 0
	// means 64.
	PrecacheLimit int
}

const nShards = 64

type shard struct {
	mu   sync.RWMutex
	m    map[uint32]*Tree // guarded by mu
	peak int              // guarded by mu: most entries m held since it was last rebuilt
	_    [24]byte         // keep shards on separate cache lines
}

// Cache is the extent-status cache of every inode of one filesystem, with a
// shared memory budget. It is safe for concurrent use.
type Cache struct {
	opts     Options
	freelist *btree.FreeListG[entry] // shared node free list (own mutex)

	shards [nShards]shard

	// lru is a CLOCK list of live trees: the shrinker's hand is head; trees
	// enter at tail. Lock order: Tree.mu, shard.mu, then lru.mu.
	lru struct {
		sync.Mutex
		head, tail *Tree
		n          int
	}

	shrinkMu sync.Mutex   // one shrinker at a time
	stall    atomic.Int64 // skip shrinking until bytes exceed this (set when a run could not reach its target)

	stats counters
}

type counters struct {
	hits                      stripe.Counter // per lookup: striped by block
	misses                    atomic.Uint64
	_                         [56]byte
	bytes, entries, inodes    atomic.Int64
	delayed                   atomic.Uint64
	reclaimed, evicted, runs  atomic.Uint64
	fills, fillSkips, precach atomic.Uint64
}

// Stats is a snapshot of a Cache's counters, a plain value. Counters are
// read one by one, so a snapshot taken under concurrent use is not atomic as
// a whole.
type Stats struct {
	Hits, Misses   uint64 // Lookup outcomes (Fill counts through Lookup)
	Entries        int64  // cached ranges, all inodes
	Inodes         int64  // live per-inode trees
	Bytes          int64  // accounted bytes (see Options.Budget)
	Budget         int64  // Options.Budget
	DelayedBlocks  uint64 // blocks in Delayed ranges
	Reclaimed      uint64 // ranges dropped by the shrinker
	EvictedInodes  uint64 // trees retired by the shrinker
	ShrinkRuns     uint64 // shrinker runs
	Fills          uint64 // LookupFunc calls made by Fill
	FillSkips      uint64 // Fill results not cached (SkipInRoot)
	PrecachedTrees uint64 // successful Precache calls
}

// New returns an empty cache.
func New(opts Options) *Cache {
	if opts.PrecacheLimit <= 0 {
		opts.PrecacheLimit = 64
	}
	c := &Cache{opts: opts, freelist: btree.NewFreeListG[entry](64)}
	for i := range c.shards {
		c.shards[i].m = make(map[uint32]*Tree)
	}
	return c
}

// Stats returns a snapshot of the counters.
func (c *Cache) Stats() Stats {
	s := &c.stats
	return Stats{
		Hits: s.hits.Load(), Misses: s.misses.Load(),
		Entries: s.entries.Load(), Inodes: s.inodes.Load(), Bytes: s.bytes.Load(),
		Budget: c.opts.Budget, DelayedBlocks: s.delayed.Load(),
		Reclaimed: s.reclaimed.Load(), EvictedInodes: s.evicted.Load(), ShrinkRuns: s.runs.Load(),
		Fills: s.fills.Load(), FillSkips: s.fillSkips.Load(), PrecachedTrees: s.precach.Load(),
	}
}

func (c *Cache) shard(ino uint32) *shard {
	return &c.shards[(ino*0x9E3779B1)>>(32-6)] // Fibonacci hash; 64 = 1<<6 shards
}

// lookupTree returns the inode's tree without creating one.
func (c *Cache) lookupTree(ino uint32) *Tree {
	s := c.shard(ino)
	s.mu.RLock()
	t := s.m[ino]
	s.mu.RUnlock()
	return t
}

// Lookup returns the tree of inode ino, or nil if it has none.
func (c *Cache) Lookup(ino uint32) *Tree { return c.lookupTree(ino) }

// Inode returns the tree of inode ino, creating an empty one if needed.
func (c *Cache) Inode(ino uint32) *Tree {
	if t := c.lookupTree(ino); t != nil {
		return t
	}
	// Make room before creating: a tree created first could be retired by
	// this very sweep (a full sweep passes every tree twice), and a caller
	// redirected from a retired tree (lockLive) would loop.
	c.maybeShrink(inodeBytes)
	s := c.shard(ino)
	s.mu.Lock()
	t := s.m[ino]
	if t == nil {
		t = &Tree{c: c, ino: ino}
		t.ref.Store(true)
		t.mu.accBytes = inodeBytes
		s.m[ino] = t
		s.peak = max(s.peak, len(s.m))
		c.stats.bytes.Add(inodeBytes)
		c.stats.inodes.Add(1)
		c.lru.Lock()
		c.lruPushTailLocked(t)
		c.lru.Unlock()
	}
	s.mu.Unlock()
	return t
}

// Forget drops everything cached for inode ino, Delayed ranges included (the
// caller is evicting or deleting the inode), and returns the number of
// Delayed blocks dropped.
func (c *Cache) Forget(ino uint32) uint64 {
	t := c.lookupTree(ino)
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.dead {
		return 0
	}
	d := t.mu.delayed
	c.retireLocked(t)
	return d
}

// retireLocked empties t, zeroes its accounting, and removes it from the map
// and the LRU; later calls through t act on a new tree.
//
// Preconditions: t.mu held for writing, t not dead.
func (c *Cache) retireLocked(t *Tree) {
	if t.mu.bt != nil {
		t.mu.bt.Clear(true)
		t.mu.bt = nil
	}
	t.mu.delayed = 0
	t.mu.dead = true
	c.stats.bytes.Add(-t.mu.accBytes)
	c.stats.entries.Add(-t.mu.accEntries)
	c.stats.delayed.Add(-t.mu.accDelayed)
	c.stats.inodes.Add(-1)
	t.mu.accBytes, t.mu.accEntries, t.mu.accDelayed = 0, 0, 0
	s := c.shard(t.ino)
	s.mu.Lock()
	if s.m[t.ino] == t {
		delete(s.m, t.ino)
		// Go maps never shrink: rebuild once mostly empty, so the slots of
		// evicted inodes do not outlive them unaccounted.
		if s.peak >= 256 && len(s.m) < s.peak/4 {
			m := make(map[uint32]*Tree, len(s.m))
			for k, v := range s.m {
				m[k] = v
			}
			s.m, s.peak = m, len(m)
		}
	}
	s.mu.Unlock()
	c.lru.Lock()
	c.lruRemoveLocked(t)
	c.lru.Unlock()
}

// accountLocked brings c's counters in line with t's contents.
//
// Preconditions: t.mu held for writing, t not dead.
func (t *Tree) accountLocked() {
	n := int64(t.lenLocked())
	b := treeBytes(n)
	c := t.c
	if d := b - t.mu.accBytes; d != 0 {
		c.stats.bytes.Add(d)
		t.mu.accBytes = b
	}
	if d := n - t.mu.accEntries; d != 0 {
		c.stats.entries.Add(d)
		t.mu.accEntries = n
	}
	if t.mu.delayed != t.mu.accDelayed {
		c.stats.delayed.Add(t.mu.delayed - t.mu.accDelayed) // wraps correctly when negative
		t.mu.accDelayed = t.mu.delayed
	}
}

func (c *Cache) lruPushTailLocked(t *Tree) {
	t.lru.prev, t.lru.next, t.lru.in = c.lru.tail, nil, true
	if c.lru.tail != nil {
		c.lru.tail.lru.next = t
	} else {
		c.lru.head = t
	}
	c.lru.tail = t
	c.lru.n++
}

func (c *Cache) lruRemoveLocked(t *Tree) {
	if !t.lru.in {
		return
	}
	if t.lru.prev != nil {
		t.lru.prev.lru.next = t.lru.next
	} else {
		c.lru.head = t.lru.next
	}
	if t.lru.next != nil {
		t.lru.next.lru.prev = t.lru.prev
	} else {
		c.lru.tail = t.lru.prev
	}
	t.lru.prev, t.lru.next, t.lru.in = nil, nil, false
	c.lru.n--
}

// maybeShrink runs the shrinker if the accounted bytes plus extra exceed
// the budget.
func (c *Cache) maybeShrink(extra int64) {
	if c.opts.Budget <= 0 {
		return
	}
	b := c.stats.bytes.Load() + extra
	if b <= c.opts.Budget || b <= c.stall.Load() {
		return
	}
	if !c.shrinkMu.TryLock() {
		// Another goroutine is shrinking. Up to 1/8 over budget, carry on;
		// beyond, wait for it: without this back-pressure many inserting
		// goroutines outrun one shrinker (seen with 16 goroutines on 2 CPUs).
		if b <= c.opts.Budget+c.opts.Budget/8 {
			return
		}
		c.shrinkMu.Lock()
		if b = c.stats.bytes.Load() + extra; b <= c.opts.Budget || b <= c.stall.Load() {
			c.shrinkMu.Unlock()
			return
		}
	}
	defer c.shrinkMu.Unlock()
	freed := c.shrinkLocked(c.opts.Budget - c.opts.Budget/16)
	if b := c.stats.bytes.Load(); b > c.opts.Budget && freed < c.opts.Budget/32 {
		// A full sweep found little to drop (mostly Delayed ranges):
		// don't rescan on every insert, only after budget/32 more bytes.
		c.stall.Store(b + c.opts.Budget/32)
	} else {
		c.stall.Store(0)
	}
}

// Shrink drops clean ranges of least recently used inodes until the
// accounted bytes are at most target or every inode was visited twice, and
// returns the bytes freed. It is the hook for an external memory-pressure
// signal; insertions call it themselves when over Options.Budget.
func (c *Cache) Shrink(target int64) int64 {
	c.shrinkMu.Lock()
	defer c.shrinkMu.Unlock()
	return c.shrinkLocked(target)
}

// shrinkLocked runs the CLOCK hand: a referenced tree loses its bit and moves
// to the tail (second chance); an unreferenced one loses its clean ranges
// and, when nothing is left, is retired.
//
// It returns the bytes it freed.
//
// Preconditions: c.shrinkMu held; no Tree.mu held (lock order).
func (c *Cache) shrinkLocked(target int64) (freed int64) {
	c.stats.runs.Add(1)
	c.lru.Lock()
	limit := 2*c.lru.n + 1
	c.lru.Unlock()
	for i := 0; i < limit && c.stats.bytes.Load() > target; i++ {
		c.lru.Lock()
		t := c.lru.head
		if t == nil {
			c.lru.Unlock()
			return freed
		}
		c.lruRemoveLocked(t)
		c.lruPushTailLocked(t)
		if t.ref.Load() {
			t.ref.Store(false)
			c.lru.Unlock()
			continue
		}
		c.lru.Unlock()

		t.mu.Lock()
		if t.mu.dead || t.ref.Load() {
			t.mu.Unlock()
			continue
		}
		before := t.mu.accBytes
		c.stats.reclaimed.Add(uint64(t.reclaimLocked()))
		if t.mu.bt == nil {
			c.retireLocked(t)
			c.stats.evicted.Add(1)
		} else {
			t.accountLocked()
		}
		freed += before - t.mu.accBytes
		t.mu.Unlock()
	}
	return freed
}

// Byte accounting model (see TestAccountingMatchesHeap, which checks it
// against runtime.MemStats):
//
//	inodeBytes  the Tree struct plus its slot in a shard map
//	treeBase    BTreeG header, its copy-on-write context and the root node
//	entryBytes  per entry of a multi-node tree: 16 bytes of item at the
//	            nodes' fill plus node headers and interior child slices
//	            amortized. Measured ~39 for in-order fills (half-full
//	            nodes) and ~26 for random ones; 40 errs on the safe side.
//	rootItems   a tree that fits its root node pays for the root's item
//	            slice, grown by doubling from 1
var (
	inodeBytes = sizeClass(reflect.TypeFor[Tree]().Size()) + 24
	treeBase   = sizeClass(reflect.TypeFor[btree.BTreeG[entry]]().Size()) + 16 + nodeBytes
	nodeBytes  = sizeClass(reflect.TypeFor[struct {
		items, children []entry
		cow             *int
	}]().Size())
)

const entryBytes = 40

func treeBytes(n int64) int64 {
	switch {
	case n == 0:
		return inodeBytes
	case n <= 2*Degree-1:
		c := int64(1)
		for c < n {
			c *= 2
		}
		return inodeBytes + treeBase + sizeClass(uintptr(c)*16)
	}
	return inodeBytes + treeBase + n*entryBytes
}

// sizeClass rounds n up to the Go allocator's size class for small objects.
func sizeClass(n uintptr) int64 {
	for _, c := range [...]int64{8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256, 288, 320, 352, 384, 416, 448, 480, 512} {
		if int64(n) <= c {
			return c
		}
	}
	return int64(n+127) &^ 127
}
