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
	t.mu.Lock()
	defer t.mu.Unlock()
	if n == 0 || uint64(from)+uint64(n) > EndLblk {
		return invalidf("replace [%d,+%d)", from, n)
	}
	next := uint64(from)
	for _, e := range with {
		if e.Unwritten || uint64(e.Lblk) != next {
			return invalidf("replace [%d,+%d): extent [%d,+%d) unwritten, out of order or leaving a gap", from, n, e.Lblk, e.Len)
		}
		if err := t.checkExtent(e); err != nil {
			return err
		}
		next = e.End()
	}
	if next != uint64(from)+uint64(n) {
		return invalidf("replace [%d,+%d): the new extents end at %d", from, n, next)
	}
	return t.run(mustSucceed, func(tx *txn) error {
		if err := tx.remove(from, from+n-1); err != nil {
			return err
		}
		for _, e := range with {
			if err := tx.insert(e, false); err != nil {
				return err
			}
		}
		return nil
	})
}
