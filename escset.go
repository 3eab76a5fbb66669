package ext4io

import (
	"github.com/ext4io/ext4io/esc"
)

// The extent-status cache is striped by logical region. Each inode's
// mappings live in up to escStripes trees, one in each of escStripes
// esc.Caches, each made when first needed (mapper.escTree):
// block b of inode ino is cached in stripe (b>>escRegionShift + ino) mod
// escStripes, and no entry crosses a region boundary. Writers into
// different regions of one file then take different tree locks. ext4
// has one i_es_lock per inode, a spinlock; a Go mutex taken by every write
// into preallocated space convoyed under 16 writers on 2 CPUs when each
// completion mapped its blocks written in the cache (they are marked in
// convbits now, which takes no lock). Adding ino spreads small files, which live
// in one region, over the stripes, so each Cache's share of the budget
// serves its share of the files.
const (
	escStripes     = 8
	escRegionShift = 13 // 8192 blocks: 32 MiB regions with 4 KiB blocks
	escRegion      = 1 << escRegionShift
)

// escSet is a volume's striped extent-status cache.
type escSet [escStripes]*esc.Cache

func newEscSet(budget int64, skipInRoot bool) *escSet {
	var s escSet
	for i := range s {
		s[i] = esc.New(esc.Options{Budget: max(budget/escStripes, 1), SkipInRoot: skipInRoot})
	}
	return &s
}

// escTree returns the inode's tree in stripe i, made on first use: the
// blocks of most files lie in one region, so most of their stripes never
// need a tree (and a tree made costs a map entry and a share of the
// budget, and may push an older one out). Two callers racing to make it
// get the same tree, or one retired meanwhile, through which calls reach
// its successor (esc.Tree).
func (m *mapper) escTree(i int) *esc.Tree {
	if t := m.esT[i].Load(); t != nil {
		return t
	}
	t := m.es[i].Inode(m.cfg.Ino)
	m.esT[i].Store(t)
	return t
}

// escPeek returns the inode's tree in stripe i, or nil if it has none
// there (nothing of it is cached in that stripe).
func (m *mapper) escPeek(i int) *esc.Tree {
	if t := m.esT[i].Load(); t != nil {
		return t
	}
	return m.es[i].Lookup(m.cfg.Ino)
}

// Forget drops everything cached for ino and returns the Delayed blocks
// dropped (see esc.Cache.Forget).
func (s *escSet) Forget(ino uint32) (delayed uint64) {
	for _, c := range s {
		delayed += c.Forget(ino)
	}
	return delayed
}

// DropClean drops every cached mapping but Delayed ranges, of every
// inode (esc.Cache.Shrink to nothing).
func (s *escSet) DropClean() {
	for _, c := range s {
		c.Shrink(0)
	}
}

// Stats sums the stripes' counters. Inodes counts per-stripe trees (an
// inode has up to escStripes); Budget is the whole budget.
func (s *escSet) Stats() esc.Stats {
	var t esc.Stats
	for _, c := range s {
		x := c.Stats()
		t.Hits += x.Hits
		t.Misses += x.Misses
		t.Entries += x.Entries
		t.Inodes += x.Inodes
		t.Bytes += x.Bytes
		t.Budget += x.Budget
		t.DelayedBlocks += x.DelayedBlocks
		t.Reclaimed += x.Reclaimed
		t.EvictedInodes += x.EvictedInodes
		t.ShrinkRuns += x.ShrinkRuns
		t.Fills += x.Fills
		t.FillSkips += x.FillSkips
		t.PrecachedTrees += x.PrecachedTrees
	}
	return t
}

// escStripe returns the stripe caching block lblk of inode ino.
func escStripe(ino, lblk uint32) int {
	return int((lblk>>escRegionShift + ino) % escStripes)
}

// regionOf returns the bounds of the region holding lblk.
func regionOf(lblk uint32) (lo, hi uint64) {
	lo = uint64(lblk) &^ (escRegion - 1)
	return lo, min(lo+escRegion, esc.MaxBlocks)
}

// clipRegion cuts e, which holds lblk, to lblk's region.
func clipRegion(e esc.Extent, lblk uint32) esc.Extent {
	lo, hi := regionOf(lblk)
	s, f := max(uint64(e.Lblk), lo), min(uint64(e.End()), hi)
	if e.Status == esc.Written || e.Status == esc.Unwritten {
		e.Pblk += s - uint64(e.Lblk)
	}
	e.Lblk, e.Len = uint32(s), uint32(f-s)
	return e
}

// escInsert caches e, region by region, after the appended Delayed run
// (delayrun.go).
func (m *mapper) escInsert(e esc.Extent) error {
	if err := m.flushRun(); err != nil {
		return err
	}
	return m.escInsertNow(e)
}

// escInsertNow is escInsert without flushing the run.
func (m *mapper) escInsertNow(e esc.Extent) error {
	for e.Len > 0 {
		x := clipRegion(e, e.Lblk)
		if err := m.escTree(escStripe(m.cfg.Ino, x.Lblk)).Insert(x); err != nil {
			return err
		}
		e.Lblk, e.Len = x.End(), e.Len-x.Len
		if e.Status == esc.Written || e.Status == esc.Unwritten {
			e.Pblk += uint64(x.Len)
		}
	}
	return nil
}

// escEach calls fn with the trees that may cache blocks of [lblk,
// lblk+n), and the part of the range each one is asked about: the piece
// in its region when the range spans at most escStripes regions, else the
// whole range in every tree (entries never cross regions, so a tree only
// holds blocks of its own regions). A stripe where the inode has no tree
// caches none of its blocks and is skipped.
func (m *mapper) escEach(lblk, n uint32, fn func(t *esc.Tree, lblk, n uint32) error) error {
	end := uint64(lblk) + uint64(n)
	if n == 0 {
		return nil
	}
	if (end-1)>>escRegionShift-uint64(lblk)>>escRegionShift >= escStripes {
		for i := range escStripes {
			if t := m.escPeek(i); t != nil {
				if err := fn(t, lblk, n); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for b := uint64(lblk); b < end; {
		_, hi := regionOf(uint32(b))
		f := min(hi, end)
		if t := m.escPeek(escStripe(m.cfg.Ino, uint32(b))); t != nil {
			if err := fn(t, uint32(b), uint32(f-b)); err != nil {
				return err
			}
		}
		b = f
	}
	return nil
}

// escRemove forgets the cached mapping of [lblk, lblk+n) and returns the
// Delayed blocks dropped.
func (m *mapper) escRemove(lblk, n uint32) (delayed uint64, err error) {
	if err := m.flushRun(); err != nil {
		return 0, err
	}
	err = m.escEach(lblk, n, func(t *esc.Tree, lblk, n uint32) error {
		d, err := t.Remove(lblk, n)
		delayed += d
		return err
	})
	return delayed, err
}

// escRange calls fn for the cached entries overlapping [lblk, lblk+n)
// until fn returns false; entries come in order within a region, not
// across regions. The appended Delayed run is flushed first; should that
// fail (it cannot: its bounds are checked as it grows), its blocks are
// not listed.
func (m *mapper) escRange(lblk, n uint32, fn func(esc.Extent) bool) {
	_ = m.flushRun()
	more := true
	m.escEach(lblk, n, func(t *esc.Tree, lblk, n uint32) error {
		if more {
			t.Range(lblk, n, func(e esc.Extent) bool {
				more = fn(e)
				return more
			})
		}
		return nil
	})
}

// escFill returns the cached range holding lblk, filling a miss from the
// tree (diskLookup), cut to lblk's region.
func (m *mapper) escFill(lblk uint32) (esc.Extent, error) {
	if err := m.flushRun(); err != nil {
		return esc.Extent{}, err
	}
	return m.escTree(escStripe(m.cfg.Ino, lblk)).Fill(lblk, func(b uint32) (esc.Extent, bool, error) {
		e, inRoot, err := m.diskLookup(b)
		if err == nil {
			e = clipRegion(e, b)
		}
		return e, inRoot, err
	})
}
