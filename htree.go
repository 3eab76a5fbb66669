package ext4io

import (
	"fmt"
	"sort"

	"github.com/ext4io/ext4io/internal/errs"
	"github.com/ext4io/ext4io/layout"
)

// Htree (dir_index) inserts, as ext4's namei.c does them.
//
// An indexed directory's block 0 is the dx root ("." and "..", then
// dx_root_info and the root's dx entries); interior index nodes are blocks
// holding one fake entry spanning the block, then dx entries; leaves are
// ordinary directory blocks. Each dx entry (hash, block) covers the hashes
// from its own up to the next entry's; an entry whose hash has bit 0 set
// continues the previous entry's hash (a collision run split over leaves).
//
// Inserting into a full leaf (do_split): the leaf's entries are sorted by
// hash, the upper half by size moves to a new block appended to the
// directory, and (split hash | continued) is inserted into the parent
// index after the leaf's entry. A full parent index node is split first,
// in half by count, into its own parent (dx_insert_block); when every
// level up to the root is full, a level is added: the root's entries move
// to a new node and the root points at it (up to 2 levels, 3 with
// large_dir). A linear directory whose single block is full is converted
// (make_indexed_dir): block 0 becomes the root and its entries move to a
// new leaf, which is then split.
//
// Invariants after every insert:
//   - H1: every index node's entries are sorted by hash, count <= limit,
//     and with metadata_csum its dx_tail checksum is current.
//   - H2: every name lies in the leaf its hash selects (or in a leaf
//     continuing its hash run).
//   - H3: i_size covers every block; new blocks are appended.

// dxFrame is one level of an index path: a root or node block, its
// decoded index and the entry the hash selected.
type dxFrame struct {
	lblk uint64
	buf  []byte
	node *layout.DxNode
	at   int
}

// dxEnt is a live directory entry being moved by a split.
type dxEnt struct {
	name   []byte
	ino    uint32
	ft     uint8
	hash   uint32
	recLen int
	off    int
}

// dxHash returns name's major hash under the root's hash version.
func (f *File) dxHash(hashVersion uint8, name []byte) (uint32, error) {
	v := f.v
	hv := hashVersion
	if hv <= layout.HashTea && v.sb.Flags&layout.FlagsUnsignedHash != 0 {
		hv += 3
	}
	h, _, ok := layout.DirHash(hv, v.sb.HashSeed, name)
	if !ok {
		return 0, fmt.Errorf("ext4io: directory inode %d: hash version %d: %w", f.ino, hashVersion, ErrUnsupported)
	}
	return h, nil
}

// dxPath descends the index to the leaf for hash (dx_probe). The last
// frame's selected entry names the leaf. The frames' blocks are scratch
// buffers: the caller gives them back with putFrames.
func (f *File) dxPath(name string) (frames []dxFrame, info layout.DxRootInfo, hash uint32, err error) {
	v := f.v
	root := dxFrame{lblk: 0, buf: getBlockBuf(v.bs)}
	path := []dxFrame{root}
	defer func() {
		if err != nil {
			putFrames(path)
		}
	}()
	ok, err := f.dirBlock(0, root.buf)
	if err != nil {
		return nil, layout.DxRootInfo{}, 0, err
	}
	if !ok {
		return nil, layout.DxRootInfo{}, 0, &errs.CorruptError{What: "htree root", Ino: f.ino, Off: -1, Msg: "block 0 is not mapped"}
	}
	info, node, err := layout.DecodeDxRoot(root.buf, f.physOf(0), f.ino, v.csum, v.sb.HasIncompat(layout.IncompatLargeDir))
	if err != nil {
		return nil, info, 0, err
	}
	seed := layout.InodeSeed(v.csumSeed, f.ino, f.in.Generation)
	if v.csum && !v.opts.SkipChecksums {
		if err := layout.VerifyDx(seed, root.buf, node, f.physOf(0), f.ino); err != nil {
			return nil, info, 0, err
		}
	}
	hash, err = f.dxHash(info.HashVersion, []byte(name))
	if err != nil {
		return nil, info, 0, err
	}
	nblk := f.in.Size / uint64(v.bs)
	path[0].node, path[0].at = node, node.DxLookup(hash)
	for len(path) <= int(info.IndirectLevels) {
		top := path[len(path)-1]
		blk := uint64(top.node.Entries[top.at].Block)
		if err := f.dxCycle(path, blk); err != nil {
			return nil, info, 0, err
		}
		path = append(path, dxFrame{lblk: blk, buf: getBlockBuf(v.bs)})
		fr := &path[len(path)-1]
		if fr.node, err = f.dxNode(blk, nblk, fr.buf, seed); err != nil {
			return nil, info, 0, err
		}
		fr.at = fr.node.DxLookup(hash)
	}
	top := path[len(path)-1]
	if leaf := uint64(top.node.Entries[top.at].Block); leaf == 0 || leaf >= nblk {
		return nil, info, 0, &errs.CorruptError{What: "htree index", Ino: f.ino, Off: -1, Msg: fmt.Sprintf("leaf block %d outside directory of %d blocks", leaf, nblk)}
	}
	if err := f.dxCycle(path, uint64(top.node.Entries[top.at].Block)); err != nil {
		return nil, info, 0, err
	}
	return path, info, hash, nil
}

// dxCycle reports as corrupt an index entry naming blk, a block of the
// path from the root to it (dx_probe's tree cycle check): read as a leaf,
// an index block would take new entries over its index.
func (f *File) dxCycle(path []dxFrame, blk uint64) error {
	for _, fr := range path {
		if fr.lblk == blk {
			return &errs.CorruptError{What: "htree index", Ino: f.ino, Off: -1,
				Msg: fmt.Sprintf("tree cycle: block %d points back to block %d", path[len(path)-1].lblk, blk)}
		}
	}
	return nil
}

// putFrames gives back the scratch blocks of dxPath's frames.
func putFrames(frames []dxFrame) {
	for _, fr := range frames {
		putBlockBuf(fr.buf)
	}
}

// setDxCsum refreshes the dx_tail of index block lblk (root or node).
func (f *File) setDxCsum(lblk uint64, b []byte) error {
	v := f.v
	if !v.csum {
		return nil
	}
	countOff := layout.DxCountOff(b, lblk == 0)
	limit, count := layout.DxCountLimit(b, countOff)
	if limit != layout.DxLimit(len(b), countOff, true) || count > limit {
		return &errs.CorruptError{What: "htree node", Ino: f.ino, Block: f.physOf(lblk), Off: countOff, Msg: fmt.Sprintf("count %d limit %d", count, limit)}
	}
	layout.SetDxTail(layout.InodeSeed(v.csumSeed, f.ino, f.in.Generation), b, countOff, count, limit)
	return nil
}

// writeFrame encodes a frame's entries into its block and writes it.
func (f *File) writeFrame(fr *dxFrame) error {
	layout.PutDxEntries(fr.buf, fr.node.CountOff, fr.node.Limit, fr.node.Entries)
	fr.node.Count = len(fr.node.Entries)
	if err := f.setDxCsum(fr.lblk, fr.buf); err != nil {
		return err
	}
	return f.writeDirBlock(fr.lblk, fr.buf)
}

// insertDx puts (hash, blk) into fr's index right after position at.
func insertDx(fr *dxFrame, at int, hash uint32, blk uint64) {
	e := fr.node.Entries
	e = append(e, layout.DxEntry{})
	copy(e[at+2:], e[at+1:])
	e[at+1] = layout.DxEntry{Hash: hash, Block: uint32(blk)}
	fr.node.Entries = e
}

// appendDxNodeLocked appends a new index node holding entries and returns
// its logical block.
func (f *File) appendDxNodeLocked(entries []layout.DxEntry) (uint64, error) {
	b, _ := layout.NewDxNodeBlock(f.v.bs, f.v.csum, entries)
	lblk := f.in.Size / uint64(f.v.bs)
	if err := f.setDxCsum(lblk, b); err != nil {
		return 0, err
	}
	return f.appendBlockLocked(b)
}

// addDxEntryLocked inserts name into an indexed directory (lock held),
// splitting leaves and index nodes as needed (ext4_dx_add_entry).
// forceSplit splits the selected leaf even if the entry would fit, as
// make_indexed_dir does with the freshly moved entries.
func (f *File) addDxEntryLocked(name string, ino uint32, ft uint8, need int) error {
	return f.addDxLocked(name, ino, ft, need, false)
}

func (f *File) addDxLocked(name string, ino uint32, ft uint8, need int, forceSplit bool) error {
	v := f.v
	maxLevels := layout.DxMaxLevels
	if v.sb.HasIncompat(layout.IncompatLargeDir) {
		maxLevels = layout.DxMaxLevelsLargeDir
	}
	buf := getBlockBuf(v.bs)
	defer putBlockBuf(buf)
	var frames []dxFrame
	defer func() { putFrames(frames) }()
	for attempt := 0; attempt < 3*layout.DxMaxLevelsLargeDir+4; attempt++ {
		putFrames(frames)
		var info layout.DxRootInfo
		var hash uint32
		var err error
		frames, info, hash, err = f.dxPath(name)
		if err != nil {
			return err
		}
		bottom := &frames[len(frames)-1]
		leaf := uint64(bottom.node.Entries[bottom.at].Block)
		ok, err := f.dirBlock(leaf, buf)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("directory inode %d: htree leaf %d unmapped: %w", f.ino, leaf, ErrCorrupt)
		}
		if !forceSplit {
			done, err := f.insertInBlock(leaf, buf, name, ino, ft, need)
			if done || err != nil {
				return err
			}
		}
		forceSplit = false
		if len(bottom.node.Entries) >= bottom.node.Limit {
			// Make room in the index first (one level per pass).
			i := len(frames) - 1
			for i > 0 && len(frames[i-1].node.Entries) >= frames[i-1].node.Limit {
				i--
			}
			if i == 0 {
				if int(info.IndirectLevels)+1 >= maxLevels {
					return fmt.Errorf("directory inode %d: htree index full (%d levels): %w", f.ino, info.IndirectLevels+1, ErrNoSpace)
				}
				if err := f.dxAddLevel(&frames[0], info); err != nil {
					return err
				}
			} else if err := f.dxSplitNode(&frames[i-1], &frames[i]); err != nil {
				return err
			}
			continue
		}
		hash2, newLblk, err := f.dxSplitLeaf(bottom, leaf, buf, info.HashVersion)
		if err != nil {
			return err
		}
		target := leaf
		if hash >= hash2&^1 {
			target = newLblk
		}
		if ok, err := f.dirBlock(target, buf); err != nil || !ok {
			if err == nil {
				err = fmt.Errorf("directory inode %d: block %d unmapped after split: %w", f.ino, target, ErrCorrupt)
			}
			return err
		}
		done, err := f.insertInBlock(target, buf, name, ino, ft, need)
		if done || err != nil {
			return err
		}
		// Did not fit (only with pathological sizes): split again.
	}
	return fmt.Errorf("directory inode %d: no room for %q after splitting: %w", f.ino, name, ErrNoSpace)
}

// dxAddLevel moves the full root's entries to a new node and points the
// root at it (the add_level case of ext4_dx_add_entry). info is the
// root's dx_root_info as dxPath decoded it.
func (f *File) dxAddLevel(root *dxFrame, info layout.DxRootInfo) error {
	newBlk, err := f.appendDxNodeLocked(root.node.Entries)
	if err != nil {
		return err
	}
	root.node.Entries = []layout.DxEntry{{Block: uint32(newBlk)}}
	info.IndirectLevels++
	layout.PutDxRootInfo(root.buf, info)
	return f.writeFrame(root)
}

// dxSplitNode splits full index node child in half by count, inserting the
// upper half's first hash into parent (which has room).
func (f *File) dxSplitNode(parent, child *dxFrame) error {
	ents := child.node.Entries
	c1 := len(ents) / 2
	hash2 := ents[c1].Hash
	upper := append([]layout.DxEntry(nil), ents[c1:]...)
	newBlk, err := f.appendDxNodeLocked(upper)
	if err != nil {
		return err
	}
	child.node.Entries = ents[:c1]
	if err := f.writeFrame(child); err != nil {
		return err
	}
	insertDx(parent, parent.at, hash2, newBlk)
	return f.writeFrame(parent)
}

// dxSplitLeaf splits leaf block lblk (contents in b) as do_split does and
// returns the split hash (with the continuation bit) and the new block.
func (f *File) dxSplitLeaf(fr *dxFrame, lblk uint64, b []byte, hashVersion uint8) (uint32, uint64, error) {
	v := f.v
	var ents []dxEnt
	hasFt := v.sb.HasIncompat(layout.IncompatFiletype)
	err := layout.DirBlock(b, f.physOf(lblk), f.ino, v.csum && layout.HasDirTail(b), hasFt, lblk == 0, func(e layout.DirEntry) error {
		if e.Inode == 0 {
			return nil
		}
		h, err := f.dxHash(hashVersion, e.Name)
		if err != nil {
			return err
		}
		ents = append(ents, dxEnt{name: append([]byte(nil), e.Name...), ino: e.Inode, ft: e.FileType, hash: h, recLen: e.RecLen, off: e.Off})
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	if len(ents) < 2 {
		return 0, 0, fmt.Errorf("directory inode %d: leaf %d has %d entries and no room: %w", f.ino, lblk, len(ents), ErrNoSpace)
	}
	sort.SliceStable(ents, func(i, j int) bool { return ents[i].hash < ents[j].hash })
	// Split in the middle, size-wise, from the top.
	size, move, i := 0, 0, len(ents)-1
	for ; i >= 0; i-- {
		if size+ents[i].recLen/2 > v.bs/2 {
			break
		}
		size += ents[i].recLen
		move++
	}
	split := len(ents) / 2
	if i > 0 {
		split = len(ents) - move
	}
	hash2 := ents[split].hash
	if hash2 == ents[split-1].hash {
		hash2 |= 1
	}
	stay := append([]dxEnt(nil), ents[:split]...)
	sort.Slice(stay, func(i, j int) bool { return stay[i].off < stay[j].off }) // dx_pack_dirents keeps block order
	newB := f.packLeaf(ents[split:])
	newLblk, err := f.appendBlockLocked(newB)
	if err != nil {
		return 0, 0, err
	}
	copy(b, f.packLeaf(stay))
	if err := f.writeDirBlock(lblk, b); err != nil {
		return 0, 0, err
	}
	insertDx(fr, fr.at, hash2, newLblk)
	if err := f.writeFrame(fr); err != nil {
		return 0, 0, err
	}
	return hash2, newLblk, nil
}

// packLeaf builds a leaf block holding ents back to back, the last one
// spanning the rest of the block (up to the checksum tail).
func (f *File) packLeaf(ents []dxEnt) []byte {
	v := f.v
	b := make([]byte, v.bs)
	end := v.bs
	if v.csum {
		end -= layout.DirTailLen
	}
	off := 0
	for i, e := range ents {
		rl := layout.DirRecLen(len(e.name))
		if i == len(ents)-1 {
			rl = end - off
		}
		layout.PutDirEntry(b, off, e.ino, rl, e.ft, e.name)
		off += rl
	}
	if len(ents) == 0 {
		layout.PutDirEntry(b, 0, 0, end, 0, nil)
	}
	if v.csum {
		layout.SetDirTail(layout.InodeSeed(v.csumSeed, f.ino, f.in.Generation), b)
	}
	return b
}

// makeIndexedLocked converts directory f, whose only block (b0) is full,
// into an indexed directory and inserts name (make_indexed_dir). It
// returns false, changing nothing, when block 0 does not start with the
// "." and ".." entries the conversion needs.
func (f *File) makeIndexedLocked(b0 []byte, name string, ino uint32, ft uint8, need int) (bool, error) {
	v := f.v
	// The entries after ".." move to a new block 1; the root keeps "."
	// and "..", then dx_root_info and one entry pointing at block 1.
	root, b1, err := layout.MakeDxRoot(b0, f.physOf(0), f.ino, v.csum, v.sb.DefHashVersion)
	if err != nil || root == nil {
		return false, err
	}
	if v.csum {
		layout.SetDirTail(layout.InodeSeed(v.csumSeed, f.ino, f.in.Generation), b1)
	}
	if _, err := f.appendBlockLocked(b1); err != nil {
		return false, err
	}
	f.in.Flags |= layout.InodeFlagIndex
	if err := f.setDxCsum(0, root); err != nil {
		return false, err
	}
	if err := f.writeDirBlock(0, root); err != nil {
		return false, err
	}
	return true, f.addDxLocked(name, ino, ft, need, true)
}
