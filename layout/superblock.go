package layout

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/ext4io/ext4io/internal/crc32c"
	"github.com/ext4io/ext4io/internal/errs"
)

// On-disk constants. Part of the on-disk format; must not change.
const (
	SuperblockOffset = 1024   // byte offset of the primary superblock
	SuperblockSize   = 1024   // bytes
	SuperMagic       = 0xEF53 // s_magic

	StateValid  = 0x1 // s_state: cleanly unmounted
	StateErrors = 0x2 // s_state: errors detected
	StateOrphan = 0x4 // s_state: orphans being recovered

	FlagsSignedHash   = 0x1 // s_flags: directory hashes use signed chars
	FlagsUnsignedHash = 0x2 // s_flags: directory hashes use unsigned chars

	ChecksumTypeCrc32c = 1 // s_checksum_type

	RootIno          = 2  // root directory inode
	ResizeIno        = 7  // reserved GDT blocks inode
	JournalIno       = 8  // default journal inode
	GoodOldFirstIno  = 11 // first non-reserved inode of revision 0
	GoodOldInodeSize = 128

	MinBlockLogSize = 10
	MaxBlockLogSize = 16

	DescSize32 = 32 // group descriptor size without the 64bit feature
	DescSize64 = 64 // minimum s_desc_size with the 64bit feature
)

// Superblock mirrors struct ext4_super_block. Split lo/hi fields are joined.
// Fields not modelled here are kept in Raw and written back unchanged.
//
// A Superblock is a plain value; it is not safe for concurrent mutation.
type Superblock struct {
	InodesCount       uint32     // 0x00
	BlocksCount       uint64     // 0x04 lo, 0x150 hi
	RBlocksCount      uint64     // 0x08 lo, 0x154 hi
	FreeBlocksCount   uint64     // 0x0C lo, 0x158 hi
	FreeInodesCount   uint32     // 0x10
	FirstDataBlock    uint32     // 0x14
	LogBlockSize      uint32     // 0x18: block size = 1024 << LogBlockSize
	LogClusterSize    uint32     // 0x1C
	BlocksPerGroup    uint32     // 0x20
	ClustersPerGroup  uint32     // 0x24
	InodesPerGroup    uint32     // 0x28
	Mtime             int64      // 0x2C lo, 0x275 hi
	Wtime             int64      // 0x30 lo, 0x274 hi
	MntCount          uint16     // 0x34
	MaxMntCount       int16      // 0x36
	Magic             uint16     // 0x38
	State             uint16     // 0x3A
	Errors            uint16     // 0x3C
	MinorRevLevel     uint16     // 0x3E
	Lastcheck         int64      // 0x40 lo, 0x277 hi
	Checkinterval     uint32     // 0x44
	CreatorOS         uint32     // 0x48
	RevLevel          uint32     // 0x4C
	DefResuid         uint16     // 0x50
	DefResgid         uint16     // 0x52
	FirstIno          uint32     // 0x54
	InodeSize         uint16     // 0x58
	BlockGroupNr      uint16     // 0x5A
	FeatureCompat     uint32     // 0x5C
	FeatureIncompat   uint32     // 0x60
	FeatureRoCompat   uint32     // 0x64
	UUID              [16]byte   // 0x68
	VolumeName        [16]byte   // 0x78
	LastMounted       [64]byte   // 0x88
	ReservedGdtBlocks uint16     // 0xCE
	JournalUUID       [16]byte   // 0xD0
	JournalInum       uint32     // 0xE0
	JournalDev        uint32     // 0xE4
	LastOrphan        uint32     // 0xE8
	HashSeed          [4]uint32  // 0xEC
	DefHashVersion    uint8      // 0xFC
	JnlBackupType     uint8      // 0xFD
	DescSize          uint16     // 0xFE
	DefaultMountOpts  uint32     // 0x100
	FirstMetaBg       uint32     // 0x104
	MkfsTime          int64      // 0x108 lo, 0x276 hi
	JnlBlocks         [17]uint32 // 0x10C: copy of the journal inode's i_block and size
	MinExtraIsize     uint16     // 0x15C
	WantExtraIsize    uint16     // 0x15E
	Flags             uint32     // 0x160
	RaidStride        uint16     // 0x164
	MmpInterval       uint16     // 0x166
	MmpBlock          uint64     // 0x168
	RaidStripeWidth   uint32     // 0x170
	LogGroupsPerFlex  uint8      // 0x174
	ChecksumType      uint8      // 0x175
	KbytesWritten     uint64     // 0x178
	UsrQuotaInum      uint32     // 0x240
	GrpQuotaInum      uint32     // 0x244
	OverheadClusters  uint32     // 0x248
	BackupBgs         [2]uint32  // 0x24C
	LpfIno            uint32     // 0x268
	PrjQuotaInum      uint32     // 0x26C
	ChecksumSeed      uint32     // 0x270
	OrphanFileInum    uint32     // 0x280
	Checksum          uint32     // 0x3FC

	// Raw holds the bytes the superblock was decoded from (or zeroes for a
	// new one). Encode starts from it, so unmodelled fields survive.
	Raw [SuperblockSize]byte
}

// DecodeSuperblock decodes and validates a superblock (invariants L1-L5).
// Checksums are verified when metadata_csum is set.
func DecodeSuperblock(b []byte) (*Superblock, error) {
	if len(b) < SuperblockSize {
		return nil, errs.Corruptf("superblock", 0, -1, "short buffer: %d bytes", len(b))
	}
	s := &Superblock{}
	copy(s.Raw[:], b[:SuperblockSize])
	le := binary.LittleEndian
	r := s.Raw[:]
	s.InodesCount = le.Uint32(r[0x00:])
	s.BlocksCount = uint64(le.Uint32(r[0x04:]))
	s.RBlocksCount = uint64(le.Uint32(r[0x08:]))
	s.FreeBlocksCount = uint64(le.Uint32(r[0x0C:]))
	s.FreeInodesCount = le.Uint32(r[0x10:])
	s.FirstDataBlock = le.Uint32(r[0x14:])
	s.LogBlockSize = le.Uint32(r[0x18:])
	s.LogClusterSize = le.Uint32(r[0x1C:])
	s.BlocksPerGroup = le.Uint32(r[0x20:])
	s.ClustersPerGroup = le.Uint32(r[0x24:])
	s.InodesPerGroup = le.Uint32(r[0x28:])
	s.Mtime = joinTime(le.Uint32(r[0x2C:]), r[0x275])
	s.Wtime = joinTime(le.Uint32(r[0x30:]), r[0x274])
	s.MntCount = le.Uint16(r[0x34:])
	s.MaxMntCount = int16(le.Uint16(r[0x36:]))
	s.Magic = le.Uint16(r[0x38:])
	s.State = le.Uint16(r[0x3A:])
	s.Errors = le.Uint16(r[0x3C:])
	s.MinorRevLevel = le.Uint16(r[0x3E:])
	s.Lastcheck = joinTime(le.Uint32(r[0x40:]), r[0x277])
	s.Checkinterval = le.Uint32(r[0x44:])
	s.CreatorOS = le.Uint32(r[0x48:])
	s.RevLevel = le.Uint32(r[0x4C:])
	s.DefResuid = le.Uint16(r[0x50:])
	s.DefResgid = le.Uint16(r[0x52:])
	s.FirstIno = le.Uint32(r[0x54:])
	s.InodeSize = le.Uint16(r[0x58:])
	s.BlockGroupNr = le.Uint16(r[0x5A:])
	s.FeatureCompat = le.Uint32(r[0x5C:])
	s.FeatureIncompat = le.Uint32(r[0x60:])
	s.FeatureRoCompat = le.Uint32(r[0x64:])
	copy(s.UUID[:], r[0x68:])
	copy(s.VolumeName[:], r[0x78:])
	copy(s.LastMounted[:], r[0x88:])
	s.ReservedGdtBlocks = le.Uint16(r[0xCE:])
	copy(s.JournalUUID[:], r[0xD0:])
	s.JournalInum = le.Uint32(r[0xE0:])
	s.JournalDev = le.Uint32(r[0xE4:])
	s.LastOrphan = le.Uint32(r[0xE8:])
	for i := range s.HashSeed {
		s.HashSeed[i] = le.Uint32(r[0xEC+4*i:])
	}
	s.DefHashVersion = r[0xFC]
	s.JnlBackupType = r[0xFD]
	s.DescSize = le.Uint16(r[0xFE:])
	s.DefaultMountOpts = le.Uint32(r[0x100:])
	s.FirstMetaBg = le.Uint32(r[0x104:])
	s.MkfsTime = joinTime(le.Uint32(r[0x108:]), r[0x276])
	for i := range s.JnlBlocks {
		s.JnlBlocks[i] = le.Uint32(r[0x10C+4*i:])
	}
	if s.Is64Bit() {
		s.BlocksCount |= uint64(le.Uint32(r[0x150:])) << 32
		s.RBlocksCount |= uint64(le.Uint32(r[0x154:])) << 32
		s.FreeBlocksCount |= uint64(le.Uint32(r[0x158:])) << 32
	}
	s.MinExtraIsize = le.Uint16(r[0x15C:])
	s.WantExtraIsize = le.Uint16(r[0x15E:])
	s.Flags = le.Uint32(r[0x160:])
	s.RaidStride = le.Uint16(r[0x164:])
	s.MmpInterval = le.Uint16(r[0x166:])
	s.MmpBlock = le.Uint64(r[0x168:])
	s.RaidStripeWidth = le.Uint32(r[0x170:])
	s.LogGroupsPerFlex = r[0x174]
	s.ChecksumType = r[0x175]
	s.KbytesWritten = le.Uint64(r[0x178:])
	s.UsrQuotaInum = le.Uint32(r[0x240:])
	s.GrpQuotaInum = le.Uint32(r[0x244:])
	s.OverheadClusters = le.Uint32(r[0x248:])
	s.BackupBgs[0] = le.Uint32(r[0x24C:])
	s.BackupBgs[1] = le.Uint32(r[0x250:])
	s.LpfIno = le.Uint32(r[0x268:])
	s.PrjQuotaInum = le.Uint32(r[0x26C:])
	s.ChecksumSeed = le.Uint32(r[0x270:])
	s.OrphanFileInum = le.Uint32(r[0x280:])
	s.Checksum = le.Uint32(r[0x3FC:])
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

func joinTime(lo uint32, hi byte) int64 { return int64(lo) | int64(hi)<<32 }

func splitTime(t int64) (uint32, byte) { return uint32(t), byte(t >> 32) }

func sbCorrupt(format string, args ...any) error {
	return errs.Corruptf("superblock", 0, -1, format, args...)
}

// Validate checks invariants L1-L5.
func (s *Superblock) Validate() error {
	if s.Magic != SuperMagic {
		// Not ext4 at all (ErrNotExt4), and, as a damaged superblock
		// cannot be told apart, corrupt too (ErrCorrupt).
		return &errs.CorruptError{What: "superblock", Off: -1, Err: errs.ErrNotExt4,
			Msg: fmt.Sprintf("bad magic %#04x (want %#04x)", s.Magic, SuperMagic)}
	}
	if s.LogBlockSize > MaxBlockLogSize-MinBlockLogSize {
		return sbCorrupt("block size 1024<<%d out of range", s.LogBlockSize)
	}
	bs := s.BlockSize()
	if s.BlocksPerGroup == 0 || s.BlocksPerGroup > uint32(8*bs) && !s.HasRoCompat(RoCompatBigalloc) {
		return sbCorrupt("blocks per group %d out of range for block size %d", s.BlocksPerGroup, bs)
	}
	if s.ClustersPerGroup == 0 || s.ClustersPerGroup > uint32(8*bs) {
		return sbCorrupt("clusters per group %d out of range", s.ClustersPerGroup)
	}
	if s.InodesPerGroup == 0 || s.InodesPerGroup > uint32(8*bs) {
		return sbCorrupt("inodes per group %d out of range", s.InodesPerGroup)
	}
	if s.BlocksCount == 0 || uint64(s.FirstDataBlock) >= s.BlocksCount {
		return sbCorrupt("blocks count %d, first data block %d", s.BlocksCount, s.FirstDataBlock)
	}
	if s.FirstDataBlock > 1 {
		return sbCorrupt("first data block %d", s.FirstDataBlock)
	}
	is := s.InodeSizeBytes()
	if is < GoodOldInodeSize || is > bs || is&(is-1) != 0 {
		return sbCorrupt("inode size %d", is)
	}
	if s.RevLevel > 0 && s.FirstIno < GoodOldFirstIno {
		return sbCorrupt("first inode %d", s.FirstIno)
	}
	if s.Is64Bit() {
		d := int(s.DescSize)
		if d < DescSize64 || d > 1024 || d&(d-1) != 0 {
			return sbCorrupt("descriptor size %d with 64bit", d)
		}
	}
	if uint64(s.InodesPerGroup)*s.GroupCount() != uint64(s.InodesCount) {
		return sbCorrupt("inodes count %d != %d per group * %d groups", s.InodesCount, s.InodesPerGroup, s.GroupCount())
	}
	if s.HasRoCompat(RoCompatMetadataCsum) {
		if s.ChecksumType != ChecksumTypeCrc32c {
			return sbCorrupt("checksum type %d", s.ChecksumType)
		}
		if want := s.ComputeChecksum(); want != s.Checksum {
			return sbCorrupt("checksum %#x != computed %#x", s.Checksum, want)
		}
	}
	return nil
}

// QuotaInode reports whether ino is one of the quota inodes the
// superblock names (s_usr_quota_inum, s_grp_quota_inum,
// s_prj_quota_inum), with or without the quota feature, as Linux's
// is_special_ino counts them.
func (s *Superblock) QuotaInode(ino uint32) bool {
	return ino != 0 && (ino == s.UsrQuotaInum || ino == s.GrpQuotaInum || ino == s.PrjQuotaInum)
}

// Encode returns the 1024 on-disk bytes, starting from Raw, with the
// checksum recomputed when metadata_csum is set. Raw is updated to match.
func (s *Superblock) Encode() []byte {
	le := binary.LittleEndian
	r := s.Raw[:]
	le.PutUint32(r[0x00:], s.InodesCount)
	le.PutUint32(r[0x04:], uint32(s.BlocksCount))
	le.PutUint32(r[0x08:], uint32(s.RBlocksCount))
	le.PutUint32(r[0x0C:], uint32(s.FreeBlocksCount))
	le.PutUint32(r[0x10:], s.FreeInodesCount)
	le.PutUint32(r[0x14:], s.FirstDataBlock)
	le.PutUint32(r[0x18:], s.LogBlockSize)
	le.PutUint32(r[0x1C:], s.LogClusterSize)
	le.PutUint32(r[0x20:], s.BlocksPerGroup)
	le.PutUint32(r[0x24:], s.ClustersPerGroup)
	le.PutUint32(r[0x28:], s.InodesPerGroup)
	var hi byte
	var lo uint32
	lo, hi = splitTime(s.Mtime)
	le.PutUint32(r[0x2C:], lo)
	r[0x275] = hi
	lo, hi = splitTime(s.Wtime)
	le.PutUint32(r[0x30:], lo)
	r[0x274] = hi
	le.PutUint16(r[0x34:], s.MntCount)
	le.PutUint16(r[0x36:], uint16(s.MaxMntCount))
	le.PutUint16(r[0x38:], s.Magic)
	le.PutUint16(r[0x3A:], s.State)
	le.PutUint16(r[0x3C:], s.Errors)
	le.PutUint16(r[0x3E:], s.MinorRevLevel)
	lo, hi = splitTime(s.Lastcheck)
	le.PutUint32(r[0x40:], lo)
	r[0x277] = hi
	le.PutUint32(r[0x44:], s.Checkinterval)
	le.PutUint32(r[0x48:], s.CreatorOS)
	le.PutUint32(r[0x4C:], s.RevLevel)
	le.PutUint16(r[0x50:], s.DefResuid)
	le.PutUint16(r[0x52:], s.DefResgid)
	le.PutUint32(r[0x54:], s.FirstIno)
	le.PutUint16(r[0x58:], s.InodeSize)
	le.PutUint16(r[0x5A:], s.BlockGroupNr)
	le.PutUint32(r[0x5C:], s.FeatureCompat)
	le.PutUint32(r[0x60:], s.FeatureIncompat)
	le.PutUint32(r[0x64:], s.FeatureRoCompat)
	copy(r[0x68:], s.UUID[:])
	copy(r[0x78:], s.VolumeName[:])
	copy(r[0x88:], s.LastMounted[:])
	le.PutUint16(r[0xCE:], s.ReservedGdtBlocks)
	copy(r[0xD0:], s.JournalUUID[:])
	le.PutUint32(r[0xE0:], s.JournalInum)
	le.PutUint32(r[0xE4:], s.JournalDev)
	le.PutUint32(r[0xE8:], s.LastOrphan)
	for i, v := range s.HashSeed {
		le.PutUint32(r[0xEC+4*i:], v)
	}
	r[0xFC] = s.DefHashVersion
	r[0xFD] = s.JnlBackupType
	le.PutUint16(r[0xFE:], s.DescSize)
	le.PutUint32(r[0x100:], s.DefaultMountOpts)
	le.PutUint32(r[0x104:], s.FirstMetaBg)
	lo, hi = splitTime(s.MkfsTime)
	le.PutUint32(r[0x108:], lo)
	r[0x276] = hi
	for i, v := range s.JnlBlocks {
		le.PutUint32(r[0x10C+4*i:], v)
	}
	if s.Is64Bit() {
		le.PutUint32(r[0x150:], uint32(s.BlocksCount>>32))
		le.PutUint32(r[0x154:], uint32(s.RBlocksCount>>32))
		le.PutUint32(r[0x158:], uint32(s.FreeBlocksCount>>32))
	}
	le.PutUint16(r[0x15C:], s.MinExtraIsize)
	le.PutUint16(r[0x15E:], s.WantExtraIsize)
	le.PutUint32(r[0x160:], s.Flags)
	le.PutUint16(r[0x164:], s.RaidStride)
	le.PutUint16(r[0x166:], s.MmpInterval)
	le.PutUint64(r[0x168:], s.MmpBlock)
	le.PutUint32(r[0x170:], s.RaidStripeWidth)
	r[0x174] = s.LogGroupsPerFlex
	r[0x175] = s.ChecksumType
	le.PutUint64(r[0x178:], s.KbytesWritten)
	le.PutUint32(r[0x240:], s.UsrQuotaInum)
	le.PutUint32(r[0x244:], s.GrpQuotaInum)
	le.PutUint32(r[0x248:], s.OverheadClusters)
	le.PutUint32(r[0x24C:], s.BackupBgs[0])
	le.PutUint32(r[0x250:], s.BackupBgs[1])
	le.PutUint32(r[0x268:], s.LpfIno)
	le.PutUint32(r[0x26C:], s.PrjQuotaInum)
	le.PutUint32(r[0x270:], s.ChecksumSeed)
	le.PutUint32(r[0x280:], s.OrphanFileInum)
	if s.HasRoCompat(RoCompatMetadataCsum) {
		s.Checksum = s.ComputeChecksum()
	}
	le.PutUint32(r[0x3FC:], s.Checksum)
	out := make([]byte, SuperblockSize)
	copy(out, r)
	return out
}

// ComputeChecksum returns crc32c(~0, Raw[0:0x3FC]). Call it after Encode
// has brought Raw up to date, or on a freshly decoded superblock.
func (s *Superblock) ComputeChecksum() uint32 {
	return crc32c.Kernel(^uint32(0), s.Raw[:0x3FC])
}

// BlockSize returns the block size in bytes.
func (s *Superblock) BlockSize() int { return 1024 << s.LogBlockSize }

// ClusterSize returns the cluster size in bytes (the block size unless
// bigalloc is set).
func (s *Superblock) ClusterSize() int {
	if s.HasRoCompat(RoCompatBigalloc) {
		return 1024 << s.LogClusterSize
	}
	return s.BlockSize()
}

// InodeSizeBytes returns the on-disk inode size (128 for revision 0).
func (s *Superblock) InodeSizeBytes() int {
	if s.RevLevel == 0 {
		return GoodOldInodeSize
	}
	return int(s.InodeSize)
}

// FirstInode returns the first non-reserved inode number.
func (s *Superblock) FirstInode() uint32 {
	if s.RevLevel == 0 {
		return GoodOldFirstIno
	}
	return s.FirstIno
}

// GroupCount returns the number of block groups.
func (s *Superblock) GroupCount() uint64 {
	if s.BlocksPerGroup == 0 || s.BlocksCount <= uint64(s.FirstDataBlock) {
		return 0
	}
	return (s.BlocksCount - uint64(s.FirstDataBlock) + uint64(s.BlocksPerGroup) - 1) / uint64(s.BlocksPerGroup)
}

// DescriptorSize returns the size of one group descriptor in bytes.
func (s *Superblock) DescriptorSize() int {
	if s.Is64Bit() {
		return int(s.DescSize)
	}
	return DescSize32
}

// Is64Bit reports the 64bit incompat feature.
func (s *Superblock) Is64Bit() bool { return s.FeatureIncompat&Incompat64Bit != 0 }

// HasCompat, HasRoCompat and HasIncompat test feature bits.
func (s *Superblock) HasCompat(f uint32) bool   { return s.FeatureCompat&f != 0 }
func (s *Superblock) HasRoCompat(f uint32) bool { return s.FeatureRoCompat&f != 0 }
func (s *Superblock) HasIncompat(f uint32) bool { return s.FeatureIncompat&f != 0 }

// MetadataCsum reports whether metadata_csum is on.
func (s *Superblock) MetadataCsum() bool { return s.HasRoCompat(RoCompatMetadataCsum) }

// GdtCsum reports whether group descriptors carry the old crc16 (uninit_bg).
func (s *Superblock) GdtCsum() bool {
	return !s.MetadataCsum() && s.HasRoCompat(RoCompatGdtCsum)
}

// HasGroupChecksums reports whether group descriptors carry any checksum,
// which is also when the *_UNINIT flags are honoured.
func (s *Superblock) HasGroupChecksums() bool {
	return s.HasRoCompat(RoCompatMetadataCsum | RoCompatGdtCsum)
}

// CsumSeed returns the seed for metadata checksums: s_checksum_seed with
// metadata_csum_seed, crc32c(~0, uuid) otherwise.
func (s *Superblock) CsumSeed() uint32 {
	if s.HasIncompat(IncompatCsumSeed) {
		return s.ChecksumSeed
	}
	return crc32c.Kernel(^uint32(0), s.UUID[:])
}

// GroupFirstBlock returns the first block of group g.
func (s *Superblock) GroupFirstBlock(g uint64) uint64 {
	return uint64(s.FirstDataBlock) + g*uint64(s.BlocksPerGroup)
}

// GroupBlocks returns the number of blocks in group g (the last may be short).
func (s *Superblock) GroupBlocks(g uint64) uint32 {
	first := s.GroupFirstBlock(g)
	if first+uint64(s.BlocksPerGroup) > s.BlocksCount {
		return uint32(s.BlocksCount - first)
	}
	return s.BlocksPerGroup
}

// GroupHasSuper reports whether group g holds a superblock backup (and a
// copy of the descriptor table when meta_bg is off).
func (s *Superblock) GroupHasSuper(g uint64) bool {
	if g == 0 {
		return true
	}
	if s.HasCompat(CompatSparseSuper2) {
		return g == uint64(s.BackupBgs[0]) || g == uint64(s.BackupBgs[1])
	}
	if g <= 1 || !s.HasRoCompat(RoCompatSparseSuper) {
		return true
	}
	if g&1 == 0 {
		return false
	}
	return isPowerOf(g, 3) || isPowerOf(g, 5) || isPowerOf(g, 7)
}

func isPowerOf(n, b uint64) bool {
	for n%b == 0 {
		n /= b
	}
	return n == 1
}

// DescBlocks returns the number of blocks the descriptor table occupies.
func (s *Superblock) DescBlocks() uint64 {
	per := uint64(s.BlockSize() / s.DescriptorSize())
	return (s.GroupCount() + per - 1) / per
}

// SuperblockBlock returns the block holding the primary superblock: 1 with
// 1 KiB blocks, 0 otherwise. It is s_first_data_block except on bigalloc
// volumes with 1 KiB blocks, whose first data block is 0 (clusters start
// at block 0) while the superblock still sits at byte 1024.
func (s *Superblock) SuperblockBlock() uint64 {
	return uint64(SuperblockOffset / s.BlockSize())
}

// DescriptorLocation returns the block holding group g's descriptor and the
// byte offset within it, following meta_bg when set. Like the kernel's
// descriptor_loc, the table follows the block holding the primary
// superblock, not s_first_data_block (they differ for bigalloc with 1 KiB
// blocks).
func (s *Superblock) DescriptorLocation(g uint64) (block uint64, off int) {
	per := uint64(s.BlockSize() / s.DescriptorSize())
	descBlock := g / per
	off = int(g%per) * s.DescriptorSize()
	if !s.HasIncompat(IncompatMetaBG) || descBlock < uint64(s.FirstMetaBg) {
		return s.SuperblockBlock() + 1 + descBlock, off
	}
	// meta_bg: each metagroup of `per` groups keeps its descriptor block in
	// its own first group (after that group's superblock backup, if any).
	metaFirst := descBlock * per
	b := s.GroupFirstBlock(metaFirst)
	if s.GroupHasSuper(metaFirst) {
		b++
	}
	if metaFirst == 0 && s.FirstDataBlock == 0 && s.BlockSize() == 1024 {
		// Group 0 starts at block 0, before the superblock's block 1.
		b++
	}
	return b, off
}

// Label returns the volume name.
func (s *Superblock) Label() string { return cString(s.VolumeName[:]) }

// Time converts an on-disk seconds value to time.Time.
func Time(sec int64) time.Time { return time.Unix(sec, 0) }

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
