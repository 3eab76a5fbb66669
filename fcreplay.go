package ext4io

import (
	"bytes"
	"errors"
	"fmt"
	"math/bits"
	"time"

	"github.com/ext4io/ext4io/extent"
	"github.com/ext4io/ext4io/internal/errs"
	"github.com/ext4io/ext4io/journal"
	"github.com/ext4io/ext4io/layout"
)

// Fast-commit replay: applying the tags ext4 logs instead of a full jbd2
// transaction when it fsyncs (layout/fastcommit.go has their format,
// journal/fastcommit.go the area). journal.Recover calls replayFastCommits
// after the log's blocks are home and before it empties the journal, so a
// crash during the replay replays the log and the fast commits again.
//
// The replay follows e2fsck's (e2fsck/journal.c) for inodes, ranges and
// bitmaps and the kernel's (fs/ext4/fast_commit.c) for directory entries
// and link counts, tag by tag:
//
//   - INODE: the on-disk inode takes the logged copy's fields before i_block
//     and from i_generation on; i_block keeps the extent tree replayed so far
//     (inline data excepted). i_blocks is recounted from the tree, the
//     checksum recomputed, and the inode marked in the inode bitmap if it
//     has links, cleared if not.
//   - ADD_RANGE: the logical range is unmapped from the inode's extent tree
//     (its old blocks cleared in the block bitmap), then the logged extent
//     inserted and its blocks marked.
//   - DEL_RANGE: the range is unmapped and its blocks cleared.
//   - CREAT, LINK: the entry is added with the file type of the inode's
//     mode unless the name exists (the kernel's -EEXIST); LINK adds a link
//     to the inode, CREAT sets its count to 1. CREAT of a directory also
//     writes its first block ("." and "..") as ext4_init_new_dir does, gives
//     it two links and its parent one more.
//   - UNLINK: the entry naming the inode is removed (a missing one is fine)
//     and the inode loses a link; a file left without links is freed with
//     its blocks and xattr block reference, as the kernel's iput evicts it;
//     an empty directory is freed and its parent loses a link (rmdir).
//   - HEAD, TAIL, PAD: nothing.
//
// e2fsck 1.47.0 leaves link counts to INODE tags, so an unlinked file whose
// inode Linux did not log stays allocated and unattached; the kernel's way
// leaves a filesystem e2fsck -fn finds clean. For directories ext4io goes
// further than Linux 6.18's replay, which leaves a new directory with one
// link, its parent's count unchanged and a removed directory allocated but
// unconnected (e2fsck -fn complains after it). At the end the changed
// bitmaps are written and each changed group's free counts, directory
// count, unused-inode mark and uninit flags recomputed from them, as
// ext2fs_calculate_summary_stats does; the superblock totals follow in
// recover.
//
// Blocks named by the replayed ADD_RANGE tags are never handed out as tree
// or directory blocks (the kernel's fc_regions exclusion). Entries go into
// the first linear block with room, or the leaf an htree directory's hash
// selects.
//
// Not handled (replay fails with ErrUnsupported, the journal stays as it
// was): range tags on block-mapped (non-extent) inodes, adding an entry to
// an htree directory whose leaf is full, freeing a block-mapped inode,
// bigalloc, parents with inline data. Freeing an inode leaves xattr inodes
// (ea_inode) alone. A CREAT of a symlink adds its entry (e2fsck 1.47.0
// skips it).

// replayFastCommits is the journal.FastCommitReplayer of recover.
func (v *Volume) replayFastCommits(area journal.FastCommitArea) (int, error) {
	// The log replay just rewrote metadata: read it again.
	if err := v.reloadMeta(); err != nil {
		return 0, err
	}
	scan := layout.ScanFastCommits(area.Blocks, area.ExpectedTid)
	if len(scan.Tags) == 0 {
		return 0, nil
	}
	if v.sb.ClusterSize() != v.bs {
		return 0, fmt.Errorf("ext4io: fast-commit replay on a bigalloc filesystem: %w", ErrUnsupported)
	}
	r := &fcReplay{v: v, bs: v.bs, isz: v.sb.InodeSizeBytes(),
		bbm: map[uint64][]byte{}, ibm: map[uint64][]byte{},
		bdirty: map[uint64]bool{}, idirty: map[uint64]bool{}, igroups: map[uint64]bool{}}
	for _, t := range scan.Tags {
		if t.Tag == layout.FCTagAddRange {
			rg, _ := t.Range()
			r.exclude = append(r.exclude, [2]uint64{rg.Pblk, rg.Pblk + uint64(rg.Len)})
		}
	}
	// Like e2fsck, flag the filesystem while the replay, which is not
	// atomic, runs: a crash in the middle leaves it marked for e2fsck.
	state := v.sb.State
	if err := v.writeSuperState(state | layout.StateErrors); err != nil {
		return 0, err
	}
	n := 0
	for _, t := range scan.Tags {
		if err := r.apply(t); err != nil {
			return n, fmt.Errorf("ext4io: replaying fast-commit tag %s (block %d, byte %#x): %w",
				layout.FCTagName(t.Tag), t.Block, t.Off, err)
		}
		n++
	}
	if err := r.finish(); err != nil {
		return n, err
	}
	if err := v.writeSuperState(state); err != nil {
		return n, err
	}
	v.forgetInodes()
	return n, v.flushDev()
}

// reloadMeta reads the superblock and group descriptors again and drops
// every cached inode and mapping.
func (v *Volume) reloadMeta() error {
	buf := make([]byte, layout.SuperblockSize)
	if _, err := readFull(v.dev, buf, layout.SuperblockOffset); err != nil {
		return fmt.Errorf("ext4io: reading the replayed superblock: %w", err)
	}
	sb, err := layout.DecodeSuperblock(buf)
	if err != nil {
		return fmt.Errorf("ext4io: replayed superblock: %w", err)
	}
	v.sb = sb
	v.forgetInodes()
	return v.loadGroups()
}

// forgetInodes drops the cached inodes and their mappings: also those of
// inodes the inode cache demoted (inocache.go), which it may no longer
// know of once they were collected, and whose trees the replay may have
// rewritten too.
func (v *Volume) forgetInodes() {
	v.inoMu.Lock()
	old := v.resetInodesLocked()
	v.inoMu.Unlock()
	for ino, n := range old {
		if n.m != nil {
			n.m.discardRun()
		}
		v.cache.Forget(ino)
	}
	v.cache.DropClean()
}

// writeSuperState writes the superblock with s_state set to state.
func (v *Volume) writeSuperState(state uint16) error {
	v.sbMu.Lock()
	defer v.sbMu.Unlock()
	v.sb.State = state
	return v.writeSuperDirectLocked()
}

// maxLblk is the last logical block an extent can map (EXT_MAX_BLOCKS-1).
const maxLblk = 0xFFFFFFFE

// fcReplay holds the in-memory bitmaps of one fast-commit replay.
// It is used by one goroutine.
type fcReplay struct {
	v       *Volume
	bs, isz int
	bbm     map[uint64][]byte // group -> block bitmap, once read
	ibm     map[uint64][]byte // group -> inode bitmap, once read
	bdirty  map[uint64]bool
	idirty  map[uint64]bool
	igroups map[uint64]bool        // groups whose inodes changed: recount directories
	exclude [][2]uint64            // [start, end) of every replayed ADD_RANGE
	meta    map[uint64][][2]uint64 // group -> its metadata runs (groupMeta)
}

func (r *fcReplay) apply(t layout.FCTag) error {
	switch t.Tag {
	case layout.FCTagInode:
		return r.inode(t.Inode())
	case layout.FCTagAddRange, layout.FCTagDelRange:
		rg, err := t.Range()
		if err != nil {
			return err
		}
		return r.rangeTag(rg, t.Tag == layout.FCTagAddRange)
	case layout.FCTagCreat, layout.FCTagLink:
		d, err := t.Dentry()
		if err != nil {
			return err
		}
		return r.link(d, t.Tag == layout.FCTagCreat)
	case layout.FCTagUnlink:
		d, err := t.Dentry()
		if err != nil {
			return err
		}
		return r.unlink(d)
	}
	return nil // HEAD, TAIL, PAD
}

// inoOK reports whether ext4_iget(EXT4_IGET_NORMAL) would return inode
// ino: the root or an ordinary inode, never a reserved one (the journal,
// the resize inode, ...).
func (r *fcReplay) inoOK(ino uint32) bool {
	sb := r.v.sb
	return ino == layout.RootIno || ino >= sb.FirstInode() && ino <= sb.InodesCount
}

func (r *fcReplay) inodeLoc(ino uint32) (blk uint64, off int) {
	v := r.v
	g, idx := v.sb.InodeLocation(ino)
	byteOff := uint64(idx) * uint64(r.isz)
	return v.groups[g].InodeTable + byteOff/uint64(r.bs), int(byteOff % uint64(r.bs))
}

// readInodeRaw returns the whole on-disk inode, unchecked.
func (r *fcReplay) readInodeRaw(ino uint32) ([]byte, error) {
	blk, off := r.inodeLoc(ino)
	buf := make([]byte, r.bs)
	if err := r.v.readBlock(blk, buf); err != nil {
		return nil, err
	}
	return buf[off : off+r.isz], nil
}

// readInode reads and decodes inode ino (its checksum unchecked, as
// readInodeRaw).
func (r *fcReplay) readInode(ino uint32) (*layout.Inode, error) {
	raw, err := r.readInodeRaw(ino)
	if err != nil {
		return nil, err
	}
	return layout.DecodeInode(raw, r.isz)
}

// writeInode checksums and writes inode ino.
func (r *fcReplay) writeInode(ino uint32, in *layout.Inode) error {
	v := r.v
	in.Encode(r.isz)
	if v.csum {
		in.SetChecksum(v.csumSeed, ino)
	}
	blk, off := r.inodeLoc(ino)
	_, err := v.dev.WriteAt(in.Raw, int64(blk)*int64(r.bs)+int64(off))
	if err != nil {
		return fmt.Errorf("ext4io: writing inode %d: %w", ino, errors.Join(ErrIO, err))
	}
	g, _ := v.sb.InodeLocation(ino)
	r.igroups[g] = true
	v.forgetInodes()
	return nil
}

// inode replays an INODE tag.
func (r *fcReplay) inode(fi layout.FCInode) error {
	if !r.inoOK(fi.Ino) {
		return nil
	}
	n, err := layout.FCInodeLen(fi.Raw, r.isz)
	if err != nil {
		return err
	}
	raw, err := r.readInodeRaw(fi.Ino)
	if err != nil {
		return err
	}
	layout.FCMergeInode(raw[:n], fi.Raw[:n])
	in, err := layout.DecodeInode(raw, r.isz)
	if err != nil {
		return err
	}
	if err := r.recount(fi.Ino, in); err != nil {
		return err
	}
	if err := r.writeInode(fi.Ino, in); err != nil {
		return err
	}
	return r.markInode(fi.Ino, in.LinksCount != 0)
}

// recount sets i_blocks from the blocks the inode maps, its tree blocks
// and its xattr block, as e2fsck counts them.
func (r *fcReplay) recount(ino uint32, in *layout.Inode) error {
	sb := r.v.sb
	var n uint64
	switch {
	case in.Flags&layout.InodeFlagInlineData != 0:
	case in.IsSymlink() && isFastSymlink(sb, in):
	case in.Flags&layout.InodeFlagExtents != 0:
		t, err := r.tree(ino, in)
		if err != nil {
			return err
		}
		if err := t.Walk(func(e extent.Extent) error { n += uint64(e.Len); return nil }); err != nil {
			return err
		}
		if err := t.Blocks(func(uint64, int) error { n++; return nil }); err != nil {
			return err
		}
	default:
		cfg := r.treeConfig(ino, in)
		err := extent.WalkIndirect(&in.Block, cfg, func(e extent.Extent) error { n += uint64(e.Len); return nil },
			func(uint64) error { n++; return nil })
		if err != nil {
			return err
		}
	}
	if in.FileACL != 0 {
		n++
	}
	if !in.SetBlocks(sb, n*uint64(r.bs/512)) {
		return &errs.CorruptError{What: "inode", Ino: ino, Off: -1, Msg: fmt.Sprintf("%d blocks do not fit i_blocks", n)}
	}
	return nil
}

func (r *fcReplay) treeConfig(ino uint32, in *layout.Inode) extent.Config {
	v := r.v
	g, _ := v.sb.InodeLocation(ino)
	return extent.Config{BlockSize: r.bs, Ino: ino, Seed: extent.InodeSeed(v.csumSeed, ino, in.Generation),
		Csum: v.csum, FirstDataBlock: uint64(v.sb.FirstDataBlock), BlocksCount: v.sb.BlocksCount,
		IO: extent.NewDeviceIO(v.dev, r.bs), Alloc: r, Goal: v.sb.GroupFirstBlock(g)}
}

func (r *fcReplay) tree(ino uint32, in *layout.Inode) (*extent.Tree, error) {
	return extent.Open(&in.Block, r.treeConfig(ino, in))
}

// rangeTag replays ADD_RANGE (add) or DEL_RANGE.
func (r *fcReplay) rangeTag(rg layout.FCRange, add bool) error {
	if !r.inoOK(rg.Ino) || rg.Len == 0 || rg.Lblk > maxLblk {
		return nil
	}
	in, err := r.readInode(rg.Ino)
	if err != nil {
		return err
	}
	if in.Flags&layout.InodeFlagExtents == 0 {
		return fmt.Errorf("ext4io: fast-commit range of block-mapped inode %d: %w", rg.Ino, ErrUnsupported)
	}
	t, err := r.tree(rg.Ino, in)
	if err != nil {
		return err
	}
	last := min(uint64(rg.Lblk)+uint64(rg.Len)-1, maxLblk)
	if err := t.Remove(rg.Lblk, uint32(last)); err != nil {
		return err
	}
	if add {
		if err := r.checkNotMeta(rg.Ino, rg.Pblk, uint64(rg.Len)); err != nil {
			return err
		}
		if err := t.Insert(extent.Extent{Lblk: rg.Lblk, Len: rg.Len, Pblk: rg.Pblk, Unwritten: rg.Unwritten}); err != nil {
			return err
		}
		if err := r.markBlocks(rg.Pblk, uint64(rg.Len), true); err != nil {
			return err
		}
	}
	in.Block = t.Root()
	if err := r.recount(rg.Ino, in); err != nil {
		return err
	}
	return r.writeInode(rg.Ino, in)
}

// AllocTreeBlock, FreeTreeBlock and FreeData make fcReplay the
// extent.Allocator of the trees it changes: blocks come from and go back
// to the in-memory bitmaps.
func (r *fcReplay) AllocTreeBlock(goal uint64, _ bool) (uint64, error) {
	return r.allocBlock(goal)
}

func (r *fcReplay) FreeTreeBlock(pblk uint64) error { return r.markBlocks(pblk, 1, false) }

func (r *fcReplay) FreeData(pblk, n uint64) error { return r.markBlocks(pblk, n, false) }

// allocBlock finds a free block at or after goal (then from the start),
// skipping the replayed ranges, and marks it used.
func (r *fcReplay) allocBlock(goal uint64) (uint64, error) {
	sb := r.v.sb
	first := uint64(sb.FirstDataBlock)
	if goal < first || goal >= sb.BlocksCount {
		goal = first
	}
	ng := sb.GroupCount()
	g0 := (goal - first) / uint64(sb.BlocksPerGroup)
	for k := uint64(0); k <= ng; k++ {
		g := (g0 + k) % ng
		bm, err := r.blockBitmap(g)
		if err != nil {
			return 0, err
		}
		base := sb.GroupFirstBlock(g)
		from := uint64(0)
		if k == 0 {
			from = goal - base
		}
		for i := from; i < uint64(sb.GroupBlocks(g)); i++ {
			if bm[i/8]&(1<<(i%8)) != 0 || r.excluded(base+i) {
				continue
			}
			if err := r.markBlocks(base+i, 1, true); err != nil {
				return 0, err
			}
			return base + i, nil
		}
	}
	return 0, fmt.Errorf("ext4io: fast-commit replay: no free block: %w", ErrNoSpace)
}

func (r *fcReplay) excluded(b uint64) bool {
	for _, e := range r.exclude {
		if b >= e[0] && b < e[1] {
			return true
		}
	}
	return false
}

// checkNotMeta refuses a replayed extent that would map filesystem
// metadata (superblocks, descriptors, bitmaps, inode tables) into a file,
// as the kernel's block_validity does.
func (r *fcReplay) checkNotMeta(ino uint32, start, n uint64) error {
	sb := r.v.sb
	first := uint64(sb.FirstDataBlock)
	if start < first || start >= sb.BlocksCount || n > sb.BlocksCount-start {
		return &errs.CorruptError{What: "fast commit", Ino: ino, Block: start, Off: -1, Msg: fmt.Sprintf("extent %d+%d outside the filesystem", start, n)}
	}
	for b := start; b < start+n; {
		g := (b - first) / uint64(sb.BlocksPerGroup)
		base := sb.GroupFirstBlock(g)
		end := min(start+n, base+uint64(sb.GroupBlocks(g)))
		for _, m := range r.groupMeta(g) {
			if base+m[0] < end && b < base+m[1] {
				return &errs.CorruptError{What: "fast commit", Ino: ino, Block: start, Off: -1,
					Msg: fmt.Sprintf("extent %d+%d maps metadata block %d", start, n, max(b, base+m[0]))}
			}
		}
		b = end
	}
	return nil
}

// groupMeta returns the runs of fixed metadata lying in group g: its base
// blocks (superblock backup, descriptors, reserved GDT) and every group's
// bitmaps and inode table that flex_bg placed there.
func (r *fcReplay) groupMeta(g uint64) [][2]uint64 {
	if m, ok := r.meta[g]; ok {
		return m
	}
	if r.meta == nil {
		r.meta = map[uint64][][2]uint64{}
	}
	v := r.v
	sb := v.sb
	base, end := sb.GroupFirstBlock(g), sb.GroupFirstBlock(g)+uint64(sb.GroupBlocks(g))
	itb := (uint64(sb.InodesPerGroup)*uint64(r.isz) + uint64(r.bs) - 1) / uint64(r.bs)
	var out [][2]uint64
	add := func(s, n uint64) {
		s2, e2 := max(s, base), min(s+n, end)
		if s2 < e2 {
			out = append(out, [2]uint64{s2 - base, e2 - base})
		}
	}
	add(base, layout.GroupBaseBlocks(sb, g))
	for _, d := range v.groups {
		add(d.BlockBitmap, 1)
		add(d.InodeBitmap, 1)
		add(d.InodeTable, itb)
	}
	r.meta[g] = out
	return out
}

// blockBitmap returns group g's block bitmap, reading it (or building it
// for a BLOCK_UNINIT group, as ext4_init_block_bitmap does) on first use.
func (r *fcReplay) blockBitmap(g uint64) ([]byte, error) {
	if bm := r.bbm[g]; bm != nil {
		return bm, nil
	}
	v := r.v
	d := v.groups[g]
	bm := make([]byte, r.bs)
	if v.sb.HasGroupChecksums() && d.Flags&layout.BgBlockUninit != 0 {
		if g == v.sb.GroupCount()-1 {
			// As for the allocator: mkfs.ext4 and the kernel's resize
			// always initialise the last group's bitmap.
			return nil, errs.Corruptf("group descriptor", d.BlockBitmap, -1, "group %d: the last group is marked BLOCK_UNINIT", g)
		}
		for _, m := range r.groupMeta(g) {
			setBitRange(bm, m[0], m[1]-m[0], true)
		}
		nb := uint64(v.sb.GroupBlocks(g))
		setBitRange(bm, nb, uint64(r.bs)*8-nb, true)
	} else if err := v.readBlock(d.BlockBitmap, bm); err != nil {
		return nil, fmt.Errorf("ext4io: block bitmap of group %d: %w", g, err)
	}
	r.bbm[g] = bm
	return bm, nil
}

// inodeBitmap returns group g's inode bitmap (zero for an INODE_UNINIT
// group, its tail past s_inodes_per_group set).
func (r *fcReplay) inodeBitmap(g uint64) ([]byte, error) {
	if bm := r.ibm[g]; bm != nil {
		return bm, nil
	}
	v := r.v
	d := v.groups[g]
	bm := make([]byte, r.bs)
	if v.sb.HasGroupChecksums() && d.Flags&layout.BgInodeUninit != 0 {
		ipg := uint64(v.sb.InodesPerGroup)
		setBitRange(bm, ipg, uint64(r.bs)*8-ipg, true)
	} else if err := v.readBlock(d.InodeBitmap, bm); err != nil {
		return nil, fmt.Errorf("ext4io: inode bitmap of group %d: %w", g, err)
	}
	r.ibm[g] = bm
	return bm, nil
}

// markBlocks sets (used) or clears [start, start+n) in the block bitmaps,
// as ext2fs_mark/unmark_block_bitmap_range2: bits already so stay so.
func (r *fcReplay) markBlocks(start, n uint64, used bool) error {
	sb := r.v.sb
	first := uint64(sb.FirstDataBlock)
	if start < first || start >= sb.BlocksCount || n > sb.BlocksCount-start {
		return &errs.CorruptError{What: "fast commit", Block: start, Off: -1, Msg: fmt.Sprintf("blocks %d+%d outside the filesystem", start, n)}
	}
	for n > 0 {
		g := (start - first) / uint64(sb.BlocksPerGroup)
		base := sb.GroupFirstBlock(g)
		k := min(n, base+uint64(sb.GroupBlocks(g))-start)
		bm, err := r.blockBitmap(g)
		if err != nil {
			return err
		}
		setBitRange(bm, start-base, k, used)
		r.bdirty[g] = true
		start, n = start+k, n-k
	}
	return nil
}

func (r *fcReplay) markInode(ino uint32, used bool) error {
	g, idx := r.v.sb.InodeLocation(ino)
	bm, err := r.inodeBitmap(g)
	if err != nil {
		return err
	}
	setBitRange(bm, uint64(idx), 1, used)
	r.idirty[g] = true
	return nil
}

func setBitRange(bm []byte, from, n uint64, set bool) {
	for i := from; i < from+n; i++ {
		if set {
			bm[i/8] |= 1 << (i % 8)
		} else {
			bm[i/8] &^= 1 << (i % 8)
		}
	}
}

func countBits(bm []byte, n uint64) uint64 {
	var c uint64
	for i := uint64(0); i < n/8; i++ {
		c += uint64(bits.OnesCount8(bm[i]))
	}
	for i := n &^ 7; i < n; i++ {
		c += uint64(bm[i/8] >> (i % 8) & 1)
	}
	return c
}

// finish writes the changed bitmaps and recomputes the changed groups'
// descriptors from them.
func (r *fcReplay) finish() error {
	v := r.v
	sb := v.sb
	ipg := uint64(sb.InodesPerGroup)
	touched := map[uint64]bool{}
	for g := range r.igroups {
		if _, err := r.inodeBitmap(g); err != nil {
			return err
		}
		r.idirty[g] = true
	}
	for g := range r.bdirty {
		bm := r.bbm[g]
		d := v.groups[g]
		if err := r.writeBlock(d.BlockBitmap, bm); err != nil {
			return err
		}
		nb := uint64(sb.GroupBlocks(g))
		d.FreeBlocksCount = uint32(nb - countBits(bm, nb))
		if sb.MetadataCsum() {
			d.BlockBitmapCsum = layout.BlockBitmapChecksum(sb, bm)
		}
		d.Flags &^= layout.BgBlockUninit
		touched[g] = true
	}
	for g := range r.idirty {
		bm := r.ibm[g]
		d := v.groups[g]
		if err := r.writeBlock(d.InodeBitmap, bm); err != nil {
			return err
		}
		used := countBits(bm, ipg)
		d.FreeInodesCount = uint32(ipg - used)
		if sb.MetadataCsum() {
			d.InodeBitmapCsum = layout.InodeBitmapChecksum(sb, bm)
		}
		// Directories and the highest inode in use, as e2fsck's pass 5
		// expects them.
		dirs, top := uint32(0), uint64(0)
		tbuf, tblk := make([]byte, r.bs), ^uint64(0)
		for i := uint64(0); i < ipg; i++ {
			if bm[i/8]&(1<<(i%8)) == 0 {
				continue
			}
			top = i + 1
			blk, off := r.inodeLoc(uint32(g*ipg + i + 1))
			if blk != tblk {
				if err := v.readBlock(blk, tbuf); err != nil {
					return err
				}
				tblk = blk
			}
			if in, err := layout.DecodeInode(tbuf[off:off+r.isz], r.isz); err == nil && in.IsDir() && in.LinksCount != 0 {
				dirs++
			}
		}
		d.UsedDirsCount = dirs
		if sb.HasGroupChecksums() {
			if d.Flags&layout.BgInodeUninit != 0 {
				d.ItableUnused = uint32(ipg)
			}
			d.ItableUnused = min(d.ItableUnused, uint32(ipg-top))
			if used != 0 {
				d.Flags &^= layout.BgInodeUninit
			}
		}
		touched[g] = true
	}
	for g := range touched {
		d := v.groups[g]
		d.Encode(sb.DescriptorSize())
		d.SetChecksum(sb, uint32(g))
		blk, off := sb.DescriptorLocation(g)
		if _, err := v.dev.WriteAt(d.Raw, int64(blk)*int64(r.bs)+int64(off)); err != nil {
			return fmt.Errorf("ext4io: writing descriptor of group %d: %w", g, errors.Join(ErrIO, err))
		}
	}
	return nil
}

func (r *fcReplay) writeBlock(blk uint64, b []byte) error {
	if _, err := r.v.dev.WriteAt(b, int64(blk)*int64(r.bs)); err != nil {
		return fmt.Errorf("ext4io: writing block %d: %w", blk, errors.Join(ErrIO, err))
	}
	return nil
}

// dirFile opens directory ino afresh (the caches were dropped by the last
// write).
func (r *fcReplay) dirFile(ino uint32) (*File, error) {
	v := r.v
	n, err := v.getOrphanInode(ino) // replay: no lookup races it
	if err != nil {
		return nil, err
	}
	if !n.in.IsDir() || n.m == nil {
		return nil, &errs.CorruptError{What: "fast commit", Ino: ino, Off: -1, Msg: "parent is not a directory with blocks"}
	}
	return newFile(v, n, ino, fmt.Sprintf("<%d>", ino)), nil
}

// dirBlocks calls fn with each leaf or linear block of directory f (htree
// index blocks skipped) until fn returns true.
func (r *fcReplay) dirBlocks(f *File, fn func(lblk uint64, b []byte) (bool, error)) error {
	nblk := (f.in.Size + uint64(r.bs) - 1) / uint64(r.bs)
	dx := r.v.isDxDir(f.in)
	buf := make([]byte, r.bs)
	for lblk := uint64(0); lblk < nblk; lblk++ {
		ok, err := f.dirBlock(lblk, buf)
		if err != nil {
			return err
		}
		if !ok || dx && (lblk == 0 || layout.IsDxNodeBlock(buf)) {
			continue
		}
		if stop, err := fn(lblk, buf); err != nil || stop {
			return err
		}
	}
	return nil
}

// writeDirBlock refreshes the checksum tail of logical block lblk of f and
// writes it.
func (r *fcReplay) writeDirBlock(f *File, lblk uint64, b []byte) error {
	v := r.v
	if v.csum && layout.HasDirTail(b) {
		layout.SetDirTail(layout.InodeSeed(v.csumSeed, f.ino, f.in.Generation), b)
	}
	return r.writeBlock(f.physOf(lblk), b)
}

func (r *fcReplay) blockHasTail(b []byte) bool { return r.v.csum && layout.HasDirTail(b) }

// dirRemove removes the entry name of directory parent (only if it names
// ino, when ino is not 0), as ext2fs_unlink: merged into the entry before
// it, or marked unused when first in its block.
func (r *fcReplay) dirRemove(parent uint32, name []byte, ino uint32) error {
	f, err := r.dirFile(parent)
	if err != nil {
		return err
	}
	ft := r.v.sb.HasIncompat(layout.IncompatFiletype)
	found := false
	err = r.dirBlocks(f, func(lblk uint64, b []byte) (bool, error) {
		prev := -1
		err := layout.DirBlock(b, f.physOf(lblk), parent, r.blockHasTail(b), ft, lblk == 0, func(e layout.DirEntry) error {
			if e.Inode != 0 && bytes.Equal(e.Name, name) && (ino == 0 || e.Inode == ino) {
				if prev >= 0 {
					layout.SetDirRecLen(b, prev, layout.DirRecLenAt(b, prev)+e.RecLen)
				} else {
					layout.SetDirEntryInode(b, e.Off, 0)
				}
				found = true
				return errStop
			}
			prev = e.Off
			return nil
		})
		if err != nil && !errors.Is(err, errStop) {
			return false, err
		}
		if found {
			return true, r.writeDirBlock(f, lblk, b)
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	if !found {
		return ErrNotFound
	}
	return nil
}

// link replays CREAT (creat) and LINK as the kernel's
// ext4_fc_replay_create and ext4_fc_replay_link do: the entry is added
// unless the name is already there (-EEXIST), LINK then counts one more
// link and CREAT sets the count to 1.
func (r *fcReplay) link(d layout.FCDentry, creat bool) error {
	if !r.inoOK(d.Parent) || !r.inoOK(d.Ino) {
		return nil
	}
	in, err := r.readInode(d.Ino)
	if err != nil {
		return err
	}
	ft, ok := fileTypeOf(in.Mode)
	if !ok {
		return &errs.CorruptError{What: "fast commit", Ino: d.Ino, Off: -1, Msg: fmt.Sprintf("link of an inode with mode %#o", in.Mode)}
	}
	if !r.v.sb.HasIncompat(layout.IncompatFiletype) {
		ft = 0
	}
	if in.IsDir() && (!creat || d.Ino == layout.RootIno) {
		// Directories have one name: a LINK of one (or a CREAT of the
		// root) would make a cycle.
		return &errs.CorruptError{What: "fast commit", Ino: d.Ino, Off: -1, Msg: fmt.Sprintf("%s of directory %d", map[bool]string{true: "CREAT", false: "LINK"}[creat], d.Ino)}
	}
	exists, err := r.dirHas(d.Parent, d.Name)
	if err != nil {
		return err
	}
	if creat && in.IsDir() && !exists {
		// A directory created by this commit has no block yet (Linux logs
		// none); one with blocks is an existing directory that would get
		// a second name.
		if mapped, err := r.hasBlock0(d.Ino, in); err != nil {
			return err
		} else if mapped {
			return &errs.CorruptError{What: "fast commit", Ino: d.Ino, Off: -1, Msg: fmt.Sprintf("CREAT of directory %d, which already has blocks", d.Ino)}
		}
	}
	if !exists {
		if err := r.dirAdd(d.Parent, d.Name, d.Ino, ft); err != nil {
			return err
		}
	}
	if creat && in.IsDir() {
		return r.creatDir(d, exists)
	}
	switch {
	case creat:
		in.LinksCount = 1
	case exists:
		return nil
	case in.LinksCount < 0xFFFF:
		in.LinksCount++
	}
	if err := r.writeInode(d.Ino, in); err != nil {
		return err
	}
	return r.markInode(d.Ino, true)
}

// hasBlock0 reports whether inode ino maps logical block 0.
func (r *fcReplay) hasBlock0(ino uint32, in *layout.Inode) (bool, error) {
	if in.Flags&layout.InodeFlagExtents == 0 {
		return false, fmt.Errorf("ext4io: fast-commit CREAT of block-mapped directory %d: %w", ino, ErrUnsupported)
	}
	t, err := r.tree(ino, in)
	if err != nil {
		return false, err
	}
	_, mapped, _, err := t.Lookup(0)
	return mapped, err
}

// creatDir finishes the CREAT of directory d.Ino, as the kernel's
// ext4_init_new_dir: Linux logs no range for a new directory, so its first
// block is written here ("." and ".."), and it gets two links; the parent,
// when the entry was added, one more for the new "..". (Linux's own replay
// leaves the new directory with one link and the parent's count unchanged,
// which e2fsck then corrects.)
func (r *fcReplay) creatDir(d layout.FCDentry, existed bool) error {
	v := r.v
	in, err := r.readInode(d.Ino)
	if err != nil {
		return err
	}
	if in.Flags&layout.InodeFlagExtents == 0 {
		return fmt.Errorf("ext4io: fast-commit CREAT of block-mapped directory %d: %w", d.Ino, ErrUnsupported)
	}
	t, err := r.tree(d.Ino, in)
	if err != nil {
		return err
	}
	if _, mapped, _, err := t.Lookup(0); err != nil {
		return err
	} else if !mapped {
		g, _ := v.sb.InodeLocation(d.Ino)
		pblk, err := r.allocBlock(v.sb.GroupFirstBlock(g))
		if err != nil {
			return err
		}
		ft := uint8(0)
		if v.sb.HasIncompat(layout.IncompatFiletype) {
			ft = layout.FtDir
		}
		b := make([]byte, r.bs)
		end := r.bs
		if v.csum {
			end -= layout.DirTailLen
		}
		dot := layout.DirRecLen(1)
		layout.PutDirEntry(b, 0, d.Ino, dot, ft, []byte("."))
		layout.PutDirEntry(b, dot, d.Parent, end-dot, ft, []byte(".."))
		if v.csum {
			layout.SetDirTail(layout.InodeSeed(v.csumSeed, d.Ino, in.Generation), b)
		}
		if err := r.writeBlock(pblk, b); err != nil {
			return err
		}
		if err := t.Insert(extent.Extent{Lblk: 0, Len: 1, Pblk: pblk}); err != nil {
			return err
		}
		in.Block = t.Root()
		in.Size = max(in.Size, uint64(r.bs))
		in.LinksCount = 2
		if err := r.recount(d.Ino, in); err != nil {
			return err
		}
	}
	if err := r.writeInode(d.Ino, in); err != nil {
		return err
	}
	if err := r.markInode(d.Ino, true); err != nil {
		return err
	}
	if existed {
		return nil
	}
	return r.addDirLink(d.Parent, +1)
}

// addDirLink changes directory ino's link count by delta for a
// subdirectory's "..", as ext4_inc_count/ext4_dec_count do with dir_nlink:
// a count of 1 (more than EXT4_LINK_MAX subdirectories) stays 1.
func (r *fcReplay) addDirLink(ino uint32, delta int) error {
	in, err := r.readInode(ino)
	if err != nil {
		return err
	}
	switch n := int(in.LinksCount) + delta; {
	case in.LinksCount <= 1:
		return nil
	case n >= 65000 && r.v.sb.HasRoCompat(layout.RoCompatDirNlink):
		in.LinksCount = 1
	case n < 2 || n > 0xFFFF:
		return nil
	default:
		in.LinksCount = uint16(n)
	}
	return r.writeInode(ino, in)
}

// unlink replays UNLINK as ext4_fc_replay_unlink does: the entry naming
// the inode is removed (a missing one is fine) and the inode loses a link;
// at zero links it is freed with its blocks, as evicting it would.
func (r *fcReplay) unlink(d layout.FCDentry) error {
	if !r.inoOK(d.Parent) || !r.inoOK(d.Ino) {
		return nil
	}
	err := r.dirRemove(d.Parent, d.Name, d.Ino)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	in, err := r.readInode(d.Ino)
	if err != nil {
		return err
	}
	if in.IsDir() {
		// An rmdir: Linux logs no tag for the directory itself. An empty
		// one goes with its blocks and its parent loses the link of its
		// ".." (Linux's replay drops one link and leaves it unconnected).
		empty, err := r.dirEmpty(d.Ino)
		if err != nil {
			return err
		}
		if !empty {
			if in.LinksCount > 0 {
				in.LinksCount--
			}
			return r.writeInode(d.Ino, in)
		}
		in.LinksCount = 0
		if err := r.freeInode(d.Ino, in); err != nil {
			return err
		}
		return r.addDirLink(d.Parent, -1)
	}
	if in.LinksCount > 0 {
		in.LinksCount--
	}
	if in.LinksCount == 0 {
		return r.freeInode(d.Ino, in)
	}
	return r.writeInode(d.Ino, in)
}

// dirEmpty reports whether directory ino holds nothing but "." and "..".
func (r *fcReplay) dirEmpty(ino uint32) (bool, error) {
	f, err := r.dirFile(ino)
	if err != nil {
		return false, err
	}
	empty := true
	ft := r.v.sb.HasIncompat(layout.IncompatFiletype)
	err = r.dirBlocks(f, func(lblk uint64, b []byte) (bool, error) {
		err := layout.DirBlock(b, f.physOf(lblk), ino, r.blockHasTail(b), ft, lblk == 0, func(e layout.DirEntry) error {
			if e.Inode != 0 && string(e.Name) != "." && string(e.Name) != ".." {
				empty = false
				return errStop
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStop) {
			return false, err
		}
		return !empty, nil
	})
	return empty, err
}

// freeInode releases an inode left without links: its blocks (and an
// xattr block only it uses) go back to the bitmap, i_size and the extent
// tree are emptied, i_dtime is set and the inode bit cleared.
func (r *fcReplay) freeInode(ino uint32, in *layout.Inode) error {
	if in.Flags&layout.InodeFlagExtents != 0 {
		t, err := r.tree(ino, in)
		if err != nil {
			return err
		}
		if err := t.Remove(0, maxLblk); err != nil {
			return err
		}
		in.Block = t.Root()
	} else if in.Flags&layout.InodeFlagInlineData == 0 && !(in.IsSymlink() && isFastSymlink(r.v.sb, in)) {
		return fmt.Errorf("ext4io: fast-commit unlink frees block-mapped inode %d: %w", ino, ErrUnsupported)
	}
	if in.FileACL != 0 {
		if err := r.releaseXattrBlock(ino, in.FileACL); err != nil {
			return err
		}
		in.FileACL = 0
	}
	in.Size = 0
	in.Dtime = uint32(time.Now().Unix())
	if err := r.recount(ino, in); err != nil {
		return err
	}
	if err := r.writeInode(ino, in); err != nil {
		return err
	}
	return r.markInode(ino, false)
}

// releaseXattrBlock drops inode ino's reference to its xattr block,
// freeing the block with its last reference.
func (r *fcReplay) releaseXattrBlock(ino uint32, blk uint64) error {
	v := r.v
	if err := r.checkInFS(ino, blk, 1); err != nil {
		return err
	}
	b := make([]byte, r.bs)
	if err := v.readBlock(blk, b); err != nil {
		return err
	}
	free, err := layout.XattrBlockRelease(b, blk, v.csumSeed, v.csum)
	if err != nil {
		return err
	}
	if free {
		return r.markBlocks(blk, 1, false)
	}
	return r.writeBlock(blk, b)
}

// checkInFS refuses blocks outside the filesystem's data area.
func (r *fcReplay) checkInFS(ino uint32, start, n uint64) error {
	sb := r.v.sb
	if start < uint64(sb.FirstDataBlock) || start >= sb.BlocksCount || n > sb.BlocksCount-start {
		return &errs.CorruptError{What: "fast commit", Ino: ino, Block: start, Off: -1, Msg: fmt.Sprintf("blocks %d+%d outside the filesystem", start, n)}
	}
	return nil
}

// dirHas reports whether directory parent has an entry called name.
func (r *fcReplay) dirHas(parent uint32, name []byte) (bool, error) {
	f, err := r.dirFile(parent)
	if err != nil {
		return false, err
	}
	_, err = f.lookupName(string(name))
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

func fileTypeOf(mode uint16) (uint8, bool) {
	switch mode & layout.ModeFmt {
	case layout.ModeReg:
		return layout.FtRegFile, true
	case layout.ModeDir:
		return layout.FtDir, true
	case layout.ModeChr:
		return layout.FtChrdev, true
	case layout.ModeBlk:
		return layout.FtBlkdev, true
	case layout.ModeLnk:
		return layout.FtSymlink, true
	case layout.ModeFIFO:
		return layout.FtFifo, true
	case layout.ModeSock:
		return layout.FtSock, true
	}
	return 0, false
}

// insertEntry puts (ino, name) into the first gap of b that fits it.
func (r *fcReplay) insertEntry(b []byte, pblk uint64, dots bool, dir uint32, ino uint32, ft uint8, name []byte) (bool, error) {
	need := layout.DirRecLen(len(name))
	done := false
	err := layout.DirBlock(b, pblk, dir, r.blockHasTail(b), r.v.sb.HasIncompat(layout.IncompatFiletype), dots, func(e layout.DirEntry) error {
		if layout.DirEntryRoom(e) >= need {
			layout.InsertDirEntry(b, e, ino, ft, name)
			done = true
			return errStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return false, err
	}
	return done, nil
}

// dirAdd adds (ino, name) to directory parent: into the first block with
// room (the leaf the name hashes to in an htree directory), else into a
// new block appended to a linear directory, as ext2fs_link and
// ext2fs_expand_dir do.
func (r *fcReplay) dirAdd(parent uint32, name []byte, ino uint32, ft uint8) error {
	f, err := r.dirFile(parent)
	if err != nil {
		return err
	}
	v := r.v
	if v.isDxDir(f.in) {
		var leaf uint64
		found := false
		if err := f.dxLeaf(string(name), func(blk uint64) { leaf, found = blk, true }); err != nil {
			return err
		}
		buf := make([]byte, r.bs)
		if ok, err := f.dirBlock(leaf, buf); err != nil || !ok || !found {
			return &errs.CorruptError{What: "htree leaf", Ino: parent, Off: -1, Msg: fmt.Sprintf("leaf %d not readable", leaf)}
		}
		done, err := r.insertEntry(buf, f.physOf(leaf), leaf == 0, parent, ino, ft, name)
		if err != nil {
			return err
		}
		if !done {
			return fmt.Errorf("ext4io: fast-commit link into full htree leaf %d of directory %d: %w", leaf, parent, ErrUnsupported)
		}
		return r.writeDirBlock(f, leaf, buf)
	}
	done := false
	err = r.dirBlocks(f, func(lblk uint64, b []byte) (bool, error) {
		ok, err := r.insertEntry(b, f.physOf(lblk), lblk == 0, parent, ino, ft, name)
		if err != nil || !ok {
			return false, err
		}
		done = true
		return true, r.writeDirBlock(f, lblk, b)
	})
	if err != nil || done {
		return err
	}
	return r.expandDir(parent, name, ino, ft)
}

// expandDir appends a block holding (ino, name) to linear directory dir.
func (r *fcReplay) expandDir(dir uint32, name []byte, ino uint32, ft uint8) error {
	v := r.v
	in, err := r.readInode(dir)
	if err != nil {
		return err
	}
	if in.Flags&layout.InodeFlagExtents == 0 {
		return fmt.Errorf("ext4io: fast-commit link into full block-mapped directory %d: %w", dir, ErrUnsupported)
	}
	t, err := r.tree(dir, in)
	if err != nil {
		return err
	}
	lblk := (in.Size + uint64(r.bs) - 1) / uint64(r.bs)
	goal := uint64(0)
	if lblk > 0 {
		if e, ok, _, err := t.Lookup(uint32(lblk - 1)); err == nil && ok {
			goal = e.Pblk + uint64(lblk-1-uint64(e.Lblk)) + 1
		}
	}
	if goal == 0 {
		g, _ := v.sb.InodeLocation(dir)
		goal = v.sb.GroupFirstBlock(g)
	}
	pblk, err := r.allocBlock(goal)
	if err != nil {
		return err
	}
	b := make([]byte, r.bs)
	end := r.bs
	if v.csum {
		end -= layout.DirTailLen
	}
	layout.PutDirEntry(b, 0, ino, end, ft, name)
	if v.csum {
		layout.SetDirTail(layout.InodeSeed(v.csumSeed, dir, in.Generation), b)
	}
	if err := r.writeBlock(pblk, b); err != nil {
		return err
	}
	if err := t.Insert(extent.Extent{Lblk: uint32(lblk), Len: 1, Pblk: pblk}); err != nil {
		return err
	}
	in.Block = t.Root()
	in.Size = (lblk + 1) * uint64(r.bs)
	if err := r.recount(dir, in); err != nil {
		return err
	}
	return r.writeInode(dir, in)
}
