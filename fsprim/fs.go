package fsprim

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/ext4io/ext4io/alloc"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/extent"
	"github.com/ext4io/ext4io/journal"
	"github.com/ext4io/ext4io/layout"
)

// MetaIO is what FS reads and changes metadata through: an alloc.MetaIO
// that is an extent.BlockIO too (DirectIO, JournalIO).
type MetaIO interface {
	alloc.MetaIO
	extent.BlockIO
}

// FS is an ext4 file system as an engine sees it: its superblock, the
// inode table of each group, an allocator, and the metadata I/O they
// share. It is thread-compatible.
type FS struct {
	Dev    blockdev.Device
	SB     *layout.Superblock
	Meta   MetaIO
	Alloc  *alloc.Allocator
	BS     int
	tables []uint64 // inode table block of each group
}

// ReadSuperblock reads and validates the primary superblock of dev.
func ReadSuperblock(dev blockdev.Device) (*layout.Superblock, error) {
	b := make([]byte, layout.SuperblockSize)
	if _, err := dev.ReadAt(b, layout.SuperblockOffset); err != nil {
		return nil, fmt.Errorf("fsprim: reading the superblock: %w", err)
	}
	return layout.DecodeSuperblock(b)
}

// Open returns the FS of dev with superblock sb, reading and changing
// metadata through meta, with an allocator over it.
func Open(dev blockdev.Device, sb *layout.Superblock, meta MetaIO) (*FS, error) {
	fs := &FS{Dev: dev, SB: sb, Meta: meta, BS: sb.BlockSize()}
	for g := range sb.GroupCount() {
		blk, off := sb.DescriptorLocation(g)
		b := make([]byte, fs.BS)
		if err := meta.ReadBlock(blk, b); err != nil {
			return nil, err
		}
		gd, err := layout.DecodeGroupDesc(b[off:off+sb.DescriptorSize()], sb.DescriptorSize())
		if err != nil {
			return nil, fmt.Errorf("fsprim: group %d descriptor: %w", g, err)
		}
		fs.tables = append(fs.tables, gd.InodeTable)
	}
	a, err := alloc.New(sb, meta, alloc.Options{})
	if err != nil {
		return nil, err
	}
	fs.Alloc = a
	return fs, nil
}

// inodeAt returns the block and byte offset of inode ino in its table.
func (fs *FS) inodeAt(ino uint32) (blk uint64, off int, err error) {
	if ino == 0 || ino > fs.SB.InodesCount {
		return 0, 0, fmt.Errorf("fsprim: inode %d of %d: %w", ino, fs.SB.InodesCount, ErrInvalid)
	}
	g, idx := fs.SB.InodeLocation(ino)
	byteOff := uint64(idx) * uint64(fs.SB.InodeSizeBytes())
	return fs.tables[g] + byteOff/uint64(fs.BS), int(byteOff % uint64(fs.BS)), nil
}

// ReadInode reads inode ino (its newest copy) and verifies its checksum.
func (fs *FS) ReadInode(ino uint32) (*layout.Inode, error) {
	blk, off, err := fs.inodeAt(ino)
	if err != nil {
		return nil, err
	}
	b := make([]byte, fs.BS)
	if err := fs.Meta.ReadBlock(blk, b); err != nil {
		return nil, err
	}
	isz := fs.SB.InodeSizeBytes()
	in, err := layout.DecodeInode(b[off:off+isz], isz)
	if err != nil {
		return nil, err
	}
	if fs.SB.MetadataCsum() {
		if err := in.VerifyChecksum(fs.SB.CsumSeed(), ino, blk, off); err != nil {
			return nil, err
		}
	}
	return in, nil
}

// WriteInode encodes in (with its checksum) into ino's slot of the inode
// table, through Meta.
func (fs *FS) WriteInode(ino uint32, in *layout.Inode) error {
	blk, off, err := fs.inodeAt(ino)
	if err != nil {
		return err
	}
	isz := fs.SB.InodeSizeBytes()
	in.Encode(isz)
	if fs.SB.MetadataCsum() {
		in.SetChecksum(fs.SB.CsumSeed(), ino)
	}
	b, err := fs.Meta.GetWrite(blk)
	if err != nil {
		return err
	}
	copy(b[off:off+isz], in.Raw)
	return fs.Meta.Dirty(blk, b)
}

// NewInode allocates an inode for a regular file in directory parent and
// returns it with a fresh extent-mapped body (mode ModeReg|perm, one
// link, the times now, an empty extent root), not yet written: the
// caller writes it (WriteInode) before linking it (Link).
func (fs *FS) NewInode(parent uint32, perm uint16) (uint32, *layout.Inode, error) {
	ino, err := fs.Alloc.AllocInode(parent, false)
	if err != nil {
		return 0, nil, err
	}
	now := layout.TimestampOf(time.Now())
	var gen [4]byte
	rand.Read(gen[:])
	in := &layout.Inode{
		Mode: layout.ModeReg | perm&0o7777, LinksCount: 1, Flags: layout.InodeFlagExtents,
		Atime: now, Ctime: now, Mtime: now, Crtime: now,
		Generation: binary.LittleEndian.Uint32(gen[:]),
		Block:      extent.EmptyRoot(),
	}
	if isz := fs.SB.InodeSizeBytes(); isz > layout.GoodOldInodeSize {
		in.ExtraIsize = 32
		if want := int(fs.SB.WantExtraIsize); want >= 32 && layout.GoodOldInodeSize+want <= isz {
			in.ExtraIsize = uint16(want)
		}
	}
	in.Encode(fs.SB.InodeSizeBytes())
	return ino, in, nil
}

// TreeConfig returns the extent.Config of inode ino (body in): Meta for
// I/O and, when ta is not nil, ta for allocation.
func (fs *FS) TreeConfig(ino uint32, in *layout.Inode, ta *TreeAlloc) extent.Config {
	cfg := extent.Config{
		BlockSize: fs.BS, Ino: ino, Csum: fs.SB.MetadataCsum(),
		Seed:           layout.InodeSeed(fs.SB.CsumSeed(), ino, in.Generation),
		FirstDataBlock: uint64(fs.SB.FirstDataBlock), BlocksCount: fs.SB.BlocksCount,
		IO: fs.Meta,
	}
	if ta != nil {
		cfg.Alloc = ta
		g, _ := fs.SB.InodeLocation(ino)
		cfg.Goal = fs.SB.GroupFirstBlock(g)
	}
	return cfg
}

// Link adds name -> ino (file type ft, layout.FtRegFile for a file) to
// directory dir, in the first block with room, and writes the directory's
// times. Only linear directories whose blocks have room are handled:
// hash-indexed ones fail with ErrUnsupported, full ones with ErrNoSpace.
// A name already present fails with ErrExist.
func (fs *FS) Link(dir uint32, name string, ino uint32, ft uint8) error {
	if len(name) == 0 || len(name) > layout.MaxNameLen || layout.CheckDirName([]byte(name), false, 2) != "" {
		return fmt.Errorf("fsprim: link name %q: %w", name, ErrInvalid)
	}
	din, err := fs.ReadInode(dir)
	if err != nil {
		return err
	}
	if !din.IsDir() || din.Flags&layout.InodeFlagExtents == 0 {
		return fmt.Errorf("fsprim: inode %d is not an extent-mapped directory: %w", dir, ErrUnsupported)
	}
	if din.Flags&layout.InodeFlagIndex != 0 {
		return fmt.Errorf("fsprim: directory %d is hash-indexed: %w", dir, ErrUnsupported)
	}
	root := din.Block
	tr, err := extent.Open(&root, fs.TreeConfig(dir, din, nil))
	if err != nil {
		return err
	}
	if !fs.SB.HasIncompat(layout.IncompatFiletype) {
		ft = 0
	}
	csum := fs.SB.MetadataCsum()
	need := layout.DirRecLen(len(name))
	b := make([]byte, fs.BS)
	for lblk := uint64(0); lblk < din.Size/uint64(fs.BS); lblk++ {
		e, found, _, err := tr.Lookup(uint32(lblk))
		if err != nil {
			return err
		}
		if !found || e.Unwritten {
			continue
		}
		pblk := e.Pblk + (lblk - uint64(e.Lblk))
		if err := fs.Meta.ReadBlock(pblk, b); err != nil {
			return err
		}
		hasTail := csum && layout.HasDirTail(b)
		slot, slotLen, used, dup := -1, 0, 0, false
		err = layout.DirBlock(b, pblk, dir, hasTail, ft != 0, lblk == 0, func(d layout.DirEntry) error {
			u := 0
			if d.Inode != 0 {
				u = layout.DirRecLen(int(d.NameLen))
				dup = dup || string(d.Name) == name
			}
			if d.RecLen-u >= need && slot < 0 {
				slot, slotLen, used = d.Off, d.RecLen, u
			}
			return nil
		})
		if err != nil {
			return err
		}
		if dup {
			return fmt.Errorf("fsprim: %q in directory %d: %w", name, dir, ErrExist)
		}
		if slot < 0 {
			continue
		}
		w, err := fs.Meta.GetWrite(pblk)
		if err != nil {
			return err
		}
		if used > 0 { // shrink the live entry, ours goes in its slack
			binary.LittleEndian.PutUint16(w[slot+4:], layout.EncodeRecLen(used, fs.BS))
			layout.PutDirEntry(w, slot+used, ino, slotLen-used, ft, []byte(name))
		} else {
			layout.PutDirEntry(w, slot, ino, slotLen, ft, []byte(name))
		}
		if hasTail {
			layout.SetDirTail(layout.InodeSeed(fs.SB.CsumSeed(), dir, din.Generation), w)
		}
		if err := fs.Meta.Dirty(pblk, w); err != nil {
			return err
		}
		now := layout.TimestampOf(time.Now())
		din.Mtime, din.Ctime = now, now
		return fs.WriteInode(dir, din)
	}
	return fmt.Errorf("fsprim: directory %d has no room for %q (growing it is not implemented): %w", dir, name, ErrNoSpace)
}

// WriteSuperblock writes the primary superblock straight to the device
// with the allocator's free counts; call it after the journal is closed
// (checkpointed), when no transaction holds the superblock's block.
func (fs *FS) WriteSuperblock() error {
	fs.Alloc.FillSuperblock(fs.SB)
	if _, err := fs.Dev.WriteAt(fs.SB.Encode(), layout.SuperblockOffset); err != nil {
		return fmt.Errorf("fsprim: writing the superblock: %w", err)
	}
	return fs.Dev.Flush()
}

// OpenJournal opens the internal journal of the file system on dev
// (inode sb.JournalInum, mapped by its extent tree) and replays it if it
// needs recovery. The caller sets layout.IncompatRecover in the
// superblock while the journal may hold transactions, and clears it
// after journal.Journal.Close.
func OpenJournal(dev blockdev.Device, sb *layout.Superblock) (*journal.Journal, error) {
	if sb.JournalInum == 0 || sb.JournalDev != 0 {
		return nil, fmt.Errorf("fsprim: no internal journal: %w", ErrUnsupported)
	}
	raw := NewDirectIO(dev, sb.BlockSize())
	fs := &FS{Dev: dev, SB: sb, Meta: raw, BS: sb.BlockSize()}
	for g := range sb.GroupCount() {
		blk, off := sb.DescriptorLocation(g)
		b := make([]byte, fs.BS)
		if err := raw.ReadBlock(blk, b); err != nil {
			return nil, err
		}
		gd, err := layout.DecodeGroupDesc(b[off:off+sb.DescriptorSize()], sb.DescriptorSize())
		if err != nil {
			return nil, err
		}
		fs.tables = append(fs.tables, gd.InodeTable)
	}
	in, err := fs.ReadInode(sb.JournalInum)
	if err != nil {
		return nil, fmt.Errorf("fsprim: journal inode: %w", err)
	}
	root := in.Block
	tr, err := extent.Open(&root, fs.TreeConfig(sb.JournalInum, in, nil))
	if err != nil {
		return nil, fmt.Errorf("fsprim: journal inode: %w", err)
	}
	j, err := journal.Open(journal.Config{
		Dev: dev, BlockSize: fs.BS, Blocks: uint32(in.Size / uint64(fs.BS)), CommitInterval: -1,
		Map: func(jblk uint32) (uint64, error) {
			e, found, _, err := tr.Lookup(jblk)
			if err != nil {
				return 0, err
			}
			if !found || e.Unwritten {
				return 0, fmt.Errorf("fsprim: journal block %d not mapped: %w", jblk, ErrCorrupt)
			}
			return e.Pblk + uint64(jblk-e.Lblk), nil
		},
	})
	if err != nil {
		return nil, err
	}
	if j.NeedsRecovery() {
		if _, err := j.Recover(); err != nil {
			return nil, err
		}
	}
	return j, nil
}
