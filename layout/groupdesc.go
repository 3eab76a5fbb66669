package layout

import (
	"encoding/binary"

	"github.com/ext4io/ext4io/internal/crc32c"
	"github.com/ext4io/ext4io/internal/errs"
)

// Group descriptor flags (bg_flags). Part of the on-disk format.
const (
	BgInodeUninit = 0x1 // inode table and bitmap not initialised
	BgBlockUninit = 0x2 // block bitmap not initialised
	BgInodeZeroed = 0x4 // inode table zeroed
)

// GroupDesc mirrors struct ext4_group_desc (32 bytes, or s_desc_size with
// 64bit). Split lo/hi fields are joined; the hi halves exist only in the
// 64-byte form. Raw keeps the decoded bytes.
type GroupDesc struct {
	BlockBitmap     uint64 // 0x00 lo, 0x20 hi
	InodeBitmap     uint64 // 0x04 lo, 0x24 hi
	InodeTable      uint64 // 0x08 lo, 0x28 hi
	FreeBlocksCount uint32 // 0x0C lo16, 0x2C hi16
	FreeInodesCount uint32 // 0x0E lo16, 0x2E hi16
	UsedDirsCount   uint32 // 0x10 lo16, 0x30 hi16
	Flags           uint16 // 0x12
	ExcludeBitmap   uint64 // 0x14 lo, 0x34 hi
	BlockBitmapCsum uint32 // 0x18 lo16, 0x38 hi16
	InodeBitmapCsum uint32 // 0x1A lo16, 0x3A hi16
	ItableUnused    uint32 // 0x1C lo16, 0x32 hi16
	Checksum        uint16 // 0x1E

	Raw []byte // the descriptor's bytes (32 or s_desc_size)
}

// Offsets of the checksum fields in the descriptor.
const (
	gdChecksumOff          = 0x1E
	gdBlockBitmapCsumHiEnd = 0x3A // bg_block_bitmap_csum_hi ends here
	gdInodeBitmapCsumHiEnd = 0x3C // bg_inode_bitmap_csum_hi ends here
)

// DecodeGroupDesc decodes one descriptor of size bytes (32 or the 64bit
// s_desc_size). It does not verify the checksum; see VerifyGroupDesc.
func DecodeGroupDesc(b []byte, size int) (*GroupDesc, error) {
	if size != DescSize32 && size < DescSize64 || len(b) < size {
		return nil, errs.Corruptf("group descriptor", 0, -1, "size %d, buffer %d", size, len(b))
	}
	le := binary.LittleEndian
	g := &GroupDesc{Raw: append([]byte(nil), b[:size]...)}
	r := g.Raw
	g.BlockBitmap = uint64(le.Uint32(r[0x00:]))
	g.InodeBitmap = uint64(le.Uint32(r[0x04:]))
	g.InodeTable = uint64(le.Uint32(r[0x08:]))
	g.FreeBlocksCount = uint32(le.Uint16(r[0x0C:]))
	g.FreeInodesCount = uint32(le.Uint16(r[0x0E:]))
	g.UsedDirsCount = uint32(le.Uint16(r[0x10:]))
	g.Flags = le.Uint16(r[0x12:])
	g.ExcludeBitmap = uint64(le.Uint32(r[0x14:]))
	g.BlockBitmapCsum = uint32(le.Uint16(r[0x18:]))
	g.InodeBitmapCsum = uint32(le.Uint16(r[0x1A:]))
	g.ItableUnused = uint32(le.Uint16(r[0x1C:]))
	g.Checksum = le.Uint16(r[0x1E:])
	if size >= DescSize64 {
		g.BlockBitmap |= uint64(le.Uint32(r[0x20:])) << 32
		g.InodeBitmap |= uint64(le.Uint32(r[0x24:])) << 32
		g.InodeTable |= uint64(le.Uint32(r[0x28:])) << 32
		g.FreeBlocksCount |= uint32(le.Uint16(r[0x2C:])) << 16
		g.FreeInodesCount |= uint32(le.Uint16(r[0x2E:])) << 16
		g.UsedDirsCount |= uint32(le.Uint16(r[0x30:])) << 16
		g.ItableUnused |= uint32(le.Uint16(r[0x32:])) << 16
		g.ExcludeBitmap |= uint64(le.Uint32(r[0x34:])) << 32
		g.BlockBitmapCsum |= uint32(le.Uint16(r[0x38:])) << 16
		g.InodeBitmapCsum |= uint32(le.Uint16(r[0x3A:])) << 16
	}
	return g, nil
}

// Encode writes the fields into Raw (allocating size bytes if Raw is empty)
// and returns it. The checksum field is written as it stands; call
// SetGroupDescChecksum first to update it.
func (g *GroupDesc) Encode(size int) []byte {
	if len(g.Raw) != size {
		r := make([]byte, size)
		copy(r, g.Raw)
		g.Raw = r
	}
	le := binary.LittleEndian
	r := g.Raw
	le.PutUint32(r[0x00:], uint32(g.BlockBitmap))
	le.PutUint32(r[0x04:], uint32(g.InodeBitmap))
	le.PutUint32(r[0x08:], uint32(g.InodeTable))
	le.PutUint16(r[0x0C:], uint16(g.FreeBlocksCount))
	le.PutUint16(r[0x0E:], uint16(g.FreeInodesCount))
	le.PutUint16(r[0x10:], uint16(g.UsedDirsCount))
	le.PutUint16(r[0x12:], g.Flags)
	le.PutUint32(r[0x14:], uint32(g.ExcludeBitmap))
	le.PutUint16(r[0x18:], uint16(g.BlockBitmapCsum))
	le.PutUint16(r[0x1A:], uint16(g.InodeBitmapCsum))
	le.PutUint16(r[0x1C:], uint16(g.ItableUnused))
	le.PutUint16(r[0x1E:], g.Checksum)
	if size >= DescSize64 {
		le.PutUint32(r[0x20:], uint32(g.BlockBitmap>>32))
		le.PutUint32(r[0x24:], uint32(g.InodeBitmap>>32))
		le.PutUint32(r[0x28:], uint32(g.InodeTable>>32))
		le.PutUint16(r[0x2C:], uint16(g.FreeBlocksCount>>16))
		le.PutUint16(r[0x2E:], uint16(g.FreeInodesCount>>16))
		le.PutUint16(r[0x30:], uint16(g.UsedDirsCount>>16))
		le.PutUint16(r[0x32:], uint16(g.ItableUnused>>16))
		le.PutUint32(r[0x34:], uint32(g.ExcludeBitmap>>32))
		le.PutUint16(r[0x38:], uint16(g.BlockBitmapCsum>>16))
		le.PutUint16(r[0x3A:], uint16(g.InodeBitmapCsum>>16))
	}
	return r
}

// zeroChecksum16 stands for a 16-bit checksum field in a checksum that
// covers the structure with that field zero; never written.
var zeroChecksum16 = []byte{0, 0}

// GroupDescChecksum computes the checksum of encoded descriptor raw for
// group g, as ext4_group_desc_csum does: crc32c (low 16 bits) with
// metadata_csum, crc16 with uninit_bg (gdt_csum), 0 otherwise.
func GroupDescChecksum(sb *Superblock, g uint32, raw []byte) uint16 {
	switch {
	case sb.MetadataCsum():
		c := crc32c.KernelU32(sb.CsumSeed(), g)
		c = crc32c.Kernel(c, raw[:gdChecksumOff])
		c = crc32c.Kernel(c, zeroChecksum16)
		if len(raw) > gdChecksumOff+2 {
			c = crc32c.Kernel(c, raw[gdChecksumOff+2:])
		}
		return uint16(c)
	case sb.GdtCsum():
		var le [4]byte
		binary.LittleEndian.PutUint32(le[:], g)
		c := crc16(0xFFFF, sb.UUID[:])
		c = crc16(c, le[:])
		c = crc16(c, raw[:gdChecksumOff])
		if sb.Is64Bit() && len(raw) > gdChecksumOff+2 {
			c = crc16(c, raw[gdChecksumOff+2:])
		}
		return c
	}
	return 0
}

// SetChecksum encodes g and stores its checksum for group number gno.
func (g *GroupDesc) SetChecksum(sb *Superblock, gno uint32) {
	size := sb.DescriptorSize()
	g.Checksum = 0
	g.Encode(size)
	g.Checksum = GroupDescChecksum(sb, gno, g.Raw)
	binary.LittleEndian.PutUint16(g.Raw[gdChecksumOff:], g.Checksum)
}

// Verify checks the descriptor checksum of group gno (when the filesystem
// keeps one) and that its metadata lies inside the filesystem (L6).
func (g *GroupDesc) Verify(sb *Superblock, gno uint32, descBlock uint64) error {
	if sb.HasGroupChecksums() {
		if want := GroupDescChecksum(sb, gno, g.Raw); want != g.Checksum {
			return &errs.CorruptError{What: "group descriptor", Block: descBlock, Off: -1,
				Msg: sprintf("group %d: checksum %#x != computed %#x", gno, g.Checksum, want)}
		}
	}
	ipb := uint64(sb.BlockSize() / sb.InodeSizeBytes())
	itBlocks := (uint64(sb.InodesPerGroup) + ipb - 1) / ipb
	for _, f := range []struct {
		name string
		blk  uint64
		n    uint64
	}{{"block bitmap", g.BlockBitmap, 1}, {"inode bitmap", g.InodeBitmap, 1}, {"inode table", g.InodeTable, itBlocks}} {
		if f.blk < uint64(sb.FirstDataBlock) || f.blk >= sb.BlocksCount || sb.BlocksCount-f.blk < f.n {
			return &errs.CorruptError{What: "group descriptor", Block: descBlock, Off: -1,
				Msg: sprintf("group %d: %s at block %d outside filesystem of %d blocks", gno, f.name, f.blk, sb.BlocksCount)}
		}
	}
	return nil
}

// BlockBitmapChecksum returns the crc32c of a group's block bitmap (the
// first clusters_per_group/8 bytes), as stored in bg_block_bitmap_csum.
func BlockBitmapChecksum(sb *Superblock, bitmap []byte) uint32 {
	n := int(sb.ClustersPerGroup / 8)
	return crc32c.Kernel(sb.CsumSeed(), bitmap[:n])
}

// InodeBitmapChecksum returns the crc32c of a group's inode bitmap.
func InodeBitmapChecksum(sb *Superblock, bitmap []byte) uint32 {
	n := int(sb.InodesPerGroup / 8)
	return crc32c.Kernel(sb.CsumSeed(), bitmap[:n])
}

// BitmapCsumMatches compares a stored bitmap checksum with a computed one,
// looking only at the bits the descriptor stores (16 with 32-byte
// descriptors, 32 otherwise).
func BitmapCsumMatches(sb *Superblock, stored, computed uint32, inode bool) bool {
	end := gdBlockBitmapCsumHiEnd
	if inode {
		end = gdInodeBitmapCsumHiEnd
	}
	if sb.DescriptorSize() >= end {
		return stored == computed
	}
	return uint16(stored) == uint16(computed)
}

// crc16 is the kernel's lib/crc16 (polynomial 0x8005, bit-reflected), used
// by uninit_bg group descriptor checksums.
func crc16(crc uint16, p []byte) uint16 {
	for _, b := range p {
		crc = (crc >> 8) ^ crc16Table[byte(crc)^b]
	}
	return crc
}

var crc16Table = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i)
		for range 8 {
			if c&1 != 0 {
				c = c>>1 ^ 0xA001
			} else {
				c >>= 1
			}
		}
		t[i] = c
	}
	return t
}()
