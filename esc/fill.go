package esc

import (
	"errors"
	"fmt"
)

// LookupFunc finds lblk in the inode's on-disk mapping. It returns the whole
// on-disk extent containing lblk (Written or Unwritten), or, when lblk is
// unmapped, the whole hole around it as a Hole extent: from the end of the
// previous extent (or 0) to the start of the next one (or MaxBlocks). inRoot
// reports that the answer came from the extent root stored in the inode
// itself (tree depth 0), which costs no block read. esc calls it with no
// lock held, from the goroutine calling Fill.
type LookupFunc func(lblk uint32) (ext Extent, inRoot bool, err error)

// WalkFunc calls fn for every on-disk extent of an inode in ascending
// logical order, stopping at fn's first error and returning it. esc calls
// it with no lock held, from the goroutine calling Precache.
type WalkFunc func(fn func(Extent) error) error

// errPrecacheLimit stops a walk that exceeds Options.PrecacheLimit.
var errPrecacheLimit = errors.New("esc: precache limit reached")

// Fill returns the extent containing lblk: the cached range on a hit;
// otherwise it calls lookup, caches its whole answer (unless Options.SkipInRoot
// and the answer came from the in-inode root) and returns it. Caching the
// whole extent or hole means random reads of a file with one extent leave
// one entry, not one per read.
//
// Fill caches with Cache semantics, never overriding newer entries; callers
// that change the on-disk tree must update the cache (Insert, Remove) while
// holding the lock that serializes them with lookup, as ext4 does with
// i_data_sem.
func (t *Tree) Fill(lblk uint32, lookup LookupFunc) (Extent, error) {
	if lblk >= MaxBlocks {
		return Extent{}, fmt.Errorf("esc: fill (inode %d) block %d: past logical block %d: %w",
			t.ino, lblk, uint64(MaxBlocks), ErrInvalid)
	}
	if e, ok := t.Lookup(lblk); ok {
		return e, nil
	}
	if lookup == nil {
		return Extent{}, fmt.Errorf("esc: fill (inode %d) block %d: miss and no lookup function: %w", t.ino, lblk, ErrInvalid)
	}
	t.c.stats.fills.Add(1)
	e, inRoot, err := lookup(lblk)
	if err != nil {
		return Extent{}, fmt.Errorf("esc: fill (inode %d) block %d: %w", t.ino, lblk, err)
	}
	if err := e.validate(); err != nil {
		return Extent{}, fmt.Errorf("esc: fill (inode %d) block %d: lookup returned: %w", t.ino, lblk, err)
	}
	if !e.Contains(lblk) || e.Status == Delayed {
		return Extent{}, fmt.Errorf("esc: fill (inode %d) block %d: lookup returned %v: %w",
			t.ino, lblk, e, ErrInvalid)
	}
	if inRoot && t.c.opts.SkipInRoot {
		t.c.stats.fillSkips.Add(1)
		return e, nil
	}
	if err := t.Cache(e); err != nil {
		return Extent{}, err
	}
	// A concurrent change may have replaced part of e; report the cache.
	if c, ok := t.peek(lblk); ok {
		return c, nil
	}
	return e, nil
}

// Precache loads the inode's whole on-disk mapping: every extent walk
// yields and every hole between them (and before the first and after the
// last, up to MaxBlocks), with Cache semantics. It stops early, keeping
// what it cached and returning done == false, once the walk yields more than
// Options.PrecacheLimit extents, so only small trees are loaded whole.
// Extents out of order, overlapping or Delayed fail with ErrInvalid.
func (t *Tree) Precache(walk WalkFunc) (done bool, err error) {
	var pos uint32 // end of the previous extent
	n := 0
	werr := walk(func(e Extent) error {
		if err := e.validate(); err != nil {
			return err
		}
		if !e.Status.mapped() {
			return fmt.Errorf("extent %v: walk yields only written/unwritten extents: %w", e, ErrInvalid)
		}
		if e.Lblk < pos {
			return fmt.Errorf("extent %v: out of order or overlapping (previous ends at %d): %w", e, pos, ErrInvalid)
		}
		if n++; n > t.c.opts.PrecacheLimit {
			return errPrecacheLimit
		}
		if e.Lblk > pos {
			if err := t.Cache(Extent{Lblk: pos, Len: e.Lblk - pos, Status: Hole}); err != nil {
				return err
			}
		}
		pos = e.End()
		return t.Cache(e)
	})
	switch {
	case errors.Is(werr, errPrecacheLimit):
		return false, nil
	case werr != nil:
		return false, fmt.Errorf("esc: precache (inode %d): %w", t.ino, werr)
	}
	if pos < MaxBlocks {
		if err := t.Cache(Extent{Lblk: pos, Len: MaxBlocks - pos, Status: Hole}); err != nil {
			return false, err
		}
	}
	t.c.stats.precach.Add(1)
	return true, nil
}
