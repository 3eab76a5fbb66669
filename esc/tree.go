package esc

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/google/btree"

	"github.com/ext4io/ext4io/internal/stripe"
)

// Degree is the btree degree: nodes hold 17..35 entries. 18 is chosen
// against the Go allocator: a node split off with 17 entries gets a slice of
// capacity 18 (288-byte size class) whose one doubling (36, 576 bytes) holds
// the 35-entry maximum, so nodes left behind by in-order insertion (the
// common case: files are filled front to back) are never over-allocated.
// Degree 16 would double twice (15 → 30 → 60) and cost ~74 bytes per entry
// in that case instead of ~38.
const Degree = 18

// Tree is the cached extent status of one inode. It is safe for concurrent
// use: lookups share a read lock, changes are exclusive.
//
// A Tree handle stays usable after the shrinker or Cache.Forget retires it:
// its methods then act on the inode's current tree (creating one for
// changes), so a caller holding a handle never loses a Delayed range.
type Tree struct {
	c   *Cache
	ino uint32

	// ref is the second-chance bit: set by lookups and changes, cleared by
	// the shrinker's first pass. Atomic so readers never take the LRU lock.
	ref atomic.Bool

	// lru links guarded by c.lru.mu.
	lru struct {
		prev, next *Tree
		in         bool
	}

	mu struct {
		sync.RWMutex
		bt      *btree.BTreeG[entry] // nil while empty
		dead    bool                 // retired: removed from the map and LRU
		delayed uint64               // blocks in Delayed entries (I4)
		// What is accounted to c's counters for this tree (I4).
		accBytes   int64
		accEntries int64
		accDelayed uint64
	}
}

// Ino returns the inode number t caches.
func (t *Tree) Ino() uint32 { return t.ino }

// touch sets the referenced bit, avoiding a write when already set.
func (t *Tree) touch() {
	if !t.ref.Load() {
		t.ref.Store(true)
	}
}

// rlockLive returns the inode's live tree read-locked, or nil if it has
// none (t retired and no successor).
func (t *Tree) rlockLive() *Tree {
	for {
		t.mu.RLock()
		if !t.mu.dead {
			return t
		}
		t.mu.RUnlock()
		n := t.c.lookupTree(t.ino)
		if n == nil || n == t {
			return nil
		}
		t = n
	}
}

// lockLive returns the inode's live tree write-locked, creating it if t was
// retired. Cache.Inode shrinks before creating, so the fresh tree survives
// until locked unless a concurrent sweep passes it twice.
func (t *Tree) lockLive() *Tree {
	for {
		t.mu.Lock()
		if !t.mu.dead {
			return t
		}
		t.mu.Unlock()
		t = t.c.Inode(t.ino)
	}
}

// unlockAccount updates the byte and entry accounting, unlocks, and runs the
// shrinker if the budget is exceeded.
func (t *Tree) unlockAccount() {
	t.accountLocked()
	t.mu.Unlock()
	t.c.maybeShrink(0)
}

// Lookup returns the cached range containing lblk.
func (t *Tree) Lookup(lblk uint32) (Extent, bool) {
	e, ok := t.peek(lblk)
	if ok {
		t.c.stats.hits.Add(stripe.Of(uint64(lblk)), 1)
	} else {
		t.c.stats.misses.Add(1)
	}
	return e, ok
}

// peek is Lookup without the hit and miss counters.
func (t *Tree) peek(lblk uint32) (Extent, bool) {
	lt := t.rlockLive()
	if lt == nil {
		return Extent{}, false
	}
	x, ok := lt.floorLocked(lblk)
	lt.mu.RUnlock()
	if !ok || x.end() <= lblk {
		return Extent{}, false
	}
	lt.touch()
	return x.extent(), true
}

// Insert caches e, replacing whatever overlaps it (including Delayed ranges)
// and merging with adjacent mergeable ranges. Use it for changes the caller
// has made: a new delayed write, an allocation (Delayed to Written), a punched
// hole. To cache what was read from disk use Cache.
func (t *Tree) Insert(e Extent) error {
	if err := e.validate(); err != nil {
		return fmt.Errorf("esc: insert (inode %d): %w", t.ino, err)
	}
	t = t.lockLive()
	x := toEntry(e)
	f, ok := t.floorLocked(x.lblk)
	if !t.insertInsideLocked(f, ok, x) {
		t.cutFromLocked(f, ok, x.lblk, x.end(), nil)
		t.insertMergeLocked(x)
	}
	t.touch()
	t.unlockAccount()
	return nil
}

// insertInsideLocked inserts x when it lies strictly inside f, the floor
// entry of x.lblk (found says there is one), and merges with neither of
// f's outer parts (a block converted in the middle of an unwritten range):
// f's left part replaces f under the same key, then x and the right part
// go in — three tree walks after the floor where cutting and merging take
// six. It reports false, changing nothing, otherwise.
func (t *Tree) insertInsideLocked(f entry, found bool, x entry) bool {
	if !found || f.lblk >= x.lblk || f.end() <= x.end() {
		return false
	}
	l, r := f.sub(f.lblk, x.lblk), f.sub(x.end(), f.end())
	if mergeable(l, x) || mergeable(x, r) {
		return false
	}
	if f.status() == Delayed {
		t.mu.delayed -= uint64(f.len)
	}
	t.putLocked(l) // replaces f: same key
	t.putLocked(x)
	t.putLocked(r)
	return true
}

// Cache caches the parts of e not already cached, keeping existing entries:
// what was read from disk never overrides newer state such as a Delayed
// range. It mirrors the kernel's ext4_es_cache_extent. Delayed is rejected:
// no disk structure holds it.
func (t *Tree) Cache(e Extent) error {
	if err := e.validate(); err != nil {
		return fmt.Errorf("esc: cache (inode %d): %w", t.ino, err)
	}
	if e.Status == Delayed {
		return fmt.Errorf("esc: cache (inode %d) %v: delayed ranges are not on disk: %w", t.ino, e, ErrInvalid)
	}
	t = t.lockLive()
	t.cacheLocked(toEntry(e))
	t.touch()
	t.unlockAccount()
	return nil
}

// Remove drops every cached block in [lblk, lblk+n), trimming ranges that
// straddle either end. It returns how many Delayed blocks were dropped.
func (t *Tree) Remove(lblk, n uint32) (delayed uint64, err error) {
	if n == 0 {
		return 0, nil
	}
	if uint64(lblk)+uint64(n) > MaxBlocks {
		return 0, fmt.Errorf("esc: remove (inode %d) %d+%d: past logical block %d: %w",
			t.ino, lblk, n, uint64(MaxBlocks), ErrInvalid)
	}
	t = t.lockLive()
	before := t.mu.delayed
	t.cutLocked(lblk, lblk+n, nil)
	delayed = before - t.mu.delayed
	t.unlockAccount()
	return delayed, nil
}

// SetStatus changes cached blocks of [lblk, lblk+n) whose status is from to
// status to, keeping their physical blocks, splitting ranges at the window's
// edges and merging the results with their neighbours. Only Written and
// Unwritten may be converted this way (unwritten-to-written after I/O
// completion, the reverse for zero-range); Delayed to Written needs a
// physical block: use Insert. It returns the number of blocks changed (0
// when from == to); uncached blocks stay uncached.
func (t *Tree) SetStatus(lblk, n uint32, from, to Status) (uint32, error) {
	if !from.mapped() || !to.mapped() {
		return 0, fmt.Errorf("esc: set status (inode %d) %v to %v: only written/unwritten convert in place: %w",
			t.ino, from, to, ErrInvalid)
	}
	if n == 0 {
		return 0, nil
	}
	if uint64(lblk)+uint64(n) > MaxBlocks {
		return 0, fmt.Errorf("esc: set status (inode %d) %d+%d: past logical block %d: %w",
			t.ino, lblk, n, uint64(MaxBlocks), ErrInvalid)
	}
	t = t.lockLive()
	var buf [8]entry
	pieces := t.overlapsLocked(lblk, lblk+n, buf[:0])
	var changed uint32
	for i, p := range pieces {
		pieces[i] = p.sub(max(p.lblk, lblk), min(p.end(), lblk+n)) // clip to the window
		if p.status() == from {
			changed += pieces[i].len
		}
	}
	if changed > 0 && from != to {
		// Cut the window and reinsert the clipped pieces in order.
		t.cutLocked(lblk, lblk+n, nil)
		for _, p := range pieces {
			if p.status() == from {
				p = p.withStatus(to)
			}
			t.insertMergeLocked(p)
		}
	}
	t.touch()
	t.unlockAccount()
	if from == to {
		return 0, nil
	}
	return changed, nil
}

// Range calls fn, in ascending order, for each cached range overlapping
// [lblk, lblk+n), unclipped, until fn returns false. The ranges are copied
// under the read lock and fn runs without it, so fn may use t.
func (t *Tree) Range(lblk, n uint32, fn func(Extent) bool) {
	if n == 0 {
		return
	}
	end := uint32(min(uint64(lblk)+uint64(n), MaxBlocks))
	if lblk >= end {
		return
	}
	lt := t.rlockLive()
	if lt == nil {
		return
	}
	var buf [16]entry
	xs := lt.overlapsLocked(lblk, end, buf[:0])
	lt.mu.RUnlock()
	for _, x := range xs {
		if !fn(x.extent()) {
			return
		}
	}
}

// NextDelayed returns the first Delayed range ending after from (it may
// start before from), for write-back.
func (t *Tree) NextDelayed(from uint32) (Extent, bool) {
	lt := t.rlockLive()
	if lt == nil {
		return Extent{}, false
	}
	defer lt.mu.RUnlock()
	if lt.mu.delayed == 0 {
		return Extent{}, false
	}
	var out entry
	found := false
	start := from
	if f, ok := lt.floorLocked(from); ok {
		start = f.lblk
	}
	lt.mu.bt.AscendGreaterOrEqual(entry{lblk: start}, func(x entry) bool {
		if x.status() == Delayed && x.end() > from {
			out, found = x, true
			return false
		}
		return true
	})
	return out.extent(), found
}

// DelayedBlocks returns the number of Delayed blocks cached for the inode.
func (t *Tree) DelayedBlocks() uint64 {
	lt := t.rlockLive()
	if lt == nil {
		return 0
	}
	defer lt.mu.RUnlock()
	return lt.mu.delayed
}

// Len returns the number of cached ranges.
func (t *Tree) Len() int {
	lt := t.rlockLive()
	if lt == nil {
		return 0
	}
	defer lt.mu.RUnlock()
	return lt.lenLocked()
}

func (t *Tree) lenLocked() int {
	if t.mu.bt == nil {
		return 0
	}
	return t.mu.bt.Len()
}

// floorLocked returns the entry with the greatest lblk <= lblk.
func (t *Tree) floorLocked(lblk uint32) (entry, bool) {
	if t.mu.bt == nil {
		return entry{}, false
	}
	var out entry
	found := false
	t.mu.bt.DescendLessOrEqual(entry{lblk: lblk}, func(x entry) bool {
		out, found = x, true
		return false
	})
	return out, found
}

// overlapsLocked appends to buf the entries overlapping [s, e), ascending.
//
// Preconditions: s < e.
func (t *Tree) overlapsLocked(s, e uint32, buf []entry) []entry {
	f, ok := t.floorLocked(s)
	return t.overlapsFromLocked(f, ok, s, e, buf)
}

// overlapsFromLocked is overlapsLocked given f, the floor entry of s
// (found says there is one).
func (t *Tree) overlapsFromLocked(f entry, found bool, s, e uint32, buf []entry) []entry {
	if t.mu.bt == nil {
		return buf
	}
	if found && f.end() > s {
		buf = append(buf, f)
	}
	if s+1 < e {
		t.mu.bt.AscendRange(entry{lblk: s + 1}, entry{lblk: e}, func(x entry) bool {
			buf = append(buf, x)
			return true
		})
	}
	return buf
}

func (t *Tree) putLocked(x entry) {
	if t.mu.bt == nil {
		t.mu.bt = btree.NewWithFreeListG(Degree, lessEntry, t.c.freelist)
	}
	t.mu.bt.ReplaceOrInsert(x)
	if x.status() == Delayed {
		t.mu.delayed += uint64(x.len)
	}
}

func (t *Tree) delLocked(x entry) {
	t.mu.bt.Delete(x)
	if x.status() == Delayed {
		t.mu.delayed -= uint64(x.len)
	}
}

// cutLocked removes blocks [s, e) from the tree. Entries straddling s or e
// keep their parts outside the window. fn, if non-nil, receives each removed
// piece clipped to [s, e), ascending.
//
// Preconditions: s < e <= MaxBlocks. Postconditions: no entry overlaps
// [s, e); I1..I4 hold (the kept outer parts start or end where the
// originals did, so they stay unmergeable with their outer neighbours).
func (t *Tree) cutLocked(s, e uint32, fn func(entry)) {
	f, ok := t.floorLocked(s)
	t.cutFromLocked(f, ok, s, e, fn)
}

// cutFromLocked is cutLocked given f, the floor entry of s (found says
// there is one).
func (t *Tree) cutFromLocked(f entry, found bool, s, e uint32, fn func(entry)) {
	var buf [8]entry
	for _, x := range t.overlapsFromLocked(f, found, s, e, buf[:0]) {
		t.delLocked(x)
		if x.lblk < s {
			t.putLocked(x.sub(x.lblk, s))
		}
		if x.end() > e {
			t.putLocked(x.sub(e, x.end()))
		}
		if fn != nil {
			fn(x.sub(max(x.lblk, s), min(x.end(), e)))
		}
	}
}

// insertMergeLocked inserts x, merging it with its neighbours when mergeable.
//
// Preconditions: no entry overlaps x. Postconditions: I1..I4 hold for the
// entry covering x and its neighbours.
func (t *Tree) insertMergeLocked(x entry) {
	if x.lblk > 0 {
		// Merged with its left neighbour, x takes that entry's key, so
		// putLocked below replaces it: only its Delayed count goes here.
		if l, ok := t.floorLocked(x.lblk - 1); ok && mergeable(l, x) {
			x = merge(l, x)
			if l.status() == Delayed {
				t.mu.delayed -= uint64(l.len)
			}
		}
	}
	if t.mu.bt != nil && x.end() < MaxBlocks {
		if r, ok := t.mu.bt.Get(entry{lblk: x.end()}); ok && mergeable(x, r) {
			t.delLocked(r)
			x = merge(x, r)
		}
	}
	t.putLocked(x)
}

// cacheLocked inserts the parts of x in gaps between existing entries.
func (t *Tree) cacheLocked(x entry) {
	var buf [8]entry
	pos := x.lblk
	for _, o := range t.overlapsLocked(x.lblk, x.end(), buf[:0]) {
		if o.lblk > pos {
			t.insertMergeLocked(x.sub(pos, o.lblk))
		}
		pos = max(pos, o.end())
	}
	if pos < x.end() {
		t.insertMergeLocked(x.sub(pos, x.end()))
	}
}

// reclaimLocked drops every entry but the Delayed ones and returns how many
// entries were dropped.
func (t *Tree) reclaimLocked() int {
	n := t.lenLocked()
	if n == 0 {
		return 0
	}
	if t.mu.delayed == 0 {
		t.mu.bt.Clear(true)
		t.mu.bt = nil
		return n
	}
	keep := btree.NewWithFreeListG(Degree, lessEntry, t.c.freelist)
	t.mu.bt.Ascend(func(x entry) bool {
		if x.status() == Delayed {
			keep.ReplaceOrInsert(x)
		}
		return true
	})
	t.mu.bt.Clear(true)
	t.mu.bt = keep
	return n - keep.Len()
}

// check verifies I1..I4 for this tree; tests use it.
func (t *Tree) check() error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.mu.bt == nil {
		if t.mu.delayed != 0 {
			return fmt.Errorf("empty tree with %d delayed blocks", t.mu.delayed)
		}
		return nil
	}
	var prev entry
	first := true
	var delayed uint64
	var err error
	t.mu.bt.Ascend(func(x entry) bool {
		if e := toEntryCheck(x); e != nil {
			err = e
			return false
		}
		if !first {
			if prev.end() > x.lblk {
				err = fmt.Errorf("overlap: %v then %v", prev.extent(), x.extent())
				return false
			}
			if mergeable(prev, x) {
				err = fmt.Errorf("unmerged: %v then %v", prev.extent(), x.extent())
				return false
			}
		}
		if x.status() == Delayed {
			delayed += uint64(x.len)
		}
		prev, first = x, false
		return true
	})
	if err == nil && delayed != t.mu.delayed {
		err = fmt.Errorf("delayed count %d, entries hold %d", t.mu.delayed, delayed)
	}
	return err
}

func toEntryCheck(x entry) error {
	e := x.extent()
	if err := e.validate(); err != nil {
		return err
	}
	if !e.Status.mapped() && x.pblk() != 0 {
		return fmt.Errorf("%v: unmapped entry with pblk %d", e, x.pblk())
	}
	return nil
}
