package extent

// Replace maps logical blocks [from, from+n) to the written extents with,
// in place of whatever mapped them before (written or unwritten extents,
// or nothing), as one all-or-nothing mutation: the copy-on-write step of an
// untorn multi-block write, which writes the new data to fresh blocks and
// then swaps the mapping. with must be sorted, must not overlap, must lie
// inside the range and must cover all of it; each is merged with a
// physically contiguous neighbour as Insert merges. The blocks unmapped
// go to Allocator.FreeData once the tree is written, as Remove's do. With
// mustSucceed the tree blocks a split needs may come from the allocator's
// reserve. On any error the tree is unchanged.
func (t *Tree) Replace(from, n uint32, with []Extent, mustSucceed bool) error {
	return t.ReplaceRanges([]ReplaceRange{{Lblk: from, Len: n, With: with}}, mustSucceed)
}

// ReplaceRange is one range of ReplaceRanges: logical blocks
// [Lblk, Lblk+Len) to be mapped to With, as in Replace.
type ReplaceRange struct {
	Lblk, Len uint32
	With      []Extent
}

// ReplaceRanges is Replace for several ranges as one all-or-nothing
// mutation, in which each changed tree block is encoded and written once:
// the swap of an untorn batch of pages. The ranges must be sorted by Lblk
// and must not overlap; each one's With is as Replace's. New extents of
// adjacent ranges that are physically contiguous merge into one. On any
// error the tree is unchanged and nothing is freed.
//
// Each range still walks the tree from the root, once for its removal and
// once per new extent; only the encoding, the block writes and the
// allocator's frees happen once for the whole batch.
func (t *Tree) ReplaceRanges(rs []ReplaceRange, mustSucceed bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(rs) == 0 {
		return nil
	}
	prevEnd := uint64(0)
	for i, r := range rs {
		if err := checkReplace(r.Lblk, r.Len, r.With); err != nil {
			return err
		}
		if i > 0 && uint64(r.Lblk) < prevEnd {
			return invalidf("replace [%d,+%d): out of order with or overlapping the range ending at %d", r.Lblk, r.Len, prevEnd)
		}
		for _, e := range r.With {
			if err := t.checkExtent(e); err != nil {
				return err
			}
		}
		prevEnd = uint64(r.Lblk) + uint64(r.Len)
	}
	return t.run(mustSucceed, func(tx *txn) error {
		for _, r := range rs {
			if err := tx.remove(r.Lblk, r.Lblk+r.Len-1); err != nil {
				return err
			}
			for _, e := range r.With {
				if err := tx.insert(e, false); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// checkReplace checks the arguments of a Replace of [from, from+n) by
// with, short of checkExtent.
func checkReplace(from, n uint32, with []Extent) error {
	if n == 0 || uint64(from)+uint64(n) > EndLblk {
		return invalidf("replace [%d,+%d)", from, n)
	}
	next := uint64(from)
	for _, e := range with {
		if e.Unwritten || uint64(e.Lblk) != next {
			return invalidf("replace [%d,+%d): extent [%d,+%d) unwritten, out of order or leaving a gap", from, n, e.Lblk, e.Len)
		}
		next = e.End()
	}
	if next != uint64(from)+uint64(n) {
		return invalidf("replace [%d,+%d): the new extents end at %d", from, n, next)
	}
	return nil
}

// RangeBlocks returns the number of tree blocks (leaves and index blocks,
// not the in-inode root) on the paths to the extents that map any of
// [from, from+n): the blocks a Replace or Remove of the range changes,
// before the splits and merges it may add. Callers use it to bound the
// metadata of a change that must fit one journal transaction.
func (t *Tree) RangeBlocks(from, n uint32) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n == 0 {
		return 0, nil
	}
	last := uint64(from) + uint64(n) - 1
	path, _, err := t.firstFromLocked(from)
	if err != nil || path == nil {
		return 0, err
	}
	seen := map[uint64]bool{}
	for path != nil {
		leaf := path[len(path)-1].n
		if len(leaf.ext) > 0 && uint64(leaf.ext[0].Lblk) > last {
			break
		}
		for _, p := range path {
			if !p.n.root && p.n != t.mu.root {
				seen[p.n.pblk] = true
			}
		}
		if len(leaf.ext) > 0 && leaf.ext[len(leaf.ext)-1].End() > last {
			break
		}
		if path, err = t.nextLeafLocked(path); err != nil {
			return 0, err
		}
		if len(seen) > 1<<20 {
			return 0, t.cfg.corrupt(0, -1, "range [%d,+%d) spans more than 2^20 tree blocks", from, n)
		}
	}
	return len(seen), nil
}
