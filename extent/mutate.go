package extent

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/ext4io/ext4io/internal/errs"
)

// Mutations stage every change in memory, in the decoded nodes, and
// allocate tree blocks as the change needs them. If an allocation or read
// fails, each changed node is decoded again from its last-written bytes
// (node.raw) and the blocks allocated so far are returned with
// FreeTreeBlock: nothing was written and the tree is as it was. Only when
// the whole operation has succeeded in memory are the changed blocks written
// (children before parents, the root last, in memory) and then the freed
// tree and data blocks handed to the Allocator. A write error at that point
// leaves the on-disk tree inconsistent; the Tree then refuses further use (as
// ext4 aborts).

// txn is the staged state of one mutation. The Tree keeps one in t.mu.tx
// (guarded by t.mu, which is held for the whole mutation) and reuses its
// slices.
type txn struct {
	t        *Tree
	order    []*node     // touched or created nodes, in first-touch order
	created  []uint64    // blocks allocated by this mutation
	freed    []*node     // tree nodes dropped by this mutation
	freeData [][2]uint64 // data runs unmapped by this mutation
	merge    []Extent    // mergeRuns' scratch
	must     bool        // pass mustSucceed to the allocator
}

// maxKeep bounds the capacity of a txn slice kept for the next mutation.
const maxKeep = 1024

func (t *Tree) begin(must bool) (*txn, error) {
	if t.mu.broken != nil {
		return nil, t.mu.broken
	}
	if t.cfg.Alloc == nil {
		return nil, invalidf("Config.Alloc is nil")
	}
	tx := &t.mu.tx
	tx.t, tx.must = t, must
	return tx, nil
}

// end empties tx for the next mutation, dropping its node pointers.
func (tx *txn) end() {
	clear(tx.order)
	clear(tx.freed)
	tx.order, tx.freed = tx.order[:0], tx.freed[:0]
	tx.created, tx.freeData, tx.merge = tx.created[:0], tx.freeData[:0], tx.merge[:0]
	if cap(tx.order) > maxKeep || cap(tx.freed) > maxKeep || cap(tx.created) > maxKeep || cap(tx.freeData) > maxKeep || cap(tx.merge) > maxKeep {
		*tx = txn{}
	}
}

// touch marks n changed by this mutation before a change to any of its
// entries or its header. A clean node still decodes from n.raw, which
// abort uses to put it back.
func (tx *txn) touch(n *node) { tx.touchSpan(n, 0, 0) }

// touchSpan is touch before a change that leaves n's entries before index i
// in place and its last keep entries unchanged (though they may move), so
// that commit need not encode them again. Understating i or keep is safe.
func (tx *txn) touchSpan(n *node, i, keep int) {
	keep = max(keep, 0)
	if !n.dirty {
		n.dirty = true
		n.from, n.keep = i, keep
		tx.order = append(tx.order, n)
	}
	n.from, n.keep = min(n.from, i), min(n.keep, keep)
}

// alloc allocates and registers a new node.
func (tx *txn) alloc(goal uint64, depth int) (*node, error) {
	t := tx.t
	if goal == 0 {
		goal = t.cfg.Goal
	}
	p, err := t.cfg.Alloc.AllocTreeBlock(goal, tx.must)
	if err != nil {
		return nil, fmt.Errorf("extent: inode %d: allocating a tree block: %w", t.cfg.Ino, err)
	}
	if t.cfg.inSystemZone(p, 1) {
		// Not returned on abort: the bitmap that offered it lies.
		return nil, t.cfg.corrupt(0, -1, "allocator returned block %d, which is file-system metadata", p)
	}
	if !t.cfg.pblkOK(p, 1) || t.mu.cache[p] != nil {
		tx.created = append(tx.created, p) // returned on abort
		return nil, fmt.Errorf("extent: allocator returned block %d, unusable for inode %d: %w", p, t.cfg.Ino, ErrInvalid)
	}
	tx.created = append(tx.created, p)
	n := &node{pblk: p, hdr: Header{Magic: Magic, Max: uint16(t.cfg.newCap()), Depth: uint16(depth)}, dirty: true}
	tx.order = append(tx.order, n)
	t.mu.cache[p] = n
	return n, nil
}

// free drops tree node n (not the root) at commit.
func (tx *txn) free(n *node) {
	tx.touch(n)
	n.freed = true
	tx.freed = append(tx.freed, n)
}

// abort puts back every staged node and frees the blocks allocated.
func (tx *txn) abort(cause error) error {
	t := tx.t
	for _, n := range tx.order {
		if n.raw == nil {
			continue // created by this mutation; dropped below
		}
		// raw decoded to n's state before this mutation, so this succeeds
		// unless the package has a bug.
		old, err := t.decodeNode(n.raw, n.pblk, n.root, -1, "undo")
		if err != nil {
			t.mu.broken = fmt.Errorf("extent: inode %d: undoing a failed change: %w", t.cfg.Ino, err)
			return errs.Join(cause, t.mu.broken)
		}
		*n = *old
	}
	for _, p := range tx.created {
		delete(t.mu.cache, p)
	}
	for _, p := range tx.created {
		if err := t.cfg.Alloc.FreeTreeBlock(p); err != nil {
			return errs.Join(cause, err)
		}
	}
	return cause
}

// commit writes every changed block, then hands back freed blocks.
func (tx *txn) commit() error {
	t := tx.t
	// Children before parents: blocks by increasing depth, then the root.
	for d := 0; d <= MaxDepth; d++ {
		for _, n := range tx.order {
			if n.root || n.freed || int(n.hdr.Depth) != d {
				continue
			}
			if n.raw == nil {
				n.raw = make([]byte, t.cfg.BlockSize)
			}
			t.encodeOver(n, n.raw, n.from, n.keep)
			if err := t.cfg.IO.WriteBlock(n.pblk, n.raw); err != nil {
				t.mu.broken = fmt.Errorf("extent: inode %d: tree half-written: %w", t.cfg.Ino, err)
				return t.mu.broken
			}
			n.dirty = false
		}
	}
	if r := t.mu.root; r.dirty {
		t.encodeOver(r, r.raw, 0, 0)
		r.dirty = false
	}
	var errOut error
	for _, n := range tx.freed {
		delete(t.mu.cache, n.pblk)
		if err := t.cfg.Alloc.FreeTreeBlock(n.pblk); err != nil && errOut == nil {
			errOut = err
		}
	}
	for _, r := range tx.freeData {
		if err := t.cfg.Alloc.FreeData(r[0], r[1]); err != nil && errOut == nil {
			errOut = err
		}
	}
	return errOut
}

// run executes op as one all-or-nothing mutation.
func (t *Tree) run(must bool, op func(tx *txn) error) error {
	tx, err := t.begin(must)
	if err != nil {
		return err
	}
	defer tx.end()
	if err := op(tx); err != nil {
		return tx.abort(err)
	}
	if err := tx.shrink(); err != nil {
		return tx.abort(err)
	}
	return tx.commit()
}

func maxLen(unwritten bool) uint32 {
	if unwritten {
		return MaxUnwrittenLen
	}
	return MaxWrittenLen
}

// canMerge reports whether b directly follows a, logically and physically,
// in the same state, and the merged extent is not too long.
func canMerge(a, b Extent) bool {
	return a.End() == uint64(b.Lblk) && a.Pblk+uint64(a.Len) == b.Pblk &&
		a.Unwritten == b.Unwritten && a.Len+b.Len <= maxLen(a.Unwritten)
}

// fixKeys makes the index keys above path[level] match its node's first key
// after that key changed (ext4_ext_correct_indexes).
func (tx *txn) fixKeys(path []pathElem, level int) {
	key := path[level].n.firstKey()
	for l := level - 1; l >= 0; l-- {
		p := path[l]
		if p.n.idx[p.pos].Lblk != key {
			tx.touchSpan(p.n, p.pos, len(p.n.idx)-p.pos-1)
			p.n.idx[p.pos].Lblk = key
		}
		if p.pos != 0 {
			return
		}
	}
}

// goalFor returns an allocation goal near the data path maps.
func (tx *txn) goalFor(path []pathElem) uint64 {
	leaf := path[len(path)-1]
	if len(leaf.n.ext) > 0 {
		i := leaf.pos
		if i < 0 {
			i = 0
		}
		e := leaf.n.ext[i]
		return e.Pblk + uint64(e.Len)
	}
	if len(path) > 1 {
		return path[len(path)-2].n.idx[path[len(path)-2].pos].Pblk
	}
	return 0
}

// insert adds e, which overlaps no extent, merging it with a contiguous
// neighbour in its leaf unless noMerge, and making room by splitting nodes
// or growing the tree as ext4_ext_insert_extent does.
func (tx *txn) insert(e Extent, noMerge bool) error {
	path, err := tx.t.findLocked(e.Lblk)
	if err != nil {
		return err
	}
	return tx.insertPath(path, e, noMerge)
}

// insertPath is insert given path == findLocked(e.Lblk).
func (tx *txn) insertPath(path []pathElem, e Extent, noMerge bool) error {
	t := tx.t
	for try := 0; try < 2*MaxDepth+4; try++ {
		if try > 0 {
			var err error
			if path, err = t.findLocked(e.Lblk); err != nil {
				return err
			}
		}
		lv := len(path) - 1
		leaf, pos := path[lv].n, path[lv].pos
		if !noMerge {
			if pos >= 0 && canMerge(leaf.ext[pos], e) {
				tx.touchSpan(leaf, pos, len(leaf.ext)-pos-2) // pos+1 may merge too
				leaf.ext[pos].Len += e.Len
				if pos+1 < len(leaf.ext) && canMerge(leaf.ext[pos], leaf.ext[pos+1]) {
					leaf.ext[pos].Len += leaf.ext[pos+1].Len
					leaf.ext = append(leaf.ext[:pos+1], leaf.ext[pos+2:]...)
				}
				return nil
			}
			if pos+1 < len(leaf.ext) && canMerge(e, leaf.ext[pos+1]) {
				tx.touchSpan(leaf, pos+1, len(leaf.ext)-pos-2)
				x := &leaf.ext[pos+1]
				x.Lblk, x.Pblk, x.Len = e.Lblk, e.Pblk, x.Len+e.Len
				if pos+1 == 0 {
					tx.fixKeys(path, lv)
				}
				return nil
			}
		}
		if len(leaf.ext) < int(leaf.hdr.Max) {
			tx.touchSpan(leaf, pos+1, len(leaf.ext)-pos-1)
			leaf.ext = append(leaf.ext, Extent{})
			copy(leaf.ext[pos+2:], leaf.ext[pos+1:])
			leaf.ext[pos+1] = e
			if pos+1 == 0 {
				tx.fixKeys(path, lv)
			}
			return nil
		}
		if err := tx.makeRoom(path, e.Lblk); err != nil {
			return err
		}
	}
	return t.cfg.corrupt(0, -1, "insert of [%d,+%d) did not converge", e.Lblk, e.Len)
}

// makeRoom splits the full leaf at the end of path after its insertion
// point (ext4_ext_split), or, when every node up to the root is full, moves
// the root's entries into a new block (ext4_ext_grow_indepth). The caller
// looks the path up again afterwards.
func (tx *txn) makeRoom(path []pathElem, newLblk uint32) error {
	lv := len(path) - 1
	at := -1
	for l := lv - 1; l >= 0; l-- {
		if len(path[l].n.idx) < int(path[l].n.hdr.Max) {
			at = l
			break
		}
	}
	goal := tx.goalFor(path)
	if at < 0 {
		return tx.grow(goal)
	}
	// Allocate the new nodes for levels at+1..lv before changing anything.
	fresh := make([]*node, lv+1)
	for l := at + 1; l <= lv; l++ {
		n, err := tx.alloc(goal, int(path[l].n.hdr.Depth))
		if err != nil {
			return err
		}
		fresh[l] = n
	}
	leaf := path[lv].n
	split := path[lv].pos + 1
	if split < 1 {
		split = 1
	}
	tx.touch(leaf)
	// Room for the new leaf to fill up without growing its slice.
	moved := append(make([]Extent, 0, max(len(leaf.ext)-split, int(fresh[lv].hdr.Max))), leaf.ext[split:]...)
	leaf.ext = leaf.ext[:split]
	border := newLblk
	if len(moved) > 0 {
		border = moved[0].Lblk
	}
	fresh[lv].ext = moved
	for l := lv - 1; l > at; l-- {
		n := path[l].n
		tx.touch(n)
		fresh[l].idx = append([]Index{{Lblk: border, Pblk: fresh[l+1].pblk}}, n.idx[path[l].pos+1:]...)
		n.idx = n.idx[:path[l].pos+1]
	}
	p := path[at]
	tx.touch(p.n)
	p.n.idx = append(p.n.idx, Index{})
	copy(p.n.idx[p.pos+2:], p.n.idx[p.pos+1:])
	p.n.idx[p.pos+1] = Index{Lblk: border, Pblk: fresh[at+1].pblk}
	return nil
}

// grow moves the root's entries into a new block and makes the root a
// single index entry pointing at it (ext4_ext_grow_indepth).
func (tx *txn) grow(goal uint64) error {
	t := tx.t
	r := t.mu.root
	if int(r.hdr.Depth) >= MaxDepth {
		return fmt.Errorf("extent: inode %d: tree would exceed depth %d: %w", t.cfg.Ino, MaxDepth, ErrNoSpace)
	}
	n, err := tx.alloc(goal, int(r.hdr.Depth))
	if err != nil {
		return err
	}
	tx.touch(r)
	n.ext, n.idx = r.ext, r.idx
	r.ext, r.idx = nil, []Index{{Lblk: n.firstKey(), Pblk: n.pblk}}
	r.hdr.Depth++
	return nil
}

// removeAt deletes the extent at path's leaf position pos, dropping nodes
// that become empty.
func (tx *txn) removeAt(path []pathElem, pos int) {
	lv := len(path) - 1
	leaf := path[lv].n
	tx.touchSpan(leaf, pos, len(leaf.ext)-pos-1)
	leaf.ext = append(leaf.ext[:pos], leaf.ext[pos+1:]...)
	if len(leaf.ext) > 0 || lv == 0 {
		if pos == 0 && len(leaf.ext) > 0 {
			tx.fixKeys(path, lv)
		}
		return
	}
	// The leaf is empty: drop it and its index entry, up the path.
	tx.free(leaf)
	for l := lv - 1; l >= 0; l-- {
		p := path[l]
		tx.touchSpan(p.n, p.pos, len(p.n.idx)-p.pos-1)
		p.n.idx = append(p.n.idx[:p.pos], p.n.idx[p.pos+1:]...)
		if len(p.n.idx) > 0 {
			if p.pos == 0 {
				tx.fixKeys(path, l)
			}
			return
		}
		if l == 0 {
			// Everything is gone: the root becomes an empty leaf.
			p.n.hdr.Depth = 0
			p.n.idx = nil
			return
		}
		tx.free(p.n)
	}
}

// shrink pulls the single child of the root into the root while its
// entries fit there (ext4_ext_try_to_merge_up, at any depth).
func (tx *txn) shrink() error {
	t := tx.t
	for {
		r := t.mu.root
		if r.hdr.Depth == 0 || len(r.idx) != 1 {
			return nil
		}
		path := []pathElem{{r, 0}}
		c, err := t.childLocked(path)
		if err != nil {
			return err
		}
		if c.entries() > int(r.hdr.Max) {
			return nil
		}
		tx.touch(r)
		r.hdr.Depth = c.hdr.Depth
		r.ext = append([]Extent(nil), c.ext...)
		r.idx = append([]Index(nil), c.idx...)
		tx.free(c)
	}
}

// checkExtent validates an extent given to Insert.
func (t *Tree) checkExtent(e Extent) error {
	if e.Len == 0 || e.Len > maxLen(e.Unwritten) {
		return invalidf("extent length %d (unwritten %v)", e.Len, e.Unwritten)
	}
	if e.End() > EndLblk {
		return invalidf("extent [%d,+%d) past logical block %d", e.Lblk, e.Len, uint32(EndLblk))
	}
	if !t.cfg.pblkOK(e.Pblk, uint64(e.Len)) {
		return invalidf("physical blocks [%d,+%d) outside [%d,%d)", e.Pblk, e.Len, t.cfg.FirstDataBlock, t.cfg.BlocksCount)
	}
	if t.cfg.inSystemZone(e.Pblk, uint64(e.Len)) {
		return t.cfg.corrupt(0, -1, "mapping [%d,+%d) at physical blocks [%d,+%d), which overlap file-system metadata", e.Lblk, e.Len, e.Pblk, e.Len)
	}
	return nil
}

// Insert maps e, which must not overlap a mapped block (ErrInvalid
// otherwise). It merges e with a physically contiguous neighbour of the
// same state within the maximum lengths, and splits full nodes or grows the
// tree as needed. On any error the tree is unchanged: new tree blocks are allocated before the nodes
// they relieve are changed, and a failed allocation undoes the step.
func (t *Tree) Insert(e Extent) error { return t.insert(e, false) }

// InsertMustSucceed is Insert for mappings that must not fail for want of
// space (delayed-allocation write-back of data already on the device): the
// tree blocks it needs are taken with mustSucceed.
func (t *Tree) InsertMustSucceed(e Extent) error { return t.insert(e, true) }

func (t *Tree) insert(e Extent, mustSucceed bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.checkExtent(e); err != nil {
		return err
	}
	return t.run(mustSucceed, func(tx *txn) error {
		path, pos, err := t.firstFromLocked(e.Lblk)
		if err != nil {
			return err
		}
		if path != nil {
			if x := path[len(path)-1].n.ext[pos]; uint64(x.Lblk) < e.End() {
				return invalidf("extent [%d,+%d) overlaps [%d,+%d)", e.Lblk, e.Len, x.Lblk, x.Len)
			}
		}
		return tx.insert(e, false)
	})
}

// Remove unmaps logical blocks [from, to] (inclusive; to = EndLblk-1 or
// larger truncates everything from from), trimming extents that straddle
// the ends and splitting one that spans the whole range, dropping emptied
// leaves and index blocks, and pulling the tree back into the inode when it
// fits. Unmapped data blocks go to Allocator.FreeData once the tree is
// written. Splitting an extent may need a tree block; if that allocation
// fails the staged changes are undone and the tree is unchanged.
func (t *Tree) Remove(from, to uint32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if from > to {
		return invalidf("remove [%d,%d]", from, to)
	}
	return t.run(false, func(tx *txn) error { return tx.remove(from, to) })
}

// remove is Remove's change, staged in tx.
func (tx *txn) remove(from, to uint32) error {
	t := tx.t
	cur := from
	for {
		path, pos, err := t.firstFromLocked(cur)
		if err != nil || path == nil {
			return err
		}
		lv := len(path) - 1
		leaf := path[lv].n
		e := leaf.ext[pos]
		if e.Lblk > to {
			return nil
		}
		s := max(e.Lblk, cur)
		last := min(uint32(e.End()-1), to)
		off := uint64(s - e.Lblk)
		tx.freeData = append(tx.freeData, [2]uint64{e.Pblk + off, uint64(last-s) + 1})
		tx.touchSpan(leaf, pos, len(leaf.ext)-pos-1)
		switch x := &leaf.ext[pos]; {
		case s == e.Lblk && uint64(last)+1 == e.End():
			tx.removeAt(path, pos)
		case s == e.Lblk:
			n := last - e.Lblk + 1
			x.Lblk += n
			x.Pblk += uint64(n)
			x.Len -= n
			if pos == 0 {
				tx.fixKeys(path, lv)
			}
		case uint64(last)+1 == e.End():
			x.Len = s - e.Lblk
		default:
			x.Len = s - e.Lblk
			skip := last + 1 - e.Lblk
			right := Extent{Lblk: last + 1, Len: e.Len - skip, Pblk: e.Pblk + uint64(skip), Unwritten: e.Unwritten}
			if err := tx.insert(right, true); err != nil {
				return err
			}
		}
		if last >= to {
			return nil
		}
		cur = last + 1
	}
}

// SplitAt makes lblk the first block of an extent when an extent maps both
// lblk-1 and lblk (ext4_split_extent_at), so that a later MarkWritten of a
// range starting or ending there needs no new tree block. It is done
// before I/O to unwritten extents. With mustSucceed the allocator may draw
// on its reserve. On error the tree is unchanged (the split's new tree
// blocks, if any, are allocated before the leaf is changed).
func (t *Tree) SplitAt(lblk uint32, mustSucceed bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.run(mustSucceed, func(tx *txn) error { return tx.splitAt(lblk) })
}

// SplitRange makes from and from+n extent boundaries, as SplitAt at both
// ends, in one mutation: on error neither split is made and the tree is
// unchanged. A direct write into unwritten blocks calls it at submission
// (ext4's EXT4_GET_BLOCKS_PRE_IO) so that its range is an extent of its
// own and converting it at completion needs no tree block.
func (t *Tree) SplitRange(from, n uint32, mustSucceed bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	end := uint64(from) + uint64(n)
	if end > EndLblk {
		return invalidf("split range [%d,+%d) past logical block %d", from, n, uint32(EndLblk))
	}
	return t.run(mustSucceed, func(tx *txn) error {
		if err := tx.splitAt(from); err != nil {
			return err
		}
		if end < EndLblk {
			return tx.splitAt(uint32(end))
		}
		return nil
	})
}

func (tx *txn) splitAt(lblk uint32) error {
	path, err := tx.t.findLocked(lblk)
	if err != nil {
		return err
	}
	lv := len(path) - 1
	leaf, pos := path[lv].n, path[lv].pos
	if pos < 0 || leaf.ext[pos].Lblk == lblk || leaf.ext[pos].End() <= uint64(lblk) {
		return nil
	}
	e := leaf.ext[pos]
	tx.touchSpan(leaf, pos, len(leaf.ext)-pos-1)
	leaf.ext[pos].Len = lblk - e.Lblk
	off := lblk - e.Lblk
	// Shortening ext[pos] changed no key: path is still findLocked(lblk).
	return tx.insertPath(path, Extent{Lblk: lblk, Len: e.Len - off, Pblk: e.Pblk + uint64(off), Unwritten: e.Unwritten}, true)
}

// MarkWritten converts the unwritten parts of [from, from+n) to written
// (ext4_ext_convert_to_initialized), splitting an unwritten extent into up
// to three pieces and merging the written piece with written neighbours.
// With ZeroOut set, an unwritten extent of at most ZeroOutMax blocks is
// zeroed outside the range and converted whole, and an unwritten remainder
// of at most ZeroOutMax blocks is zeroed and converted with the range, as
// ext4 does, instead of being split off. As in ext4, zero-out is used only
// for extents that end at or before Config.EOFBlock, so that no written
// block is left past the end of the file. Zeroes are written before the
// tree, so a crash in between still reads zeroes.
//
// A range whose boundaries were split beforehand with SplitAt never needs a
// tree block. Otherwise a split may; with mustSucceed the allocator may
// draw on its reserve (conversion at I/O completion must not fail). On an
// allocation error the staged changes are undone and the tree is unchanged
// (zeroes already written are harmless: those blocks read as zero either
// way).
func (t *Tree) MarkWritten(from, n uint32, mustSucceed bool) error {
	return t.markWritten(from, n, mustSucceed, true)
}

// MarkWrittenExact is MarkWritten without zero-out: it converts exactly
// [from, from+n), splitting as needed. Callers converting under a shared
// inode lock use it, since other writers may be writing into the
// neighbouring unwritten blocks that a zero-out would overwrite.
func (t *Tree) MarkWrittenExact(from, n uint32, mustSucceed bool) error {
	return t.markWritten(from, n, mustSucceed, false)
}

func (t *Tree) markWritten(from, n uint32, mustSucceed, zeroOut bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	end := uint64(from) + uint64(n)
	if end > EndLblk {
		return invalidf("range [%d,+%d) past logical block %d", from, n, uint32(EndLblk))
	}
	if n == 0 {
		return nil
	}
	return t.run(mustSucceed, func(tx *txn) error { return tx.markWritten(from, end, zeroOut) })
}

// Run is a range of logical blocks: [Lblk, Lblk+Len).
type Run struct{ Lblk, Len uint32 }

// MarkWrittenExactRuns is MarkWrittenExact for several ranges as one
// all-or-nothing change, in which each changed tree block is encoded and
// written once: for converting many scattered ranges in a batch. On error
// nothing is converted.
//
// Runs sorted by Lblk (they may overlap) are taken a leaf at a time: the
// runs that end inside one leaf's key range are merged into its entries in
// one pass, and only a run that crosses leaves, or a leaf that would
// overflow, goes through MarkWrittenExact's split-by-split path. The result
// is the same mapping either way.
func (t *Tree) MarkWrittenExactRuns(runs []Run, mustSucceed bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range runs {
		if uint64(r.Lblk)+uint64(r.Len) > EndLblk {
			return invalidf("range [%d,+%d) past logical block %d", r.Lblk, r.Len, uint32(EndLblk))
		}
	}
	sorted := slices.IsSortedFunc(runs, func(a, b Run) int { return cmp.Compare(a.Lblk, b.Lblk) })
	return t.run(mustSucceed, func(tx *txn) error {
		for rest := runs; len(rest) > 0; {
			k := 0
			if sorted {
				var err error
				var again bool
				if k, again, err = tx.markWrittenLeaf(rest); err != nil {
					return err
				}
				if again {
					continue // a leaf was split
				}
			}
			if k == 0 {
				r := rest[0]
				if err := tx.markWritten(r.Lblk, uint64(r.Lblk)+uint64(r.Len), false); err != nil {
					return err
				}
				k = 1
			}
			rest = rest[k:]
		}
		return nil
	})
}

// markWrittenLeaf converts the first runs (sorted by Lblk) that end inside
// the key range of the leaf holding runs[0].Lblk by rebuilding that leaf's
// affected entries in one pass. It returns how many runs it converted.
// When they would overflow a leaf more than half full, it splits the leaf
// where the runs' changes divide it and reports again: the caller calls
// it again with the same runs. Otherwise it converts as many of the first
// runs as are sure to fit (each run adds at most two entries). It returns
// 0 when runs[0] crosses into the next leaf: the caller then takes the
// split-by-split path.
func (tx *txn) markWrittenLeaf(runs []Run) (k int, again bool, err error) {
	path, err := tx.t.findLocked(runs[0].Lblk)
	if err != nil {
		return 0, false, err
	}
	lv := len(path) - 1
	leaf := path[lv].n
	// The leaf holds keys below the next key of the nearest ancestor that
	// has one.
	hi := uint64(EndLblk)
	for l := lv - 1; l >= 0; l-- {
		if p := path[l].pos + 1; p < len(path[l].n.idx) {
			hi = uint64(path[l].n.idx[p].Lblk)
			break
		}
	}
	for k < len(runs) && runs[k].end() <= hi {
		k++
	}
	if k == 0 {
		return 0, false, nil
	}
	if tx.mergeRuns(leaf, runs[:k]) {
		return k, false, nil
	}
	ext, capacity := leaf.ext, int(leaf.hdr.Max)
	if len(ext) > capacity/2 {
		// Split in the middle, or at the edge of the entries the runs
		// change when they lie in one half, so that those get the room.
		var last uint64
		for _, r := range runs[:k] {
			last = max(last, r.end())
		}
		s := len(ext) / 2
		if first := searchExt(ext, runs[0].Lblk); first > s {
			s = first
		} else if end := searchExt(ext, uint32(last-1)) + 1; end < s {
			s = end
		}
		path[lv].pos = min(max(s, 1), len(ext)-1) - 1
		return 0, true, tx.makeRoom(path, ext[path[lv].pos+1].Lblk)
	}
	// At most half full: room for (capacity-len)/2 runs at least.
	if k = min(k-1, max((capacity-len(ext))/2, 1)); k > 0 && tx.mergeRuns(leaf, runs[:k]) {
		return k, false, nil
	}
	return 0, false, nil
}

func (r Run) end() uint64 { return uint64(r.Lblk) + uint64(r.Len) }

// mergeRuns makes the unwritten blocks of leaf that runs (sorted by Lblk,
// all inside leaf's key range) cover written, merging each written piece
// with written neighbours as convert does. It reports false, changing
// nothing, when the result would not fit in the leaf.
func (tx *txn) mergeRuns(leaf *node, runs []Run) bool {
	ext := leaf.ext
	var maxEnd uint64
	for _, r := range runs {
		maxEnd = max(maxEnd, r.end())
	}
	if maxEnd == 0 || len(ext) == 0 {
		return true // nothing to convert
	}
	// Rebuild ext[start:b]: from the extent before the first one a run may
	// touch (a new piece may merge into it) to the one after the last (it
	// may merge into a new piece).
	start := max(searchExt(ext, runs[0].Lblk)-1, 0)
	b := min(searchExt(ext, uint32(maxEnd-1))+2, len(ext))
	if b <= start {
		return true
	}
	out := tx.merge[:0]
	newLast, changed := false, false
	emit := func(x Extent, isNew bool) {
		if n := len(out); n > 0 && (newLast || isNew) && canMerge(out[n-1], x) {
			out[n-1].Len += x.Len
			newLast = true
			return
		}
		out = append(out, x)
		newLast = isNew
	}
	piece := func(e Extent, s, f uint64, unwritten bool) Extent {
		return Extent{Lblk: uint32(s), Len: uint32(f - s), Pblk: e.Pblk + (s - uint64(e.Lblk)), Unwritten: unwritten}
	}
	j := 0
	for i := start; i < b; i++ {
		e := ext[i]
		c, end := uint64(e.Lblk), e.End()
		for j < len(runs) && runs[j].end() <= c {
			j++
		}
		if !newLast && (j == len(runs) || uint64(runs[j].Lblk) >= end) {
			// No run reaches e and e follows no new piece: copy it and
			// the extents after it that end before the next run.
			next := b
			if j < len(runs) {
				next = max(i+searchExt(ext[i:b], runs[j].Lblk), i+1)
			}
			out = append(out, ext[i:next]...)
			i = next - 1
			continue
		}
		if !e.Unwritten {
			emit(e, false)
			continue
		}
		for ; j < len(runs) && uint64(runs[j].Lblk) < end; j++ {
			if s, f := max(uint64(runs[j].Lblk), c), min(runs[j].end(), end); s < f {
				if s > c {
					emit(piece(e, c, s, true), false)
				}
				emit(piece(e, s, f, false), true)
				c, changed = f, true
			}
			// A run going on past e goes on into the next extents (the
			// runs after it that start inside e lie inside it there).
			if runs[j].end() > end {
				break
			}
		}
		if c < end {
			emit(piece(e, c, end, true), false)
		}
	}
	tx.merge = out
	if !changed {
		return true
	}
	if start+len(out)+len(ext)-b > int(leaf.hdr.Max) {
		return false
	}
	// The leaf's first key stays: the first rebuilt entry starts where
	// ext[start] did.
	tx.touchSpan(leaf, start, len(ext)-b)
	leaf.ext = slices.Replace(leaf.ext, start, b, out...)
	return true
}

// markWritten is MarkWritten's change of [from, end) inside a mutation.
func (tx *txn) markWritten(from uint32, end uint64, zeroOut bool) error {
	t := tx.t
	cur := from
	for uint64(cur) < end {
		path, pos, err := t.firstFromLocked(cur)
		if err != nil || path == nil {
			return err
		}
		e := path[len(path)-1].n.ext[pos]
		if uint64(e.Lblk) >= end {
			return nil
		}
		if !e.Unwritten {
			cur = uint32(e.End())
			continue
		}
		s := uint64(max(e.Lblk, cur))
		f := min(e.End(), end)
		next := uint32(f)
		if z := uint64(t.cfg.ZeroOutMax); zeroOut && z > 0 && t.cfg.ZeroOut != nil &&
			(t.cfg.EOFBlock == nil || e.End() <= t.cfg.EOFBlock()) {
			zs, zf := s, f
			if uint64(e.Len) <= z {
				zs, zf = uint64(e.Lblk), e.End()
			} else {
				if l := s - uint64(e.Lblk); l > 0 && l <= z {
					zs = uint64(e.Lblk)
				}
				if r := e.End() - f; r > 0 && r <= z {
					zf = e.End()
				}
			}
			if zs < s {
				if err := t.cfg.ZeroOut(e.Pblk, s-zs); err != nil {
					return fmt.Errorf("extent: inode %d: zeroing blocks: %w", t.cfg.Ino, err)
				}
			}
			if zf > f {
				if err := t.cfg.ZeroOut(e.Pblk+(f-uint64(e.Lblk)), zf-f); err != nil {
					return fmt.Errorf("extent: inode %d: zeroing blocks: %w", t.cfg.Ino, err)
				}
			}
			s, f = zs, zf
		}
		if err := tx.convert(path, e, uint32(s), uint32(f)); err != nil {
			return err
		}
		cur = next
	}
	return nil
}

// convert makes [s, f) of unwritten extent e written: split off the
// unwritten pieces before s and from f, flip the middle, merge it with
// written neighbours. path leads to e (its leaf position is e's).
func (tx *txn) convert(path []pathElem, e Extent, s, f uint32) error {
	if uint64(f) < e.End() || s > e.Lblk {
		if uint64(f) < e.End() {
			if err := tx.splitAt(f); err != nil {
				return err
			}
		}
		if s > e.Lblk {
			if err := tx.splitAt(s); err != nil {
				return err
			}
		}
		var err error
		if path, err = tx.t.findLocked(s); err != nil {
			return err
		}
	}
	// Without a split s == e.Lblk, and path is what findLocked(s) returns:
	// by I3, checked as nodes load, the keys leading to e's leaf are the
	// last ones at or before every block of e.
	lv := len(path) - 1
	leaf, pos := path[lv].n, path[lv].pos
	if pos < 0 || leaf.ext[pos].Lblk != s || !leaf.ext[pos].Unwritten {
		return tx.t.cfg.corrupt(leaf.pblk, -1, "conversion lost extent at %d", s)
	}
	// pos may take in pos+1 and merge into pos-1.
	tx.touchSpan(leaf, max(pos-1, 0), len(leaf.ext)-pos-2)
	leaf.ext[pos].Unwritten = false
	if pos+1 < len(leaf.ext) && canMerge(leaf.ext[pos], leaf.ext[pos+1]) {
		leaf.ext[pos].Len += leaf.ext[pos+1].Len
		leaf.ext = append(leaf.ext[:pos+1], leaf.ext[pos+2:]...)
	}
	if pos > 0 && canMerge(leaf.ext[pos-1], leaf.ext[pos]) {
		leaf.ext[pos-1].Len += leaf.ext[pos].Len
		leaf.ext = append(leaf.ext[:pos], leaf.ext[pos+1:]...)
	}
	return nil
}
