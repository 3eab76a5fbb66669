package extent

import "fmt"

// Shift moves every extent that starts at or after from by delta blocks
// (toward block 0 when delta < 0), as ext4_ext_shift_extents does for
// collapse-range and insert-range, and fixes the index keys above them.
//
// Preconditions, checked (ErrInvalid otherwise): no extent straddles from
// (SplitAt first); with delta < 0, no extent lies in [from+delta, from)
// (Remove it first); with delta > 0, the last extent still ends at or
// before EndLblk after the move. Shift allocates nothing, so it cannot
// fail for want of space; on any error the tree is unchanged.
func (t *Tree) Shift(from uint32, delta int64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if delta == 0 {
		return nil
	}
	if delta < 0 && int64(from)+delta < 0 {
		return invalidf("shift of block %d by %d goes below block 0", from, delta)
	}
	var last uint64
	err := t.walkLocked(func(path []pathElem) error {
		for _, e := range path[len(path)-1].n.ext {
			switch {
			case e.Lblk < from && e.End() > uint64(from):
				return invalidf("extent [%d,+%d) straddles block %d", e.Lblk, e.Len, from)
			case delta < 0 && e.End() > uint64(int64(from)+delta) && e.Lblk < from:
				return invalidf("extent [%d,+%d) lies in the %d blocks shifted over", e.Lblk, e.Len, -delta)
			}
			last = max(last, e.End())
		}
		return nil
	}, nil)
	if err != nil {
		return err
	}
	if delta > 0 && last > uint64(from) && int64(last)+delta > EndLblk {
		return fmt.Errorf("extent: inode %d: shifting by %d moves extents past block %d: %w", t.cfg.Ino, delta, uint32(EndLblk), ErrNoSpace)
	}
	return t.run(false, func(tx *txn) error {
		return tx.shiftNode(t.mu.root, EndLblk, from, delta)
	})
}

// ShiftBlocks returns how many tree blocks (leaves and index blocks; the
// root in the inode is not counted) Shift(from, delta) would change, at
// most: every leaf holding an extent that starts at or after from, and
// every index block above such a leaf, whose keys may change with it. A
// caller bounding the metadata one transaction changes checks it before
// the shift. It reads the whole tree, as Shift does.
func (t *Tree) ShiftBlocks(from uint32) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	touched := make(map[uint64]struct{})
	err := t.walkLocked(func(path []pathElem) error {
		leaf := path[len(path)-1].n
		if len(leaf.ext) == 0 || leaf.ext[len(leaf.ext)-1].Lblk < from {
			return nil
		}
		for _, p := range path {
			if !p.n.root {
				touched[p.n.pblk] = struct{}{}
			}
		}
		return nil
	}, nil)
	if err != nil {
		return 0, err
	}
	return len(touched), nil
}

// shiftNode shifts the entries of n (whose key range ends at hi) that
// start at or after from, recursing into children that hold any.
func (tx *txn) shiftNode(n *node, hi uint64, from uint32, delta int64) error {
	t := tx.t
	if n.hdr.Depth == 0 {
		for i := range n.ext {
			if n.ext[i].Lblk >= from {
				tx.touch(n)
				n.ext[i].Lblk = uint32(int64(n.ext[i].Lblk) + delta)
			}
		}
		return nil
	}
	for i := 0; i < len(n.idx); i++ {
		chi := hi
		if i+1 < len(n.idx) {
			chi = uint64(n.idx[i+1].Lblk)
		}
		if chi <= uint64(from) {
			continue // the whole child lies before from
		}
		x := n.idx[i]
		child, err := t.loadLocked(x.Pblk, int(n.hdr.Depth)-1, uint64(x.Lblk), chi, func() string {
			return fmt.Sprintf("shift: depth %d idx %d -> block %d", n.hdr.Depth, i, x.Pblk)
		})
		if err != nil {
			return err
		}
		if err := tx.shiftNode(child, chi, from, delta); err != nil {
			return err
		}
		if child.entries() == 0 {
			continue
		}
		// A key that was shifted becomes the child's (shifted) first key;
		// a key below from stays unless the child now starts below it.
		if old, fk := n.idx[i].Lblk, child.firstKey(); (old >= from || fk < old) && fk != old {
			tx.touch(n)
			n.idx[i].Lblk = fk
		}
	}
	return nil
}
