package ext4io

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/ext4io/ext4io/extent"
	"github.com/ext4io/ext4io/internal/errs"
	"github.com/ext4io/ext4io/layout"
)

// DirEntry is one name in a directory.
type DirEntry struct {
	Name string
	Ino  uint32
	Type uint8 // layout.Ft*; FtUnknown without the filetype feature
}

// maxSymlinkHops bounds symlink resolution, like Linux's 40.
const maxSymlinkHops = 40

// pathMax is Linux's PATH_MAX: the bytes of a path string with its NUL.
// Linux refuses a longer string passed to a system call (getname's
// ENAMETOOLONG), and so does Symlink for a target that long. Paths given
// to Volume are not bounded by it: they always start at the root, where a
// Linux caller reaches a deep file relative to a working directory or a
// directory descriptor, so a bound would leave files deeper than pathMax
// bytes out of reach (the FUSE server passes such paths for requests the
// kernel accepted).
const pathMax = 4096

// checkPath refuses a string of pathMax bytes or more with ErrNameTooLong.
func checkPath(name string) error {
	if len(name) >= pathMax {
		return fmt.Errorf("path of %d bytes (max %d): %w", len(name), pathMax-1, ErrNameTooLong)
	}
	return nil
}

// errStop ends a directory scan early.
var errStop = errors.New("stop")

// isDxDir reports whether the directory is hash-indexed and the
// filesystem honours the index.
func (v *Volume) isDxDir(in *layout.Inode) bool {
	return in.Flags&layout.InodeFlagIndex != 0 && v.sb.HasCompat(layout.CompatDirIndex)
}

// dirBlock reads logical block lblk of directory f.
func (f *File) dirBlock(lblk uint64, buf []byte) (bool, error) {
	m, err := f.m.lookup(lblk)
	if err != nil {
		return false, err
	}
	if m.kind != mapWritten {
		return false, nil // holes and unwritten blocks hold no entries
	}
	if err := f.v.readBlock(m.pblk, buf); err != nil {
		return false, fmt.Errorf("ext4io: directory inode %d block %d: %w", f.ino, lblk, err)
	}
	return true, nil
}

// leafEntries calls fn for every used entry of a leaf (or linear) block,
// after verifying its checksum tail. Index blocks of an htree directory
// (a single unused entry spanning the block) hold no entries.
func (f *File) leafEntries(lblk uint64, b []byte, fn func(layout.DirEntry) error) error {
	v := f.v
	if v.isDxDir(f.in) {
		if lblk == 0 {
			return f.dxRootEntries(b, fn)
		}
		if layout.IsDxNodeBlock(b) {
			return nil // dx node (or an empty non-checksummed block)
		}
	}
	hasTail := v.csum && layout.HasDirTail(b)
	if v.csum && !v.opts.SkipChecksums {
		if err := layout.VerifyDirBlock(layout.InodeSeed(v.csumSeed, f.ino, f.in.Generation), b, f.physOf(lblk), f.ino); err != nil {
			return err
		}
	}
	return layout.DirBlock(b, f.physOf(lblk), f.ino, hasTail, v.sb.HasIncompat(layout.IncompatFiletype), lblk == 0, func(e layout.DirEntry) error {
		if e.Inode == 0 {
			return nil
		}
		return fn(e)
	})
}

// dxRootEntries yields "." and ".." from an htree root block.
func (f *File) dxRootEntries(b []byte, fn func(layout.DirEntry) error) error {
	n := 0
	err := layout.DirBlock(b[:layout.DxRootInfoOff], f.physOf(0), f.ino, false, true, true, func(e layout.DirEntry) error {
		n++
		if n > 2 {
			return errStop
		}
		if e.Inode == 0 {
			return nil
		}
		return fn(e)
	})
	if errors.Is(err, errStop) {
		return nil
	}
	if err != nil {
		// ".." claims the rest of the block; parse the two fixed entries.
		dot, dotdot, ok := layout.DxRootDots(b)
		if !ok {
			return &errs.CorruptError{What: "htree root", Ino: f.ino, Block: f.physOf(0), Off: 0, Msg: "missing . and .. entries"}
		}
		if err := fn(dot); err != nil {
			return err
		}
		return fn(dotdot)
	}
	return nil
}

// physOf returns the physical block of a directory's logical block, for
// error messages (0 if unknown).
func (f *File) physOf(lblk uint64) uint64 {
	if f.m == nil {
		return 0
	}
	m, err := f.m.lookup(lblk)
	if err != nil || m.kind == mapHole {
		return 0
	}
	return m.pblk
}

// checkDirSize rejects a directory whose i_size reaches past its last
// mapped block, as e2fsck does ("incorrect i_size"). Every loop over a
// directory's blocks stops at i_size and skips holes a run at a time
// (dirRuns), so with this check a walk of a directory is bounded by its
// mapping, whatever its i_size says.
func (v *Volume) checkDirSize(n *inode) error {
	if n.m == nil {
		return nil
	}
	end, err := n.m.end()
	if err != nil {
		return err
	}
	bs := uint64(v.bs)
	if nblk := n.in.Size/bs + min(n.in.Size%bs, 1); nblk > end {
		return &errs.CorruptError{What: "directory", Ino: n.ino, Off: -1,
			Msg: fmt.Sprintf("i_size %d reaches block %d, but only blocks below %d are mapped", n.in.Size, nblk-1, end)}
	}
	return nil
}

// end returns one past the last logical block the mapper maps.
func (m *mapper) end() (uint64, error) {
	if m.tree != nil {
		return m.tree.End()
	}
	var end uint64
	err := extent.WalkIndirect(m.ind, m.cfg, func(e extent.Extent) error {
		end = e.End()
		return nil
	}, nil)
	return end, err
}

// dirRuns calls fn for each run of mapped blocks of directory f below
// block nblk, in logical order; holes are skipped a whole gap at a time,
// so the calls and the work between them are bounded by the mapping.
func (f *File) dirRuns(nblk uint64, fn func(lblk, n uint64) error) error {
	m := f.m
	if m.tree == nil {
		// Block-mapped (ext3-style) directories: collect the runs first;
		// fn reads through the mapper, which WalkIndirect must not call.
		var runs []extent.Extent
		err := m.walk(func(e extent.Extent) error {
			if uint64(e.Lblk) >= nblk {
				return errStop
			}
			runs = append(runs, e)
			return nil
		})
		if err != nil && !errors.Is(err, errStop) {
			return err
		}
		for _, r := range runs {
			if err := fn(uint64(r.Lblk), min(r.End(), nblk)-uint64(r.Lblk)); err != nil {
				return err
			}
		}
		return nil
	}
	for lblk := uint64(0); lblk < nblk && lblk < extent.EndLblk; {
		e, found, hole, err := m.tree.Lookup(uint32(lblk))
		if err != nil {
			return err
		}
		if !found {
			lblk += hole
			continue
		}
		end := min(e.End(), nblk)
		if err := fn(lblk, end-lblk); err != nil {
			return err
		}
		lblk = end
	}
	return nil
}

// dirBlocks calls fn with each mapped, written block of directory f below
// block nblk (read into buf), in logical order.
func (f *File) dirBlocks(nblk uint64, buf []byte, fn func(lblk uint64) error) error {
	return f.dirRuns(nblk, func(lblk, n uint64) error {
		for end := lblk + n; lblk < end; lblk++ {
			ok, err := f.dirBlock(lblk, buf)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			if err := fn(lblk); err != nil {
				return err
			}
		}
		return nil
	})
}

// scanDir calls fn for every entry of directory f in on-disk order.
func (f *File) scanDir(fn func(layout.DirEntry) error) error {
	if f.inl != nil || f.in.Flags&layout.InodeFlagInlineData != 0 {
		return f.scanInlineDir(fn)
	}
	bs := uint64(f.v.bs)
	buf := getBlockBuf(f.v.bs) // fn copies what it keeps of an entry
	defer putBlockBuf(buf)
	return f.dirBlocks((f.in.Size+bs-1)/bs, buf, func(lblk uint64) error {
		return f.leafEntries(lblk, buf, fn)
	})
}

// scanInlineDir walks an inline-data directory: the parent inode number in
// the first 4 bytes of i_block, then entries in the rest of i_block and in
// the system.data xattr. "." and ".." are not stored; they are yielded.
func (f *File) scanInlineDir(fn func(layout.DirEntry) error) error {
	parent, regions, ok := layout.DecodeInlineDir(f.inl)
	if !ok {
		return &errs.CorruptError{What: "inline directory", Ino: f.ino, Off: -1, Msg: "shorter than its parent pointer"}
	}
	if err := fn(layout.DirEntry{Inode: f.ino, Name: []byte("."), NameLen: 1, FileType: layout.FtDir}); err != nil {
		return err
	}
	if err := fn(layout.DirEntry{Inode: parent, Name: []byte(".."), NameLen: 2, FileType: layout.FtDir}); err != nil {
		return err
	}
	for _, r := range regions {
		if len(r) == 0 {
			continue
		}
		err := layout.DirBlock(r, 0, f.ino, false, f.v.sb.HasIncompat(layout.IncompatFiletype), false, func(e layout.DirEntry) error {
			if e.Inode == 0 {
				return nil
			}
			return fn(e)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// lookupName finds name in directory f, through the hash index when the
// directory has one.
func (f *File) lookupName(name string) (layout.DirEntry, error) {
	var found layout.DirEntry
	match := func(e layout.DirEntry) error {
		if string(e.Name) == name {
			found = e
			found.Name = []byte(name)
			return errStop
		}
		return nil
	}
	var err error
	if f.m != nil && f.v.isDxDir(f.in) && name != "." && name != ".." {
		err = f.dxLookup(name, match)
	} else {
		err = f.scanDir(match)
	}
	if errors.Is(err, errStop) {
		if err := f.v.checkEntryIno(f.ino, found); err != nil {
			return layout.DirEntry{}, err
		}
		return found, nil
	}
	if err != nil {
		return layout.DirEntry{}, err
	}
	return layout.DirEntry{}, ErrNotFound
}

// insertHint is the room a create found for its entry during its lookup
// (lookupForCreate): the first leaf block the name's hash selects in an
// htree directory, a copy of that block and the first record with room,
// as addDxLocked's first attempt would find them. The directory's lock is
// held from the lookup to the insert, so the leaf cannot change between.
type insertHint struct {
	ok   bool
	lblk uint64
	buf  []byte          // a getBlockBuf block; release gives it back
	slot layout.DirEntry // as DirBlock yields it; its Name is not used
}

// release gives back the hint's block.
func (h *insertHint) release() {
	if h.buf != nil {
		putBlockBuf(h.buf)
	}
	*h = insertHint{}
}

// lookupForCreate is lookupName for a name about to be created in
// directory f (its lock held exclusively). In an htree directory the
// pass over the name's first leaf also looks for room for an entry of
// need bytes and, if the name is not found and the leaf has room, notes
// it in hint: the create then inserts without walking the index and the
// leaf again. Otherwise hint stays empty.
func (f *File) lookupForCreate(name string, need int, hint *insertHint) (layout.DirEntry, error) {
	v := f.v
	if f.m == nil || !v.isDxDir(f.in) || name == "." || name == ".." {
		return f.lookupName(name)
	}
	var found layout.DirEntry
	match := func(e layout.DirEntry) error {
		if string(e.Name) == name {
			found = e
			found.Name = []byte(name)
			return errStop
		}
		return nil
	}
	// The first leaf is read into its own block, which becomes the
	// hint's if the leaf has room; continuation leaves into leaf.
	leaf, firstLeaf := getBlockBuf(v.bs), getBlockBuf(v.bs)
	defer func() {
		putBlockBuf(leaf)
		if firstLeaf != nil {
			putBlockBuf(firstLeaf)
		}
	}()
	first := true
	err := f.dxWalk(name, func(blk uint64) (bool, error) {
		if !first || firstLeaf == nil {
			if ok, err := f.dirBlock(blk, leaf); err != nil || !ok {
				return false, err
			}
			return false, f.leafEntries(blk, leaf, match)
		}
		first = false
		leaf := firstLeaf
		if ok, err := f.dirBlock(blk, leaf); err != nil || !ok {
			return false, err
		}
		if blk == 0 || blk >= f.in.Size/uint64(v.bs) || layout.IsDxNodeBlock(leaf) {
			return false, f.leafEntries(blk, leaf, match)
		}
		// leafEntries, with unused records yielded for their room.
		if v.csum && !v.opts.SkipChecksums {
			if err := layout.VerifyDirBlock(layout.InodeSeed(v.csumSeed, f.ino, f.in.Generation), leaf, f.physOf(blk), f.ino); err != nil {
				return false, err
			}
		}
		var slot layout.DirEntry
		room := false
		err := layout.DirBlock(leaf, f.physOf(blk), f.ino, v.csum && layout.HasDirTail(leaf), v.sb.HasIncompat(layout.IncompatFiletype), false, func(e layout.DirEntry) error {
			// Names of one length often differ only at the end.
			if e.Inode != 0 && len(e.Name) == len(name) && e.Name[len(name)-1] == name[len(name)-1] && string(e.Name) == name {
				return match(e)
			}
			if !room && layout.DirEntryRoom(e) >= need {
				slot, room = e, true
			}
			return nil
		})
		if err == nil && room {
			hint.release()
			*hint = insertHint{ok: true, lblk: blk, buf: firstLeaf, slot: slot}
			firstLeaf = nil
		}
		return false, err
	})
	if errors.Is(err, errStop) {
		hint.release()
		if err := v.checkEntryIno(f.ino, found); err != nil {
			return layout.DirEntry{}, err
		}
		return found, nil
	}
	if err != nil {
		hint.release()
		return layout.DirEntry{}, err
	}
	return layout.DirEntry{}, ErrNotFound
}

// checkEntryIno refuses an entry of directory dir that names an inode no
// entry may name, as ext4_lookup does (ext4_valid_inum, and __ext4_iget's
// is_special_ino): a reserved inode other than the root (the resize
// inode, the journal, ...), the journal's, the orphan file's or a quota
// file's inode where they lie past the reserved ones, or one past the
// inode count. "." and ".." are checked like any other name. A name
// other than those naming dir itself is refused too: a directory is not
// its own child, and removing or renaming such an entry would take dir's
// lock twice (Linux's d_splice_alias refuses the alias, "would have
// caused loop").
func (v *Volume) checkEntryIno(dir uint32, e layout.DirEntry) error {
	ino := e.Inode
	if ino == dir && string(e.Name) != "." && string(e.Name) != ".." {
		return &errs.CorruptError{What: "directory entry", Ino: dir, Off: -1,
			Msg: fmt.Sprintf("entry %q names its own directory", e.Name)}
	}
	if ino <= v.sb.InodesCount && !v.specialIno(ino) {
		return nil
	}
	return &errs.CorruptError{What: "directory entry", Ino: dir, Off: -1,
		Msg: fmt.Sprintf("entry %q names inode %d, which no entry may name", e.Name, ino)}
}

// checkDirParent fails with ErrCorrupt when n, the inode that entry
// name of directory dir names, is a directory whose ".." names another
// directory: a second name of a directory (a hostile directory hard link,
// possibly to an ancestor). A directory is reachable by one name only, the
// one its ".." agrees with, as e2fsck's pass 3 decides the parent. So the
// directories named from the root form a tree, whose order (parent before
// child) every operation locking two directories, or a directory and its
// entry's inode, follows. "." and ".." are not second names. A directory
// without a valid ".." takes the first directory it is found in as its
// parent, as Linux keeps the first alias of a directory and refuses the
// others; its data stays reachable through that name.
func (v *Volume) checkDirParent(dir uint32, name string, n *inode) error {
	if name == "." || name == ".." || !n.in.IsDir() {
		return nil
	}
	p := n.dotdot.Load()
	if p == 0 && n.dotdot.CompareAndSwap(0, dir) {
		return nil
	}
	if p = n.dotdot.Load(); p != dir {
		return &errs.CorruptError{What: "directory entry", Ino: dir, Off: -1,
			Msg: fmt.Sprintf("entry %q names directory inode %d, whose \"..\" names inode %d (a directory hard link)", name, n.ino, p)}
	}
	return nil
}

// dxLookup walks the htree index to the leaf (and any continuation leaves
// for hash collisions) that may hold name, calling fn on their entries.
// The entries' names point into a scratch buffer reused after fn returns.
func (f *File) dxLookup(name string, fn func(layout.DirEntry) error) error {
	leaf := getBlockBuf(f.v.bs)
	defer putBlockBuf(leaf)
	return f.dxWalk(name, func(blk uint64) (bool, error) {
		if ok, err := f.dirBlock(blk, leaf); err != nil || !ok {
			return false, err
		}
		return false, f.leafEntries(blk, leaf, fn)
	})
}

// dxLeaf calls fn with the leaf block the name's hash selects.
func (f *File) dxLeaf(name string, fn func(blk uint64)) error {
	return f.dxWalk(name, func(blk uint64) (bool, error) {
		fn(blk)
		return true, nil
	})
}

// dxWalk walks the htree index to the leaf for name's hash and calls
// onLeaf with it and with each following leaf continuing that hash, until
// onLeaf returns stop or an error.
func (f *File) dxWalk(name string, onLeaf func(blk uint64) (stop bool, err error)) error {
	v := f.v
	buf := getBlockBuf(v.bs)
	defer putBlockBuf(buf)
	ok, err := f.dirBlock(0, buf)
	if err != nil {
		return err
	}
	if !ok {
		return &errs.CorruptError{What: "htree root", Ino: f.ino, Off: -1, Msg: "block 0 is not mapped"}
	}
	info, root, err := layout.DecodeDxRoot(buf, f.physOf(0), f.ino, v.csum, v.sb.HasIncompat(layout.IncompatLargeDir))
	if err != nil {
		return err
	}
	seed := layout.InodeSeed(v.csumSeed, f.ino, f.in.Generation)
	if v.csum && !v.opts.SkipChecksums {
		if err := layout.VerifyDx(seed, buf, root, f.physOf(0), f.ino); err != nil {
			return err
		}
	}
	hv := info.HashVersion
	if hv <= layout.HashTea && v.sb.Flags&layout.FlagsUnsignedHash != 0 {
		hv += 3
	}
	hash, _, ok := layout.DirHash(hv, v.sb.HashSeed, []byte(name))
	if !ok {
		return fmt.Errorf("ext4io: directory inode %d: hash version %d: %w", f.ino, info.HashVersion, ErrUnsupported)
	}
	nblk := (f.in.Size + uint64(v.bs) - 1) / uint64(v.bs)
	// Descend, remembering each level's node and position for collisions.
	type level struct {
		node *layout.DxNode
		at   int
		lblk uint64
	}
	// cycle is dxCycle for the first n levels of path.
	cycle := func(path []level, n int, blk uint64) error {
		for _, l := range path[:n] {
			if l.lblk == blk {
				return &errs.CorruptError{What: "htree index", Ino: f.ino, Off: -1,
					Msg: fmt.Sprintf("tree cycle: block %d points back to block %d", path[n-1].lblk, blk)}
			}
		}
		return nil
	}
	path := []level{{root, root.DxLookup(hash), 0}}
	for len(path) <= int(info.IndirectLevels) {
		top := path[len(path)-1]
		blk := uint64(top.node.Entries[top.at].Block)
		if err := cycle(path, len(path), blk); err != nil {
			return err
		}
		node, err := f.dxNode(blk, nblk, buf, seed)
		if err != nil {
			return err
		}
		path = append(path, level{node, node.DxLookup(hash), blk})
	}
	for {
		top := path[len(path)-1]
		blk := uint64(top.node.Entries[top.at].Block)
		if blk >= nblk {
			return &errs.CorruptError{What: "htree index", Ino: f.ino, Off: -1, Msg: fmt.Sprintf("leaf block %d past directory end %d", blk, nblk)}
		}
		if err := cycle(path, len(path), blk); err != nil {
			return err
		}
		if stop, err := onLeaf(blk); err != nil || stop {
			return err
		}
		// A following leaf continues this hash when its index hash is
		// ours with the collision bit (bit 0) set.
		i := len(path) - 1
		for i >= 0 && path[i].at+1 >= len(path[i].node.Entries) {
			i--
		}
		if i < 0 {
			return nil
		}
		path[i].at++
		if next := path[i].node.Entries[path[i].at].Hash; next&1 == 0 || next&^1 != hash {
			return nil
		}
		for j := i + 1; j < len(path); j++ {
			blk := uint64(path[j-1].node.Entries[path[j-1].at].Block)
			if err := cycle(path, j, blk); err != nil {
				return err
			}
			node, err := f.dxNode(blk, nblk, buf, seed)
			if err != nil {
				return err
			}
			path[j] = level{node, 0, blk}
		}
	}
}

func (f *File) dxNode(blk, nblk uint64, buf []byte, seed uint32) (*layout.DxNode, error) {
	if blk == 0 || blk >= nblk {
		return nil, &errs.CorruptError{What: "htree index", Ino: f.ino, Off: -1, Msg: fmt.Sprintf("index block %d outside directory of %d blocks", blk, nblk)}
	}
	ok, err := f.dirBlock(blk, buf)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &errs.CorruptError{What: "htree index", Ino: f.ino, Off: -1, Msg: fmt.Sprintf("index block %d not mapped", blk)}
	}
	node, err := layout.DecodeDxNode(buf, f.physOf(blk), f.ino, f.v.csum)
	if err != nil {
		return nil, err
	}
	if f.v.csum && !f.v.opts.SkipChecksums {
		if err := layout.VerifyDx(seed, buf, node, f.physOf(blk), f.ino); err != nil {
			return nil, err
		}
	}
	return node, nil
}

// resolve walks path from the root and returns the inode it names.
// followLast says whether a final symlink is followed. An empty name
// names nothing (ErrNotFound), as every path on Linux; "/" and "." are
// the root.
func (v *Volume) resolve(name string, followLast bool) (*File, error) {
	f, _, err := v.resolveMissing(name, followLast)
	return f, err
}

// resolveMissing is resolve that also reports, with its ErrNotFound,
// whether the last name of the path itself is missing from its directory
// (lastMissing): not a directory on the way, nor the target of a symlink
// it followed. Then resolving the path without following a final symlink
// fails the same way, which spares OpenFile's O_CREATE a second walk.
func (v *Volume) resolveMissing(name string, followLast bool) (f *File, lastMissing bool, err error) {
	if err := v.checkOpen(); err != nil {
		return nil, false, err
	}
	if name == "" {
		return nil, true, ErrNotFound
	}
	hops := 0
	f, err = v.resolveFrom(layout.RootIno, name, followLast, &hops, &lastMissing)
	return f, lastMissing, err
}

// resolveParent resolves the directory part of a path as path.Split
// returns it: "" there is the root, which holds the last name.
func (v *Volume) resolveParent(dirName string) (*File, error) {
	if dirName == "" {
		dirName = "/"
	}
	return v.resolve(dirName, true)
}

// resolveFrom walks name from directory start (from the root if name is
// absolute). If lastMissing is not nil, it is set when the last name is
// not found in its directory. A name ending in "/" names a directory, as
// in Linux's path walk: its last symlink is followed whatever followLast
// says, and anything but a directory there is ErrNotDir.
func (v *Volume) resolveFrom(start uint32, name string, followLast bool, hops *int, lastMissing *bool) (*File, error) {
	if strings.HasPrefix(name, "/") {
		start = layout.RootIno
	}
	parts := strings.FieldsFunc(name, func(r rune) bool { return r == '/' })
	mustDir := len(parts) > 0 && strings.HasSuffix(name, "/")
	followLast = followLast || mustDir
	dir, err := v.openInode(start, "/")
	if err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		if !dir.in.IsDir() {
			return nil, &errs.CorruptError{What: "root inode", Ino: start, Off: -1, Msg: "not a directory"}
		}
		return dir, nil
	}
	for i, p := range parts {
		if !dir.in.IsDir() {
			return nil, ErrNotDir
		}
		if len(p) > layout.MaxNameLen {
			return nil, ErrNameTooLong
		}
		child, err := v.lookupOpen(dir, p)
		if err != nil {
			if lastMissing != nil && i == len(parts)-1 && errors.Is(err, ErrNotFound) {
				*lastMissing = true
			}
			return nil, err
		}
		last := i == len(parts)-1
		if child.in.IsSymlink() && (!last || followLast) {
			*hops++
			if *hops > maxSymlinkHops {
				return nil, errLoop
			}
			target, err := child.readlink()
			if err != nil {
				return nil, err
			}
			rest := path.Join(parts[i+1:]...)
			next := target + "/" + rest
			if rest == "" && !mustDir {
				next = target
			}
			child, err = v.resolveFrom(dir.ino, next, followLast, hops, nil)
			if err != nil {
				return nil, err
			}
			if rest == "" {
				child.name = p
			}
			return child, nil
		}
		dir = child
	}
	if mustDir && !dir.in.IsDir() {
		return nil, ErrNotDir
	}
	return dir, nil
}

// lookupOpen finds name in directory dir and opens the inode it names.
//
// Lookups share the directory's lock with each other and exclude
// inserts, removals and htree splits, which change several blocks
// (Linux's VFS takes i_rwsem shared for lookup). The lock is held until
// the inode is in the cache: removing the entry's last name, which frees
// the inode (unlink, rmdir, a rename over it), takes the lock exclusively,
// so the inode is cached before its eviction can start, and a freed inode
// is never read and cached. The inode's own lock is taken only after the
// directory's is released: a corrupt entry may name an ancestor, whose
// lock comes first. Meanwhile the name may go; the inode is then an
// orphan (links 0, still cached) or evicted (freed), and fileOf fails
// with ErrNotFound, as if the lookup had come after the removal. The inode may
// still be evicted once lookupOpen returns: File users that write keep it
// alive by trackOpen (osvolume.go).
func (v *Volume) lookupOpen(dir *File, name string) (*File, error) {
	dir.n.mu.RLock()
	e, err := dir.lookupName(name)
	var n *inode
	if err == nil {
		n, err = v.entryInode(e.Inode)
	}
	if err == nil {
		err = v.checkDirParent(dir.ino, name, n)
	}
	dir.n.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	return v.fileOf(n, e.Inode, name)
}

// readlink returns a symlink's target. It reads under the inode's lock,
// which a removal freeing the inode holds from its last name to the
// eviction: the link found by a lookup whose directory lock is released
// may be freed meanwhile, and its block reused by another file. A freed
// link fails with an error matching ErrNotFound, as if the lookup had
// come after the removal.
func (f *File) readlink() (string, error) {
	f.n.mu.RLock()
	defer f.n.mu.RUnlock()
	if f.n.freed {
		return "", &freeInodeError{ino: f.ino}
	}
	if f.in.Size == 0 || f.in.Size > uint64(f.v.bs) || f.in.Size > 4096 {
		return "", &errs.CorruptError{What: "symlink", Ino: f.ino, Off: -1, Msg: fmt.Sprintf("target length %d", f.in.Size)}
	}
	b := make([]byte, f.in.Size)
	n, err := f.readAt(b, 0)
	if err != nil {
		return "", err
	}
	b = b[:n]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b), nil
}

// Open opens the file at name (symlinks followed) for reading, as
// os.Open does: OpenFile(name, os.O_RDONLY, 0). Paths are slash separated,
// relative to the root; a leading slash is allowed, and "" names nothing
// (ErrNotFound).
func (v *Volume) Open(name string) (*File, error) {
	return v.OpenFile(name, os.O_RDONLY, 0)
}

// Stat returns metadata of the file at name, following symlinks.
func (v *Volume) Stat(name string) (*FileInfo, error) {
	f, err := v.resolve(name, true)
	if err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	return f.info(), nil
}

// Lstat returns metadata of the file at name without following a final
// symlink.
func (v *Volume) Lstat(name string) (*FileInfo, error) {
	f, err := v.resolve(name, false)
	if err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: name, Err: err}
	}
	return f.info(), nil
}

// Readlink returns the target of the symlink at name.
func (v *Volume) Readlink(name string) (string, error) {
	f, err := v.resolve(name, false)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: err}
	}
	if !f.in.IsSymlink() {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fmt.Errorf("not a symlink: %w", ErrInvalid)}
	}
	t, err := f.readlink()
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: err}
	}
	return t, nil
}

// removedDirLocked reports whether n is a directory that Rmdir (or a
// rename over it) removed: freed, or with no links while orphanSteps
// frees its blocks (Linux's IS_DEADDIR). The caller holds n.mu.
func (n *inode) removedDirLocked() bool {
	return n.freed || n.in.IsDir() && n.in.LinksCount == 0
}

func (f *File) readDirAll() ([]DirEntry, error) {
	f.n.mu.RLock()
	defer f.n.mu.RUnlock()
	if !f.in.IsDir() {
		return nil, ErrNotDir
	}
	if f.n.removedDirLocked() {
		return nil, ErrNotFound // a removed directory still open: ENOENT, as Linux's iterate_dir
	}
	var out []DirEntry
	err := f.scanDir(func(e layout.DirEntry) error {
		if n := string(e.Name); n != "." && n != ".." {
			out = append(out, DirEntry{Name: n, Ino: e.Inode, Type: e.FileType})
		}
		return nil
	})
	return out, err
}
