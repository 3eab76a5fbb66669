package layout

import (
	"encoding/binary"
	"math"
	"time"

	"github.com/ext4io/ext4io/internal/crc32c"
	"github.com/ext4io/ext4io/internal/errs"
)

// Inode mode bits and flags. Part of the on-disk format.
const (
	ModeFmt  = 0xF000
	ModeFIFO = 0x1000
	ModeChr  = 0x2000
	ModeDir  = 0x4000
	ModeBlk  = 0x6000
	ModeReg  = 0x8000
	ModeLnk  = 0xA000
	ModeSock = 0xC000

	InodeFlagIndex      = 0x1000     // EXT4_INDEX_FL: hash-indexed directory
	InodeFlagHugeFile   = 0x40000    // EXT4_HUGE_FILE_FL: i_blocks in fs blocks
	InodeFlagExtents    = 0x80000    // EXT4_EXTENTS_FL
	InodeFlagEAInode    = 0x200000   // EXT4_EA_INODE_FL
	InodeFlagInlineData = 0x10000000 // EXT4_INLINE_DATA_FL

	// InodeBlockSize is the size of i_block: the in-inode extent root,
	// block map, fast symlink target or inline data.
	InodeBlockSize = 60
)

// Inode offsets of the checksum fields.
const (
	inodeChecksumLoOff  = 0x7C
	inodeExtraIsizeOff  = 0x80
	inodeChecksumHiOff  = 0x82
	inodeChecksumHiEnd  = 4 // i_extra_isize needed for i_checksum_hi
	inodeCtimeExtraEnd  = 8
	inodeMtimeExtraEnd  = 12
	inodeAtimeExtraEnd  = 16
	inodeCrtimeEnd      = 20
	inodeCrtimeExtraEnd = 24
)

// Timestamp is an inode time: seconds since the epoch (with ext4's 34-bit
// extension) and nanoseconds.
type Timestamp struct {
	Sec  int64
	Nsec uint32
}

// Time converts t to time.Time.
func (t Timestamp) Time() time.Time { return time.Unix(t.Sec, int64(t.Nsec)) }

// TimestampOf converts a time.Time.
func TimestampOf(t time.Time) Timestamp { return Timestamp{t.Unix(), uint32(t.Nanosecond())} }

// The seconds an inode time can hold, as Linux's EXT4_TIMESTAMP_MIN,
// EXT4_NON_EXTRA_TIMESTAMP_MAX (the 32-bit field alone) and
// EXT4_EXTRA_TIMESTAMP_MAX (with the two epoch bits of the extra field):
// 1901-12-13T20:45:52Z, 2038-01-19T03:14:07Z and 2446-05-10T22:38:55Z.
const (
	TimestampMin        = math.MinInt32
	TimestampMaxNoExtra = math.MaxInt32
	TimestampMax        = math.MaxInt32 + 3<<32
)

// Clamp returns t within [TimestampMin, max], with no nanoseconds when
// it was moved to a bound, as Linux's timestamp_truncate: a time out of
// range is stored as the nearest one the inode holds instead of wrapping.
func (t Timestamp) Clamp(max int64) Timestamp {
	switch {
	case t.Sec > max:
		return Timestamp{Sec: max}
	case t.Sec < TimestampMin:
		return Timestamp{Sec: TimestampMin}
	}
	return t
}

// TimestampMax returns the latest second in's ctime, mtime and atime can
// hold: TimestampMax when its extra fields hold their epoch bits,
// TimestampMaxNoExtra otherwise.
func (in *Inode) TimestampMax() int64 {
	if int(in.ExtraIsize) >= inodeAtimeExtraEnd {
		return TimestampMax
	}
	return TimestampMaxNoExtra
}

// Inode mirrors struct ext4_inode, including the extra fields after the
// first 128 bytes when i_extra_isize covers them. Split fields are joined.
// Raw keeps the decoded bytes (the whole on-disk inode, s_inode_size long).
type Inode struct {
	Mode       uint16               // 0x00
	UID        uint32               // 0x02 lo, 0x78 hi
	Size       uint64               // 0x04 lo, 0x6C hi
	Atime      Timestamp            // 0x08, extra 0x8C
	Ctime      Timestamp            // 0x0C, extra 0x84
	Mtime      Timestamp            // 0x10, extra 0x88
	Dtime      uint32               // 0x14
	GID        uint32               // 0x18 lo, 0x7A hi
	LinksCount uint16               // 0x1A
	BlocksRaw  uint64               // 0x1C lo, 0x74 hi: i_blocks as stored (see Blocks)
	Flags      uint32               // 0x20
	Version    uint64               // 0x24 lo (osd1), 0x98 hi
	Block      [InodeBlockSize]byte // 0x28 i_block
	Generation uint32               // 0x64
	FileACL    uint64               // 0x68 lo, 0x76 hi
	ExtraIsize uint16               // 0x80
	Checksum   uint32               // 0x7C lo, 0x82 hi
	Crtime     Timestamp            // 0x90, extra 0x94
	Projid     uint32               // 0x9C

	Raw []byte
}

func decodeTime(sec uint32, extra uint32, hasExtra bool) Timestamp {
	t := Timestamp{Sec: int64(int32(sec))}
	if hasExtra {
		t.Sec += int64(extra&3) << 32
		t.Nsec = extra >> 2 // may exceed 999999999 on a corrupt inode; Time() normalises
	}
	return t
}

func encodeTime(t Timestamp) (sec uint32, extra uint32) {
	sec = uint32(t.Sec)
	epoch := (t.Sec - int64(int32(sec))) >> 32
	return sec, uint32(epoch)&3 | t.Nsec<<2
}

// InodeFree reports whether the raw on-disk inode b is free as ext4's
// inode allocator and e2fsck see it: i_mode 0, or i_links_count 0 with
// i_dtime set (deleted). b holds at least GoodOldInodeSize bytes.
func InodeFree(b []byte) bool {
	le := binary.LittleEndian
	return le.Uint16(b[0x00:]) == 0 || le.Uint16(b[0x1A:]) == 0 && le.Uint32(b[0x14:]) != 0
}

// DecodeInode decodes an on-disk inode of inodeSize bytes. It checks that
// i_extra_isize fits; checksums are verified by VerifyInodeChecksum.
func DecodeInode(b []byte, inodeSize int) (*Inode, error) {
	if inodeSize < GoodOldInodeSize || len(b) < inodeSize {
		return nil, errs.Corruptf("inode", 0, -1, "inode size %d, buffer %d", inodeSize, len(b))
	}
	le := binary.LittleEndian
	in := &Inode{Raw: append([]byte(nil), b[:inodeSize]...)}
	r := in.Raw
	in.Mode = le.Uint16(r[0x00:])
	in.UID = uint32(le.Uint16(r[0x02:])) | uint32(le.Uint16(r[0x78:]))<<16
	in.Size = uint64(le.Uint32(r[0x04:])) | uint64(le.Uint32(r[0x6C:]))<<32
	in.Dtime = le.Uint32(r[0x14:])
	in.GID = uint32(le.Uint16(r[0x18:])) | uint32(le.Uint16(r[0x7A:]))<<16
	in.LinksCount = le.Uint16(r[0x1A:])
	in.BlocksRaw = uint64(le.Uint32(r[0x1C:])) | uint64(le.Uint16(r[0x74:]))<<32
	in.Flags = le.Uint32(r[0x20:])
	in.Version = uint64(le.Uint32(r[0x24:]))
	copy(in.Block[:], r[0x28:0x28+InodeBlockSize])
	in.Generation = le.Uint32(r[0x64:])
	in.FileACL = uint64(le.Uint32(r[0x68:])) | uint64(le.Uint16(r[0x76:]))<<32
	in.Checksum = uint32(le.Uint16(r[inodeChecksumLoOff:]))
	extra := 0
	if inodeSize > GoodOldInodeSize {
		in.ExtraIsize = le.Uint16(r[inodeExtraIsizeOff:])
		extra = int(in.ExtraIsize)
		if GoodOldInodeSize+extra > inodeSize || extra&3 != 0 {
			return nil, errs.Corruptf("inode", 0, -1, "i_extra_isize %d does not fit inode size %d", extra, inodeSize)
		}
	}
	fits := func(end int) bool { return extra >= end }
	if fits(inodeChecksumHiEnd) {
		in.Checksum |= uint32(le.Uint16(r[inodeChecksumHiOff:])) << 16
	}
	in.Ctime = decodeTime(le.Uint32(r[0x0C:]), le32At(r, 0x84, fits(inodeCtimeExtraEnd)), fits(inodeCtimeExtraEnd))
	in.Mtime = decodeTime(le.Uint32(r[0x10:]), le32At(r, 0x88, fits(inodeMtimeExtraEnd)), fits(inodeMtimeExtraEnd))
	in.Atime = decodeTime(le.Uint32(r[0x08:]), le32At(r, 0x8C, fits(inodeAtimeExtraEnd)), fits(inodeAtimeExtraEnd))
	if fits(inodeCrtimeEnd) {
		in.Crtime = decodeTime(le.Uint32(r[0x90:]), le32At(r, 0x94, fits(inodeCrtimeExtraEnd)), fits(inodeCrtimeExtraEnd))
	}
	if fits(0x1C) {
		in.Version |= uint64(le.Uint32(r[0x98:])) << 32
	}
	if fits(0x20) {
		in.Projid = le.Uint32(r[0x9C:])
	}
	return in, nil
}

func le32At(r []byte, off int, ok bool) uint32 {
	if !ok {
		return 0
	}
	return binary.LittleEndian.Uint32(r[off:])
}

// Encode writes the fields into Raw (which must be the on-disk inode size;
// a nil Raw becomes inodeSize zero bytes) and returns it. The checksum is
// written as it stands; call SetChecksum to update it.
func (in *Inode) Encode(inodeSize int) []byte {
	if len(in.Raw) != inodeSize {
		r := make([]byte, inodeSize)
		copy(r, in.Raw)
		in.Raw = r
	}
	le := binary.LittleEndian
	r := in.Raw
	le.PutUint16(r[0x00:], in.Mode)
	le.PutUint16(r[0x02:], uint16(in.UID))
	le.PutUint16(r[0x78:], uint16(in.UID>>16))
	le.PutUint32(r[0x04:], uint32(in.Size))
	le.PutUint32(r[0x6C:], uint32(in.Size>>32))
	le.PutUint32(r[0x14:], in.Dtime)
	le.PutUint16(r[0x18:], uint16(in.GID))
	le.PutUint16(r[0x7A:], uint16(in.GID>>16))
	le.PutUint16(r[0x1A:], in.LinksCount)
	le.PutUint32(r[0x1C:], uint32(in.BlocksRaw))
	le.PutUint16(r[0x74:], uint16(in.BlocksRaw>>32))
	le.PutUint32(r[0x20:], in.Flags)
	le.PutUint32(r[0x24:], uint32(in.Version))
	copy(r[0x28:], in.Block[:])
	le.PutUint32(r[0x64:], in.Generation)
	le.PutUint32(r[0x68:], uint32(in.FileACL))
	le.PutUint16(r[0x76:], uint16(in.FileACL>>32))
	le.PutUint16(r[inodeChecksumLoOff:], uint16(in.Checksum))
	extra := 0
	if inodeSize > GoodOldInodeSize {
		le.PutUint16(r[inodeExtraIsizeOff:], in.ExtraIsize)
		extra = int(in.ExtraIsize)
	}
	fits := func(end int) bool { return extra >= end }
	if fits(inodeChecksumHiEnd) {
		le.PutUint16(r[inodeChecksumHiOff:], uint16(in.Checksum>>16))
	}
	put := func(secOff, extraOff, end int, t Timestamp) {
		max := int64(TimestampMaxNoExtra)
		if fits(end) {
			max = TimestampMax
		}
		sec, ex := encodeTime(t.Clamp(max))
		le.PutUint32(r[secOff:], sec)
		if fits(end) {
			le.PutUint32(r[extraOff:], ex)
		}
	}
	put(0x0C, 0x84, inodeCtimeExtraEnd, in.Ctime)
	put(0x10, 0x88, inodeMtimeExtraEnd, in.Mtime)
	put(0x08, 0x8C, inodeAtimeExtraEnd, in.Atime)
	if fits(inodeCrtimeEnd) {
		put(0x90, 0x94, inodeCrtimeExtraEnd, in.Crtime)
	}
	if fits(0x1C) {
		le.PutUint32(r[0x98:], uint32(in.Version>>32))
	}
	if fits(0x20) {
		le.PutUint32(r[0x9C:], in.Projid)
	}
	return r
}

// InodeSeed returns the per-inode checksum seed, from which the inode,
// its extent blocks and its directory blocks are checksummed.
func InodeSeed(fsSeed, ino, gen uint32) uint32 {
	return crc32c.KernelU32(crc32c.KernelU32(fsSeed, ino), gen)
}

// ComputeChecksum returns the crc32c of the encoded inode (Raw) with its
// checksum fields taken as zero, as ext4_inode_csum computes it. With a
// 128-byte inode (or i_extra_isize < 4) only the low 16 bits are stored.
func (in *Inode) ComputeChecksum(fsSeed, ino uint32) uint32 {
	r := in.Raw
	seed := InodeSeed(fsSeed, ino, in.Generation)
	c := crc32c.Kernel(seed, r[:inodeChecksumLoOff])
	c = crc32c.Kernel(c, zeroChecksum16)
	c = crc32c.Kernel(c, r[inodeChecksumLoOff+2:GoodOldInodeSize])
	if len(r) > GoodOldInodeSize {
		c = crc32c.Kernel(c, r[GoodOldInodeSize:inodeChecksumHiOff])
		if int(in.ExtraIsize) >= inodeChecksumHiEnd {
			c = crc32c.Kernel(c, zeroChecksum16)
			c = crc32c.Kernel(c, r[inodeChecksumHiOff+2:])
		} else {
			c = crc32c.Kernel(c, r[inodeChecksumHiOff:])
		}
	}
	if len(r) <= GoodOldInodeSize || int(in.ExtraIsize) < inodeChecksumHiEnd {
		c &= 0xFFFF
	}
	return c
}

// SetChecksum encodes the inode and stores its checksum.
func (in *Inode) SetChecksum(fsSeed, ino uint32) {
	in.Encode(len(in.Raw))
	in.Checksum = in.ComputeChecksum(fsSeed, ino)
	le := binary.LittleEndian
	le.PutUint16(in.Raw[inodeChecksumLoOff:], uint16(in.Checksum))
	if len(in.Raw) > GoodOldInodeSize && int(in.ExtraIsize) >= inodeChecksumHiEnd {
		le.PutUint16(in.Raw[inodeChecksumHiOff:], uint16(in.Checksum>>16))
	}
}

// VerifyChecksum checks the inode checksum (call only with metadata_csum).
// An all-zero inode (never used) verifies, as in the kernel.
func (in *Inode) VerifyChecksum(fsSeed, ino uint32, block uint64, off int) error {
	allZero := true
	for _, c := range in.Raw {
		if c != 0 {
			allZero = false
			break
		}
	}
	if allZero {
		return nil
	}
	if want := in.ComputeChecksum(fsSeed, ino); want != in.Checksum {
		return &errs.CorruptError{What: "inode", Ino: ino, Block: block, Off: off,
			Msg: sprintf("checksum %#x != computed %#x", in.Checksum, want)}
	}
	return nil
}

// Blocks returns i_blocks in 512-byte units, honouring huge_file.
func (in *Inode) Blocks(sb *Superblock) uint64 {
	b := in.BlocksRaw
	if !sb.HasRoCompat(RoCompatHugeFile) {
		b &= 0xFFFFFFFF
	} else if in.Flags&InodeFlagHugeFile != 0 {
		b *= uint64(sb.BlockSize() / 512)
	}
	return b
}

// SetBlocks stores a 512-byte-unit block count into i_blocks. It reports
// false when the count does not fit the format (no huge_file, > 2^32-1).
func (in *Inode) SetBlocks(sb *Superblock, sectors uint64) bool {
	in.Flags &^= InodeFlagHugeFile
	switch {
	case sectors <= 0xFFFFFFFF:
		in.BlocksRaw = sectors
	case !sb.HasRoCompat(RoCompatHugeFile):
		return false
	case sectors < 1<<48:
		in.BlocksRaw = sectors
	default:
		in.Flags |= InodeFlagHugeFile
		in.BlocksRaw = sectors / uint64(sb.BlockSize()/512)
	}
	return true
}

// IsDir, IsReg and IsSymlink test the file type in Mode.
func (in *Inode) IsDir() bool     { return in.Mode&ModeFmt == ModeDir }
func (in *Inode) IsReg() bool     { return in.Mode&ModeFmt == ModeReg }
func (in *Inode) IsSymlink() bool { return in.Mode&ModeFmt == ModeLnk }

// InodeLocation returns the group and the index within the group's inode
// table of inode ino (numbered from 1).
func (s *Superblock) InodeLocation(ino uint32) (group uint64, index uint32) {
	return uint64((ino - 1) / s.InodesPerGroup), (ino - 1) % s.InodesPerGroup
}
