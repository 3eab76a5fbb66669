package mkfs

import (
	"encoding/binary"
	"fmt"

	"github.com/ext4io/ext4io/internal/crc32c"
	"github.com/ext4io/ext4io/layout"
)

// block is a block of file content or metadata waiting to be written.
type block struct {
	blk  uint64
	data []byte
}

// makeFiles allocates and builds the root directory, lost+found, the
// journal and the orphan file, and the reserved inodes.
func (f *formatter) makeFiles() error {
	p, sb := f.p, f.sb
	bs := int(p.bs)
	var out []block
	first := uint64(sb.FirstDataBlock)
	csum := sb.MetadataCsum()
	ft := func(t uint8) uint8 {
		if sb.HasIncompat(layout.IncompatFiletype) {
			return t
		}
		return 0
	}
	tail := 0
	if csum {
		tail = layout.DirTailLen
	}

	// Root directory: ".", "..", "lost+found".
	rootRuns, err := p.allocRuns(first, 1, 32768)
	if err != nil {
		return err
	}
	rb := make([]byte, bs)
	layout.PutDirEntry(rb, 0, layout.RootIno, 12, ft(layout.FtDir), []byte("."))
	layout.PutDirEntry(rb, 12, layout.RootIno, 12, ft(layout.FtDir), []byte(".."))
	layout.PutDirEntry(rb, 24, lostFoundIno, bs-24-tail, ft(layout.FtDir), []byte("lost+found"))
	if csum {
		layout.SetDirTail(layout.InodeSeed(f.seed, layout.RootIno, 0), rb)
	}
	out = append(out, block{rootRuns[0].start, rb})
	if err := f.fileInode(layout.RootIno, layout.ModeDir|0o755, 3, p.bs, rootRuns, &out); err != nil {
		return err
	}

	// lost+found: mke2fs grows it to 16 KiB, at least 2 and at most 12 blocks.
	nlpf := uint64(max(2, min(12, 16384/bs)))
	lpfRuns, err := p.allocRuns(rootRuns[0].end(), nlpf, 32768)
	if err != nil {
		return err
	}
	lseed := layout.InodeSeed(f.seed, lostFoundIno, 0)
	lb := 0
	for _, r := range lpfRuns {
		for k := uint64(0); k < r.n; k++ {
			b := make([]byte, bs)
			if lb == 0 {
				layout.PutDirEntry(b, 0, lostFoundIno, 12, ft(layout.FtDir), []byte("."))
				layout.PutDirEntry(b, 12, layout.RootIno, bs-12-tail, ft(layout.FtDir), []byte(".."))
			} else {
				layout.PutDirEntry(b, 0, 0, bs-tail, 0, nil)
			}
			if csum {
				layout.SetDirTail(lseed, b)
			}
			out = append(out, block{r.start + k, b})
			lb++
		}
	}
	if err := f.fileInode(lostFoundIno, layout.ModeDir|0o700, 2, nlpf*p.bs, lpfRuns, &out); err != nil {
		return err
	}

	// Journal, in the middle of the filesystem as mke2fs places it.
	if sb.HasCompat(layout.CompatHasJournal) {
		nj := uint64(f.o.JournalBlocks)
		if nj == 0 {
			nj = JournalSize(sb.BlocksCount)
		}
		var nfc uint64
		if sb.HasCompat(layout.CompatFastCommit) {
			// mke2fs: the fast-commit area, 1/64 of the log, follows it
			// (s_maxlen covers both, s_num_fc_blks the area).
			nfc = nj / fcBlocksRatio
			nj += nfc
		}
		if nj < 1024 || nj > sb.BlocksCount/2 {
			return fmt.Errorf("mkfs: journal of %d blocks on %d: %w", nj, sb.BlocksCount, ErrInvalid)
		}
		g := p.groupOf((sb.BlocksCount - first) / 2)
		if flex := uint64(1) << sb.LogGroupsPerFlex; sb.HasIncompat(layout.IncompatFlexBG) && g > flex {
			g &^= flex - 1
		}
		jr, err := p.allocRuns(sb.GroupFirstBlock(g), nj, 32768)
		if err != nil {
			return fmt.Errorf("mkfs: journal: %w", err)
		}
		for _, r := range jr {
			if err := f.dev.ZeroOut(int64(r.start*p.bs), int64(r.n*p.bs)); err != nil {
				return fmt.Errorf("mkfs: zeroing journal: %w", err)
			}
		}
		out = append(out, block{jr[0].start, f.journalSuper(nj, nfc)})
		if err := f.fileInode(layout.JournalIno, layout.ModeReg|0o600, 1, nj*p.bs, jr, &out); err != nil {
			return err
		}
		in := f.inodes[layout.JournalIno]
		for k := 0; k < 15; k++ {
			sb.JnlBlocks[k] = binary.LittleEndian.Uint32(in.Block[4*k:])
		}
		sb.JnlBlocks[15] = uint32(in.Size >> 32)
		sb.JnlBlocks[16] = uint32(in.Size)
		sb.JnlBackupType = jnlBackupBlocks
		sb.JournalInum = layout.JournalIno
	}

	// Orphan file.
	if sb.HasCompat(layout.CompatOrphanFile) {
		no := OrphanFileBlocks(sb.BlocksCount, bs)
		or, err := p.allocRuns(lpfRuns[len(lpfRuns)-1].end(), no, 32768)
		if err != nil {
			return fmt.Errorf("mkfs: orphan file: %w", err)
		}
		oseed := layout.InodeSeed(f.seed, orphanIno, 0)
		for _, r := range or {
			for k := uint64(0); k < r.n; k++ {
				b := make([]byte, bs)
				layout.InitOrphanBlock(b, oseed, r.start+k, csum)
				out = append(out, block{r.start + k, b})
			}
		}
		if err := f.fileInode(orphanIno, layout.ModeReg|0o600, 1, no*p.bs, or, &out); err != nil {
			return err
		}
		sb.OrphanFileInum = orphanIno
	}

	// Reserved inodes: zero, inode 1 with its times, as mke2fs leaves them.
	for ino := uint32(1); ino < sb.FirstInode(); ino++ {
		if f.inodes[ino] != nil {
			continue
		}
		in := &layout.Inode{Raw: make([]byte, sb.InodeSizeBytes())}
		if ino == 1 {
			t := layout.Timestamp{Sec: int64(f.now)}
			in.Atime, in.Ctime, in.Mtime = t, t, t
		}
		f.setInode(ino, in)
	}
	for _, b := range out {
		if err := f.write(b.data, b.blk, 0); err != nil {
			return err
		}
	}
	return nil
}

// setInode encodes in, checksums it and records it for writing.
func (f *formatter) setInode(ino uint32, in *layout.Inode) {
	in.Encode(f.sb.InodeSizeBytes())
	if f.sb.MetadataCsum() {
		in.SetChecksum(f.seed, ino)
	}
	f.inodes[ino] = in
}

// fileInode builds an extent-mapped inode over runs (logically contiguous
// from block 0), adding a leaf block to out when more than four extents
// are needed.
func (f *formatter) fileInode(ino uint32, mode, links uint16, size uint64, runs []run, out *[]block) error {
	sb, p := f.sb, f.p
	in := &layout.Inode{Mode: mode, LinksCount: links, Size: size, Flags: layout.InodeFlagExtents,
		Raw: make([]byte, sb.InodeSizeBytes())}
	t := layout.Timestamp{Sec: int64(f.now)}
	in.Atime, in.Ctime, in.Mtime, in.Crtime = t, t, t, t
	if sb.InodeSizeBytes() > layout.GoodOldInodeSize {
		in.ExtraIsize = 32
	}
	total := uint64(0)
	for _, r := range runs {
		total += r.n
	}
	le := binary.LittleEndian
	putExtent := func(b []byte, lblk uint64, r run) {
		le.PutUint32(b[0:], uint32(lblk))
		le.PutUint16(b[4:], uint16(r.n))
		le.PutUint16(b[6:], uint16(r.start>>32))
		le.PutUint32(b[8:], uint32(r.start))
	}
	putHeader := func(b []byte, entries, max, depth int) {
		le.PutUint16(b[0:], extentMagic)
		le.PutUint16(b[2:], uint16(entries))
		le.PutUint16(b[4:], uint16(max))
		le.PutUint16(b[6:], uint16(depth))
		le.PutUint32(b[8:], 0)
	}
	if len(runs) <= 4 {
		putHeader(in.Block[:], len(runs), 4, 0)
		lblk := uint64(0)
		for k, r := range runs {
			putExtent(in.Block[12+12*k:], lblk, r)
			lblk += r.n
		}
	} else {
		maxLeaf := (int(p.bs) - 12) / 12
		if len(runs) > maxLeaf {
			return fmt.Errorf("mkfs: inode %d needs %d extents, more than one leaf holds: %w", ino, len(runs), ErrNoSpace)
		}
		leafBlk, err := p.allocContig(runs[0].start, 1, ^uint64(0))
		if err != nil {
			return fmt.Errorf("mkfs: extent leaf of inode %d: %w", ino, err)
		}
		total++
		leaf := make([]byte, p.bs)
		putHeader(leaf, len(runs), maxLeaf, 0)
		lblk := uint64(0)
		for k, r := range runs {
			putExtent(leaf[12+12*k:], lblk, r)
			lblk += r.n
		}
		if sb.MetadataCsum() {
			end := 12 + 12*maxLeaf
			le.PutUint32(leaf[end:], crc32c.Kernel(layout.InodeSeed(f.seed, ino, 0), leaf[:end]))
		}
		*out = append(*out, block{leafBlk, leaf})
		putHeader(in.Block[:], 1, 4, 1)
		le.PutUint32(in.Block[12:], 0)
		le.PutUint32(in.Block[16:], uint32(leafBlk))
		le.PutUint16(in.Block[20:], uint16(leafBlk>>32))
	}
	if !in.SetBlocks(sb, total*p.bs/512) {
		return fmt.Errorf("mkfs: inode %d: %d blocks do not fit i_blocks: %w", ino, total, ErrInvalid)
	}
	f.setInode(ino, in)
	return nil
}

// fcBlocksRatio is mke2fs's EXT2_JOURNAL_TO_FC_BLKS_RATIO: log blocks per
// fast-commit block.
const fcBlocksRatio = 64

// journalSuper returns an empty jbd2 v2 journal superblock (struct
// journal_superblock_s, big-endian) in a full block, with nfc of its n
// blocks the fast-commit area (s_num_fc_blks; the jbd2 feature is left to
// the first writer, as mke2fs leaves it to the kernel).
func (f *formatter) journalSuper(n, nfc uint64) []byte {
	b := make([]byte, f.p.bs)
	be := binary.BigEndian
	be.PutUint32(b[0x0:], jbd2Magic)
	be.PutUint32(b[0x4:], jbd2SuperblockV2)
	be.PutUint32(b[0xC:], uint32(f.p.bs))
	be.PutUint32(b[0x10:], uint32(n))
	be.PutUint32(b[0x14:], 1) // s_first
	be.PutUint32(b[0x18:], 1) // s_sequence
	var inc uint32
	if f.sb.Is64Bit() {
		inc |= jbd2Incompat64Bit
	}
	if f.sb.MetadataCsum() {
		inc |= jbd2IncompatCsumV3
		b[0x50] = jbd2CsumCrc32c
	}
	be.PutUint32(b[0x28:], inc)
	copy(b[0x30:0x40], f.sb.UUID[:])
	be.PutUint32(b[0x40:], 1)           // s_nr_users
	be.PutUint32(b[0x54:], uint32(nfc)) // s_num_fc_blks
	if f.sb.MetadataCsum() {
		be.PutUint32(b[0xFC:], crc32c.Kernel(^uint32(0), b[:1024]))
	}
	return b
}

// writeMetadata writes inode tables, bitmaps, descriptors and superblocks.
func (f *formatter) writeMetadata() error {
	p, sb := f.p, f.sb
	ipg := uint64(sb.InodesPerGroup)
	isz := uint64(sb.InodeSizeBytes())
	zeroed := f.o.ZeroInodeTables || !p.csum
	if zeroed {
		for g := uint64(0); g < p.groups; g++ {
			if err := f.cancelled(); err != nil {
				return err
			}
			if err := f.dev.ZeroOut(int64(p.descs[g].InodeTable*p.bs), int64(p.itb*p.bs)); err != nil {
				return fmt.Errorf("mkfs: zeroing inode table of group %d: %w", g, err)
			}
		}
	}
	// Group 0's inode table, up to the last inode used.
	usedIno := uint32(0)
	for ino := range f.inodes {
		usedIno = max(usedIno, ino)
	}
	tab := make([]byte, (uint64(usedIno)*isz+p.bs-1)/p.bs*p.bs)
	for ino, in := range f.inodes {
		copy(tab[uint64(ino-1)*isz:], in.Raw)
	}
	if err := f.write(tab, p.descs[0].InodeTable, 0); err != nil {
		return err
	}

	var freeBlocks, freeInodes uint64
	for g := uint64(0); g < p.groups; g++ {
		if g%64 == 0 {
			if err := f.cancelled(); err != nil {
				return err
			}
		}
		d := p.descs[g]
		d.FreeBlocksCount = uint32(p.freeBlocks(g))
		used := uint32(0)
		if g == 0 {
			used = usedIno
			d.UsedDirsCount = 2
		}
		d.FreeInodesCount = uint32(ipg) - used
		if p.csum {
			if used == 0 {
				d.Flags |= layout.BgInodeUninit
			}
			d.ItableUnused = uint32(ipg) - used
			if !p.foreign[g] && g != p.groups-1 {
				d.Flags |= layout.BgBlockUninit
			}
			if zeroed {
				d.Flags |= layout.BgInodeZeroed
			}
		}
		if d.Flags&layout.BgBlockUninit == 0 {
			bm := p.blockBitmap(g)
			if sb.MetadataCsum() {
				d.BlockBitmapCsum = layout.BlockBitmapChecksum(sb, bm)
			}
			if err := f.write(bm, d.BlockBitmap, 0); err != nil {
				return err
			}
		}
		if d.Flags&layout.BgInodeUninit == 0 {
			bm := make([]byte, p.bs)
			setBits(bm, 0, uint64(used))
			setBits(bm, ipg, p.bs*8-ipg)
			if sb.MetadataCsum() {
				d.InodeBitmapCsum = layout.InodeBitmapChecksum(sb, bm)
			}
			if err := f.write(bm, d.InodeBitmap, 0); err != nil {
				return err
			}
		}
		d.SetChecksum(sb, uint32(g))
		freeBlocks += uint64(d.FreeBlocksCount)
		freeInodes += uint64(d.FreeInodesCount)
	}
	sb.FreeBlocksCount = freeBlocks
	sb.FreeInodesCount = uint32(freeInodes)

	// Descriptor table, primary and backups.
	ds := uint64(sb.DescriptorSize())
	gdt := make([]byte, sb.DescBlocks()*p.bs)
	for g, d := range p.descs {
		copy(gdt[uint64(g)*ds:], d.Raw)
	}
	var backups []uint64
	for g := uint64(0); g < p.groups; g++ {
		if sb.GroupHasSuper(g) {
			backups = append(backups, g)
			if err := f.write(gdt, sb.GroupFirstBlock(g)+1, 0); err != nil {
				return err
			}
		}
	}
	if err := f.cancelled(); err != nil {
		return err
	}
	// The backups, a flush, and the primary last: until it is on the
	// device, the device holds no filesystem (invalidateSuper).
	sb.KbytesWritten = (f.written + uint64(len(backups))*layout.SuperblockSize) / 1024
	for i := len(backups) - 1; i >= 0; i-- {
		g := backups[i]
		c := *sb
		c.BlockGroupNr = uint16(g)
		blk, off := sb.GroupFirstBlock(g), 0
		if g == 0 {
			blk, off = 0, layout.SuperblockOffset
			if err := f.dev.Flush(); err != nil {
				return fmt.Errorf("mkfs: flush: %w", err)
			}
		}
		if err := f.write(c.Encode(), blk, off); err != nil {
			return err
		}
	}
	if err := f.dev.Flush(); err != nil {
		return fmt.Errorf("mkfs: flush: %w", err)
	}
	return nil
}
