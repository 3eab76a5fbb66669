package alloc

import (
	"errors"
	"fmt"

	"github.com/ext4io/ext4io/internal/errs"
	"github.com/ext4io/ext4io/layout"
)

func isNoSpace(err error) bool { return errors.Is(err, ErrNoSpace) }

// AllocInode allocates an inode for a new file (dir false) or directory
// in directory parentIno. Directories are spread (Orlov-lite: a group with
// at least average free inodes and blocks and the fewest directories);
// files go to their parent's group, then the next groups.
func (a *Allocator) AllocInode(parentIno uint32, dir bool) (uint32, error) {
	pg := uint64(0)
	if parentIno >= 1 && parentIno <= a.sb.InodesCount {
		pg = uint64((parentIno - 1) / a.ipg)
	}
	start := pg
	if dir {
		start = a.pickDirGroup(pg, parentIno)
	}
	for d := uint64(0); d < a.groups; d++ {
		gi := (start + d) % a.groups
		if a.g[gi].freeInodes.Load() <= 0 {
			continue
		}
		ino, err := a.allocInodeIn(gi, dir)
		if err != nil {
			return 0, err
		}
		if ino != 0 {
			return ino, nil
		}
	}
	return 0, fmt.Errorf("alloc: no free inode: %w", ErrNoSpace)
}

// pickDirGroup chooses a group for a new directory.
func (a *Allocator) pickDirGroup(pg uint64, parent uint32) uint64 {
	n := int64(a.groups)
	avgI := a.freeInodes.Load() / n
	avgB := a.free.Load() / n
	avgD := a.dirs.Load() / n
	ok := func(gi uint64) bool {
		g := a.g[gi]
		return g.freeInodes.Load() > 0 && g.freeInodes.Load() >= avgI && g.freeBlocks.Load() >= avgB
	}
	if parent != layout.RootIno && ok(pg) && a.g[pg].dirs.Load() <= avgD+1 {
		return pg
	}
	// Top-level directories (and crowded parents): scan from a rotating
	// start for the eligible group with the fewest directories.
	rot := a.dirRotor.Add(1) % a.groups
	best, bestDirs := pg, int64(-1)
	for d := uint64(0); d < a.groups; d++ {
		gi := (rot + d) % a.groups
		if !ok(gi) {
			continue
		}
		if dirs := a.g[gi].dirs.Load(); bestDirs < 0 || dirs < bestDirs {
			best, bestDirs = gi, dirs
			if dirs == 0 {
				break
			}
		}
	}
	return best
}

// allocInodeIn takes the first free inode of group gi; 0 if it is full.
func (a *Allocator) allocInodeIn(gi uint64, dir bool) (uint32, error) {
	g := a.g[gi]
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := a.loadInodesLocked(gi); err != nil {
		return 0, err
	}
	d := g.mu.desc
	from := uint64(0)
	if gi == 0 {
		from = uint64(a.sb.FirstInode() - 1)
	}
	idx, ok := nextZero(g.mu.ibitmap, from, uint64(a.ipg))
	if !ok {
		return 0, nil
	}
	if d.FreeInodesCount == 0 {
		return 0, errs.Corruptf("inode bitmap", d.InodeBitmap, -1, "group %d: free inode %d but the descriptor counts none", gi, idx)
	}
	wasUninit := a.csum && d.Flags&layout.BgInodeUninit != 0
	// The slots below bg_itable_unused's mark are initialised, whatever
	// INODE_UNINIT says (a legitimate uninitialised group has the mark
	// at ipg, so none).
	if !a.csum || idx < uint64(a.ipg-min(d.ItableUnused, a.ipg)) {
		if err := a.checkInodeFreeLocked(gi, idx); err != nil {
			return 0, err
		}
	}
	old := *d
	oldRaw := append([]byte(nil), d.Raw...)
	// The kernel initialises the block bitmap of a group whose inodes
	// start being used.
	if a.csum && d.Flags&layout.BgBlockUninit != 0 {
		if err := a.loadLocked(gi); err != nil {
			return 0, err
		}
		if err := a.writeBlockBitmapLocked(gi); err != nil {
			return 0, err
		}
		old.Flags &^= layout.BgBlockUninit
		old.BlockBitmapCsum = d.BlockBitmapCsum
	}
	// An inode table not zeroed yet (mkfs.ext4's lazy_itable_init) is
	// zeroed from its first block past the used inodes, as the kernel's
	// lazy init thread does (ext4_init_inode_table): a slot taken from
	// there then holds no bytes of an earlier filesystem, which a fast
	// commit's replay would keep past its INODE tag (an old extent tree
	// that the range tags would free). The used inodes are those below
	// bg_itable_unused's mark, as for the kernel also in a group marked
	// INODE_UNINIT, and any the bitmap holds past it (a replay that did
	// not move the mark).
	if a.csum && d.Flags&layout.BgInodeZeroed == 0 {
		used := uint64(a.ipg - min(d.ItableUnused, a.ipg))
		if !wasUninit {
			used = max(used, lastSet(g.mu.ibitmap, uint64(a.ipg)))
		}
		from := (used*uint64(a.sb.InodeSizeBytes()) + a.bs - 1) / a.bs
		if from < a.itb {
			if err := a.io.ZeroOut(d.InodeTable+from, a.itb-from); err != nil {
				return 0, fmt.Errorf("alloc: zeroing inode table of group %d: %w", gi, err)
			}
		}
		d.Flags |= layout.BgInodeZeroed
	}
	setBits(g.mu.ibitmap, idx, 1)
	d.FreeInodesCount--
	if dir {
		d.UsedDirsCount++
	}
	d.Flags &^= layout.BgInodeUninit
	if a.csum {
		if used := uint64(a.ipg - d.ItableUnused); idx+1 > used {
			d.ItableUnused = a.ipg - uint32(idx+1)
		}
	}
	if err := a.writeInodeBitmapLocked(gi); err != nil {
		clearBits(g.mu.ibitmap, idx, 1)
		*d = old
		d.Raw = oldRaw
		return 0, err
	}
	g.freeInodes.Add(-1)
	a.freeInodes.Add(-1)
	if dir {
		g.dirs.Add(1)
		a.dirs.Add(1)
	}
	return uint32(gi*uint64(a.ipg) + idx + 1), nil
}

// checkInodeFreeLocked checks that inode idx of group gi, free in the
// bitmap, is free in the inode table too: a bitmap that marks a live inode
// free would make two files share it. Like Linux, which fails such an
// allocation ("doubly allocated?") rather than search on, it refuses with
// ErrCorrupt and changes nothing: a bitmap known to lie about one inode is
// not trusted about the others. Slots past the used part of the table
// (bg_itable_unused, INODE_UNINIT) may hold stale bytes and are not read.
func (a *Allocator) checkInodeFreeLocked(gi, idx uint64) error {
	isz := uint64(a.sb.InodeSizeBytes())
	d := a.g[gi].mu.desc
	blk := d.InodeTable + idx*isz/a.bs
	b, err := a.io.Read(blk)
	if err != nil {
		return err
	}
	off := idx * isz % a.bs
	if layout.InodeFree(b[off : off+isz]) {
		return nil
	}
	ino := uint32(gi*uint64(a.ipg) + idx + 1)
	return &errs.CorruptError{What: "inode bitmap", Ino: ino, Block: d.InodeBitmap, Off: -1,
		Msg: fmt.Sprintf("group %d marks inode %d free but the inode table holds it in use", gi, ino)}
}

// FreeInode frees inode ino (dir: it was a directory). Freeing a free or
// reserved inode fails with ErrCorrupt / ErrInvalid and changes nothing.
// The caller clears the inode itself (i_dtime, i_links_count).
func (a *Allocator) FreeInode(ino uint32, dir bool) error {
	if ino < a.sb.FirstInode() || ino > a.sb.InodesCount {
		return fmt.Errorf("alloc: free inode %d (first %d, count %d): %w", ino, a.sb.FirstInode(), a.sb.InodesCount, ErrInvalid)
	}
	gi := uint64((ino - 1) / a.ipg)
	idx := uint64((ino - 1) % a.ipg)
	g := a.g[gi]
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := a.loadInodesLocked(gi); err != nil {
		return err
	}
	d := g.mu.desc
	if !allSet(g.mu.ibitmap, idx, 1) {
		return &errs.CorruptError{What: "inode bitmap", Ino: ino, Block: d.InodeBitmap, Off: -1, Msg: "freeing a free inode"}
	}
	if dir && d.UsedDirsCount == 0 {
		return &errs.CorruptError{What: "group descriptor", Ino: ino, Off: -1, Msg: fmt.Sprintf("group %d: freeing a directory with no directories counted", gi)}
	}
	clearBits(g.mu.ibitmap, idx, 1)
	d.FreeInodesCount++
	if dir {
		d.UsedDirsCount--
	}
	if err := a.writeInodeBitmapLocked(gi); err != nil {
		setBits(g.mu.ibitmap, idx, 1)
		d.FreeInodesCount--
		if dir {
			d.UsedDirsCount++
		}
		return err
	}
	g.freeInodes.Add(1)
	a.freeInodes.Add(1)
	if dir {
		g.dirs.Add(-1)
		a.dirs.Add(-1)
	}
	return nil
}

// InodeInUse reports whether the inode bitmap marks inode ino in use. A
// number outside 1..s_inodes_count fails with ErrInvalid.
func (a *Allocator) InodeInUse(ino uint32) (bool, error) {
	if ino == 0 || ino > a.sb.InodesCount {
		return false, fmt.Errorf("alloc: inode %d outside 1..%d: %w", ino, a.sb.InodesCount, ErrInvalid)
	}
	gi := uint64((ino - 1) / a.ipg)
	idx := uint64((ino - 1) % a.ipg)
	g := a.g[gi]
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := a.loadInodesLocked(gi); err != nil {
		return false, err
	}
	return allSet(g.mu.ibitmap, idx, 1), nil
}

// OnlyInodeInBlock reports whether ino is the only inode its inode table
// block holds in use, by the inode bitmap: every other inode sharing the
// block is free. Linux's __ext4_get_inode_loc asks the same before it
// builds a new inode's block from zeroes instead of reading it. False
// when the group's bitmap is not loaded (the answer would cost a read of
// its own) or ino is out of range.
func (a *Allocator) OnlyInodeInBlock(ino uint32) bool {
	if ino == 0 || ino > a.sb.InodesCount {
		return false
	}
	gi := uint64((ino - 1) / a.ipg)
	idx := uint64((ino - 1) % a.ipg)
	per := a.bs / uint64(a.sb.InodeSizeBytes())
	if per == 0 {
		return false
	}
	start := idx - idx%per
	g := a.g[gi]
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mu.ibitmap == nil {
		return false
	}
	for i := start; i < start+per && i < uint64(a.ipg); i++ {
		if i != idx && allSet(g.mu.ibitmap, i, 1) {
			return false
		}
	}
	return true
}

// loadInodesLocked reads (or, for INODE_UNINIT, creates) the inode bitmap.
func (a *Allocator) loadInodesLocked(gi uint64) error {
	g := a.g[gi]
	if g.mu.ibitmap != nil {
		return nil
	}
	d := g.mu.desc
	ipg := uint64(a.ipg)
	var bm []byte
	if a.csum && d.Flags&layout.BgInodeUninit != 0 {
		if gi == uint64(layout.RootIno-1)/ipg {
			// An allocation would take (and the lazy init zero) the
			// root directory's inode.
			return errs.Corruptf("group descriptor", d.InodeBitmap, -1, "group %d holds the root directory but is marked INODE_UNINIT", gi)
		}
		bm = make([]byte, a.bs)
		setBits(bm, ipg, a.bs*8-ipg)
	} else {
		raw, err := a.io.Read(d.InodeBitmap)
		if err != nil {
			return fmt.Errorf("alloc: inode bitmap of group %d: %w", gi, err)
		}
		bm = append([]byte(nil), raw...)
		if a.mcsum {
			if c := layout.InodeBitmapChecksum(a.sb, bm); !layout.BitmapCsumMatches(a.sb, d.InodeBitmapCsum, c, true) {
				return errs.Corruptf("inode bitmap", d.InodeBitmap, -1, "group %d: checksum %#x != computed %#x", gi, d.InodeBitmapCsum, c)
			}
		}
	}
	free := uint64(0)
	for i := uint64(0); i < ipg; {
		s, ok := nextZero(bm, i, ipg)
		if !ok {
			break
		}
		e := nextOne(bm, s, ipg)
		free += e - s
		i = e
	}
	if free != uint64(d.FreeInodesCount) {
		return errs.Corruptf("group descriptor", d.InodeBitmap, -1, "group %d: %d free inodes in the bitmap, descriptor says %d", gi, free, d.FreeInodesCount)
	}
	g.mu.ibitmap = bm
	return nil
}

func (a *Allocator) writeInodeBitmapLocked(gi uint64) error {
	g := a.g[gi]
	d := g.mu.desc
	if err := updateBlock(a.io, d.InodeBitmap, a.copiesLocked(gi).ibitmap); err != nil {
		return fmt.Errorf("alloc: inode bitmap of group %d: %w", gi, err)
	}
	if a.mcsum {
		d.InodeBitmapCsum = layout.InodeBitmapChecksum(a.sb, g.mu.ibitmap)
	}
	return a.writeDescLocked(gi)
}

// lastSet returns one past the last set bit of b's first n bits, 0 if
// none is set.
func lastSet(b []byte, n uint64) uint64 {
	for i := min(n, uint64(len(b))*8); i > 0; i-- {
		if b[(i-1)/8]&(1<<((i-1)%8)) != 0 {
			return i
		}
	}
	return 0
}
