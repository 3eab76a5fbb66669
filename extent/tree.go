package extent

import (
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Tree is one inode's extent tree. It is safe for concurrent use: every
// method holds the tree's mutex. Decoded tree blocks are cached, so the
// Tree must be the only writer of its blocks while it is in use.
type Tree struct {
	cfg Config // immutable after Open
	mu  struct {
		sync.Mutex
		root   *node            // the in-inode node; pblk 0
		cache  map[uint64]*node // decoded tree blocks by physical block
		broken error            // set when a commit failed half-way
		// path backs the paths findLocked returns: a path is valid until
		// the next findLocked or firstFromLocked call.
		path [MaxDepth + 1]pathElem
		tx   txn // the running mutation; begin and txn.end prepare it for reuse
	}
}

// node is one decoded tree node. Exactly one of ext, idx is in use,
// depending on hdr.Depth.
//
// Between mutations every node is clean (dirty false) and raw decodes to
// its current state: a failed mutation puts a node back by decoding raw.
type node struct {
	pblk uint64 // 0 for the root
	root bool
	hdr  Header // Entries is recomputed on encode
	ext  []Extent
	idx  []Index
	raw  []byte // the bytes last read or written (nil for new nodes)

	// State of the running mutation (see txn.touchSpan).
	dirty bool // changed (zero the unused slots on encode)
	freed bool // dropped
	from  int  // when dirty: the first from entries are as encoded in raw
	keep  int  // when dirty: so are the last keep ones, though they may move
}

func (n *node) entries() int {
	if n.hdr.Depth == 0 {
		return len(n.ext)
	}
	return len(n.idx)
}

func (n *node) firstKey() uint32 {
	if n.hdr.Depth == 0 {
		if len(n.ext) == 0 {
			return 0
		}
		return n.ext[0].Lblk
	}
	if len(n.idx) == 0 {
		return 0
	}
	return n.idx[0].Lblk
}

// pathElem is one level of a root-to-leaf path: node and position. At an
// index level pos is the child followed; at the leaf it is the last extent
// starting at or before the key looked up, or -1.
type pathElem struct {
	n   *node
	pos int
}

// Open returns the tree rooted in root (an inode's i_block). It validates
// the root node only; deeper nodes are validated as they are read.
func Open(root *[RootSize]byte, cfg Config) (*Tree, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	t := &Tree{cfg: cfg}
	raw := append([]byte(nil), root[:]...)
	n, err := t.decodeNode(raw, 0, true, -1, "root")
	if err != nil {
		return nil, err
	}
	t.mu.root = n
	t.mu.cache = make(map[uint64]*node)
	return t, nil
}

// Depth returns the tree's depth: 0 when the root holds the extents.
func (t *Tree) Depth() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return int(t.mu.root.hdr.Depth)
}

// Root returns the root node's bytes, to be stored in the inode's i_block.
func (t *Tree) Root() [RootSize]byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	var r [RootSize]byte
	if t.mu.root.dirty {
		// A commit that failed part way; encoded in a buffer of its own,
		// since encodeOver keeps r from staying on the stack.
		b := make([]byte, RootSize)
		copy(b, t.mu.root.raw)
		t.encodeOver(t.mu.root, b, 0, 0)
		copy(r[:], b)
		return r
	}
	copy(r[:], t.mu.root.raw) // encoded by every commit that changed it
	return r
}

// decodeNode decodes and validates the node in raw (a block, or the 60-byte
// root). wantDepth < 0 accepts any depth up to MaxDepth. where names the
// node for error messages.
func (t *Tree) decodeNode(raw []byte, pblk uint64, root bool, wantDepth int, where string) (*node, error) {
	c := &t.cfg
	h := DecodeHeader(raw)
	bad := func(off int, format string, args ...any) error {
		return c.corrupt(pblk, off, "%s: %s", where, fmt.Sprintf(format, args...))
	}
	if h.Magic != Magic {
		return nil, bad(0, "bad magic %#04x", h.Magic)
	}
	capacity := RootMax
	if !root {
		capacity = c.blockCap()
	}
	if h.Max == 0 || int(h.Max) > capacity {
		return nil, bad(4, "eh_max %d not in [1, %d]", h.Max, capacity)
	}
	if h.Entries > h.Max {
		return nil, bad(2, "eh_entries %d > eh_max %d", h.Entries, h.Max)
	}
	if h.Depth > MaxDepth {
		return nil, bad(6, "depth %d > %d", h.Depth, MaxDepth)
	}
	if wantDepth >= 0 && int(h.Depth) != wantDepth {
		return nil, bad(6, "depth %d, parent expects %d", h.Depth, wantDepth)
	}
	if h.Depth > 0 && h.Entries == 0 {
		return nil, bad(2, "empty index node")
	}
	if !root && c.Csum && !VerifyBlockChecksum(raw, c.Seed) {
		return nil, bad(TailOffset(int(h.Max)), "extent block checksum mismatch")
	}
	n := &node{pblk: pblk, root: root, hdr: h, raw: raw}
	if h.Depth == 0 {
		n.ext = make([]Extent, h.Entries)
		var prevEnd uint64
		for i := range n.ext {
			off := HeaderSize + EntrySize*i
			e := DecodeExtent(raw[off:])
			switch {
			case e.Len == 0:
				return nil, bad(off, "entry %d: zero-length extent", i)
			case e.End() > EndLblk:
				return nil, bad(off, "entry %d: extent [%d,+%d) past logical block %d", i, e.Lblk, e.Len, uint32(EndLblk))
			case !c.pblkOK(e.Pblk, uint64(e.Len)):
				return nil, bad(off, "entry %d: physical blocks [%d,+%d) outside [%d,%d)", i, e.Pblk, e.Len, c.FirstDataBlock, c.BlocksCount)
			case c.inSystemZone(e.Pblk, uint64(e.Len)):
				return nil, bad(off, "entry %d: physical blocks [%d,+%d) overlap file-system metadata", i, e.Pblk, e.Len)
			case i > 0 && uint64(e.Lblk) < prevEnd:
				return nil, bad(off, "entry %d: extent at %d overlaps or precedes the previous one ending at %d", i, e.Lblk, prevEnd)
			}
			prevEnd = e.End()
			n.ext[i] = e
		}
	} else {
		n.idx = make([]Index, h.Entries)
		for i := range n.idx {
			off := HeaderSize + EntrySize*i
			x := DecodeIndex(raw[off:])
			switch {
			case !c.pblkOK(x.Pblk, 1):
				return nil, bad(off, "entry %d: child block %d outside [%d,%d)", i, x.Pblk, c.FirstDataBlock, c.BlocksCount)
			case c.inSystemZone(x.Pblk, 1):
				return nil, bad(off, "entry %d: child block %d is file-system metadata", i, x.Pblk)
			case i > 0 && x.Lblk <= n.idx[i-1].Lblk:
				return nil, bad(off, "entry %d: index key %d not above previous %d", i, x.Lblk, n.idx[i-1].Lblk)
			}
			n.idx[i] = x
		}
	}
	return n, nil
}

// encodeOver encodes n into b, which holds n.raw (zeroes for a new node):
// it rewrites the header and the entries, zeroes the unused slots of a
// dirty node and sets the checksum tail. Bytes it does not rewrite keep
// their value from raw, so a clean node re-encodes to raw. The caller may
// know that the first from and the last keep entries are as in raw; those
// are not encoded again (the last ones are moved if the count changed).
func (t *Tree) encodeOver(n *node, b []byte, from, keep int) {
	cnt, old := n.entries(), int(DecodeHeader(b).Entries)
	from = min(from, cnt, old)
	keep = min(keep, cnt-from, old-from)
	if keep > 0 && cnt != old {
		copy(b[HeaderSize+EntrySize*(cnt-keep):], b[HeaderSize+EntrySize*(old-keep):HeaderSize+EntrySize*old])
	}
	h := n.hdr
	h.Entries = uint16(cnt)
	h.Encode(b)
	if h.Depth == 0 {
		putExtents(b[HeaderSize+EntrySize*from:], n.ext[from:cnt-keep])
	} else {
		for i := from; i < cnt-keep; i++ {
			_ = n.idx[i].Encode(b[HeaderSize+EntrySize*i:]) // valid by construction
		}
	}
	off := HeaderSize + EntrySize*cnt
	if n.dirty {
		clear(b[off:TailOffset(int(h.Max))])
	}
	if !n.root && t.cfg.Csum {
		SetBlockChecksum(b, t.cfg.Seed)
	}
}

// putExtents encodes ext into b, EntrySize bytes each, as Extent.Encode
// does but without a call per extent (leaves hold up to 5460 of them). Like
// Encode it writes nothing for an extent that has no encoding; the tree
// never holds one.
func putExtents(b []byte, ext []Extent) {
	b = b[:EntrySize*len(ext)]
	for i := range ext {
		e := &ext[i]
		var u uint32 // 1 if unwritten; mixed leaves make a branch on it costly
		if e.Unwritten {
			u = 1
		}
		// Encode's checks: Len <= 32768 if written, 1 <= Len <= 32767 if
		// unwritten (Len-1 wraps for 0), and a 48-bit Pblk.
		if e.Len-u > MaxWrittenLen-2*u || e.Pblk >= maxPblk {
			continue
		}
		p := b[EntrySize*i:][:EntrySize]
		binary.LittleEndian.PutUint64(p, uint64(e.Lblk)|uint64(e.Len+u*MaxWrittenLen)<<32|e.Pblk>>32<<48)
		binary.LittleEndian.PutUint32(p[8:], uint32(e.Pblk))
	}
}

// loadLocked returns the validated node at pblk, expected at depth with
// keys in [lo, hi).
func (t *Tree) loadLocked(pblk uint64, depth int, lo, hi uint64, where func() string) (*node, error) {
	n := t.mu.cache[pblk]
	if n == nil {
		if t.cfg.IO == nil {
			return nil, invalidf("tree of inode %d has depth > 0 but Config.IO is nil", t.cfg.Ino)
		}
		raw := make([]byte, t.cfg.BlockSize)
		if err := t.cfg.IO.ReadBlock(pblk, raw); err != nil {
			return nil, fmt.Errorf("extent: inode %d: %s: %w", t.cfg.Ino, where(), err)
		}
		var err error
		if n, err = t.decodeNode(raw, pblk, false, depth, where()); err != nil {
			return nil, err
		}
		t.mu.cache[pblk] = n
	} else if int(n.hdr.Depth) != depth {
		return nil, t.cfg.corrupt(pblk, 6, "%s: depth %d, parent expects %d", where(), n.hdr.Depth, depth)
	}
	if err := t.checkBounds(n, lo, hi, where); err != nil {
		return nil, err
	}
	return n, nil
}

// checkBounds checks invariant I3 for n under its parent's key range.
func (t *Tree) checkBounds(n *node, lo, hi uint64, where func() string) error {
	if n.entries() == 0 {
		return nil
	}
	first := uint64(n.firstKey())
	var last uint64
	if n.hdr.Depth == 0 {
		last = n.ext[len(n.ext)-1].End() - 1
	} else {
		last = uint64(n.idx[len(n.idx)-1].Lblk)
	}
	if first < lo || last >= hi {
		return t.cfg.corrupt(n.pblk, -1, "%s: keys [%d,%d] outside parent range [%d,%d)", where(), first, last, lo, hi)
	}
	return nil
}

// pathString describes the path for error messages, e.g.
// "depth 2 idx 3 -> block 1234 idx 0 -> block 99".
func pathString(path []pathElem, next uint64) string {
	var sb strings.Builder
	for i, p := range path {
		if i > 0 {
			fmt.Fprintf(&sb, " -> block %d ", p.n.pblk)
		} else {
			sb.WriteString("root ")
		}
		fmt.Fprintf(&sb, "depth %d idx %d", p.n.hdr.Depth, p.pos)
	}
	fmt.Fprintf(&sb, " -> block %d", next)
	return sb.String()
}

// child loads the child of path's last (index) element.
func (t *Tree) childLocked(path []pathElem) (*node, error) {
	p := path[len(path)-1]
	lo, hi := t.rangeOf(path)
	x := p.n.idx[p.pos]
	clo := uint64(x.Lblk)
	chi := hi
	if p.pos+1 < len(p.n.idx) {
		chi = uint64(p.n.idx[p.pos+1].Lblk)
	}
	_ = lo
	return t.loadLocked(x.Pblk, int(p.n.hdr.Depth)-1, clo, chi, func() string { return pathString(path, x.Pblk) })
}

// rangeOf returns the key range [lo, hi) of path's last node.
func (t *Tree) rangeOf(path []pathElem) (lo, hi uint64) {
	lo, hi = 0, EndLblk
	for i := 0; i < len(path)-1; i++ {
		p := path[i]
		lo = uint64(p.n.idx[p.pos].Lblk)
		if p.pos+1 < len(p.n.idx) {
			hi = uint64(p.n.idx[p.pos+1].Lblk)
		}
	}
	return lo, hi
}

// findLocked returns the path to the leaf that would hold lblk. The path
// lives in t.mu.path: it is valid until the next findLocked or
// firstFromLocked call, which callers must not make while using it.
func (t *Tree) findLocked(lblk uint32) ([]pathElem, error) {
	if t.mu.broken != nil {
		return nil, t.mu.broken
	}
	n := t.mu.root
	path := t.mu.path[:0]
	for {
		if n.hdr.Depth == 0 {
			return append(path, pathElem{n, searchExt(n.ext, lblk)}), nil
		}
		path = append(path, pathElem{n, max(searchIdx(n.idx, lblk), 0)})
		c, err := t.childLocked(path)
		if err != nil {
			return nil, err
		}
		n = c
	}
}

// searchExt returns the index of the last extent starting at or before
// lblk, or -1.
func searchExt(ext []Extent, lblk uint32) int {
	lo, hi := 0, len(ext) // ext[:lo] start at or before lblk, ext[hi:] after
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ext[m].Lblk <= lblk {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo - 1
}

// searchIdx returns the index of the last key at or before lblk, or -1.
func searchIdx(idx []Index, lblk uint32) int {
	lo, hi := 0, len(idx)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if idx[m].Lblk <= lblk {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo - 1
}

// leftmostLocked extends path (ending at an index node with pos set) down
// to the leftmost leaf below it.
func (t *Tree) leftmostLocked(path []pathElem) ([]pathElem, error) {
	for {
		n, err := t.childLocked(path)
		if err != nil {
			return nil, err
		}
		if n.hdr.Depth == 0 {
			return append(path, pathElem{n, 0}), nil
		}
		path = append(path, pathElem{n, 0})
	}
}

// nextLeafLocked returns the path to the leaf after path's leaf, or nil.
// It reuses path's backing array: path is invalid afterwards.
func (t *Tree) nextLeafLocked(path []pathElem) ([]pathElem, error) {
	for l := len(path) - 2; l >= 0; l-- {
		if path[l].pos+1 < len(path[l].n.idx) {
			path = path[:l+1]
			path[l].pos++
			return t.leftmostLocked(path)
		}
	}
	return nil, nil
}

// firstFromLocked returns the path and position of the first extent that
// ends after lblk, or a nil path if there is none. The path is valid as
// findLocked's is.
func (t *Tree) firstFromLocked(lblk uint32) ([]pathElem, int, error) {
	path, err := t.findLocked(lblk)
	if err != nil {
		return nil, 0, err
	}
	leaf := path[len(path)-1]
	pos := leaf.pos
	if pos < 0 || leaf.n.ext[pos].End() <= uint64(lblk) {
		pos++
	}
	// Leaves passed: the first, then empty ones; a repeat means a cycle.
	// The map is only needed past the first leaf (appends stop there).
	var first uint64
	var seen map[uint64]bool
	for i := 0; pos >= len(path[len(path)-1].n.ext); i++ {
		switch p := path[len(path)-1].n.pblk; {
		case i == 0:
			first = p
		case p == first || seen[p]:
			return nil, 0, t.cfg.corrupt(p, -1, "empty leaf block reached twice")
		default:
			if seen == nil {
				seen = make(map[uint64]bool)
			}
			seen[p] = true
		}
		if path, err = t.nextLeafLocked(path); err != nil || path == nil {
			return nil, 0, err
		}
		pos = 0
	}
	path[len(path)-1].pos = pos
	return path, pos, nil
}

// Lookup returns the extent holding logical block lblk. If no extent holds
// it, found is false and holeLen is the number of blocks from lblk to the
// next extent, or to EndLblk (EXT_MAX_BLOCKS) when no extent follows, as
// ext4_ext_determine_hole clamps it: lblk+holeLen never passes EndLblk, so
// a hole fits a uint32 length and an esc.Extent (whose ranges end at or
// before esc.MaxBlocks, the same bound). For lblk >= EndLblk, a block no
// extent may map, holeLen is 0.
func (t *Tree) Lookup(lblk uint32) (e Extent, found bool, holeLen uint64, err error) {
	if lblk >= EndLblk {
		return Extent{}, false, 0, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	path, pos, err := t.firstFromLocked(lblk)
	if err != nil {
		return Extent{}, false, 0, err
	}
	if path == nil {
		return Extent{}, false, EndLblk - uint64(lblk), nil
	}
	e = path[len(path)-1].n.ext[pos]
	if e.Lblk <= lblk {
		return e, true, 0, nil
	}
	return Extent{}, false, uint64(e.Lblk - lblk), nil
}

// End returns one past the last logical block an extent maps, 0 for an
// empty tree. It reads the rightmost path only, unless the rightmost leaf
// is empty.
func (t *Tree) End() (uint64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	path, err := t.findLocked(EndLblk - 1)
	if err != nil {
		return 0, err
	}
	if leaf := path[len(path)-1]; leaf.pos >= 0 {
		return leaf.n.ext[leaf.pos].End(), nil
	}
	var end uint64
	err = t.walkLocked(func(path []pathElem) error {
		if ext := path[len(path)-1].n.ext; len(ext) > 0 {
			end = ext[len(ext)-1].End()
		}
		return nil
	}, nil)
	return end, err
}

// Walk calls fn for every extent in logical order, stopping at the first
// error. fn must not call the Tree's methods.
func (t *Tree) Walk(fn func(Extent) error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.walkLocked(func(path []pathElem) error {
		for _, e := range path[len(path)-1].n.ext {
			if err := fn(e); err != nil {
				return err
			}
		}
		return nil
	}, nil)
}

// Blocks calls fn for each tree block (not the in-inode root) with the
// depth of the node it holds, parents before children. The count is what the
// tree adds to i_blocks beyond its data blocks.
func (t *Tree) Blocks(fn func(pblk uint64, depth int) error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.walkLocked(nil, fn)
}

// walkLocked visits every leaf in order (leafFn) and every tree block
// (blockFn), detecting blocks reached twice.
func (t *Tree) walkLocked(leafFn func([]pathElem) error, blockFn func(uint64, int) error) error {
	if t.mu.broken != nil {
		return t.mu.broken
	}
	seen := make(map[uint64]bool)
	var rec func(path []pathElem) error
	rec = func(path []pathElem) error {
		n := path[len(path)-1].n
		if n.hdr.Depth == 0 {
			if leafFn != nil {
				return leafFn(path)
			}
			return nil
		}
		for i := range n.idx {
			path[len(path)-1].pos = i
			c, err := t.childLocked(path)
			if err != nil {
				return err
			}
			if seen[c.pblk] {
				return t.cfg.corrupt(c.pblk, -1, "%s: block referenced twice", pathString(path, c.pblk))
			}
			seen[c.pblk] = true
			if blockFn != nil {
				if err := blockFn(c.pblk, int(c.hdr.Depth)); err != nil {
					return err
				}
			}
			if err := rec(append(path, pathElem{c, 0})); err != nil {
				return err
			}
		}
		return nil
	}
	return rec([]pathElem{{t.mu.root, 0}})
}

// Check validates the whole tree: every node as when reading (I1-I3, I5,
// I6), plus invariant I4 strictly (index key == first key of the child), no
// empty non-root leaves, no block reached twice, and no physical block used
// twice (by two extents, two tree blocks, or an extent and a tree block).
// Errors wrap ErrCorrupt and name the path to the bad node.
func (t *Tree) Check() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.checkLocked()
}

func (t *Tree) checkLocked() error {
	type run struct{ p, n uint64 }
	var runs []run
	err := t.walkLocked(func(path []pathElem) error {
		leaf := path[len(path)-1].n
		for _, e := range leaf.ext {
			runs = append(runs, run{e.Pblk, uint64(e.Len)})
		}
		if len(path) > 1 {
			if len(leaf.ext) == 0 {
				return t.cfg.corrupt(leaf.pblk, -1, "%s: empty leaf block", pathString(path[:len(path)-1], leaf.pblk))
			}
		}
		// Strict I4 along the path: each index key equals its child's first key.
		for l := 0; l+1 < len(path); l++ {
			p := path[l]
			if k, f := p.n.idx[p.pos].Lblk, path[l+1].n.firstKey(); k != f {
				return t.cfg.corrupt(path[l+1].n.pblk, -1, "%s: index key %d != first key %d of child", pathString(path[:l+1], path[l+1].n.pblk), k, f)
			}
		}
		return nil
	}, func(pblk uint64, _ int) error {
		runs = append(runs, run{pblk, 1})
		return nil
	})
	if err != nil {
		return err
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].p < runs[j].p })
	for i := 1; i < len(runs); i++ {
		if runs[i-1].p+runs[i-1].n > runs[i].p {
			return t.cfg.corrupt(runs[i].p, -1, "physical block %d used twice", runs[i].p)
		}
	}
	return nil
}
