package journal

import (
	"encoding/binary"
	"fmt"

	"github.com/ext4io/ext4io/internal/crc32c"
	"github.com/ext4io/ext4io/internal/errs"
)

// Magic numbers, block types, feature flags and tag flags. All are part of
// the on-disk format.
const (
	Magic uint32 = 0xC03B3998 // JBD2_MAGIC_NUMBER

	BlockTypeDescriptor   uint32 = 1 // JBD2_DESCRIPTOR_BLOCK
	BlockTypeCommit       uint32 = 2 // JBD2_COMMIT_BLOCK
	BlockTypeSuperblockV1 uint32 = 3 // JBD2_SUPERBLOCK_V1
	BlockTypeSuperblockV2 uint32 = 4 // JBD2_SUPERBLOCK_V2
	BlockTypeRevoke       uint32 = 5 // JBD2_REVOKE_BLOCK

	FeatureCompatChecksum uint32 = 0x1 // JBD2_FEATURE_COMPAT_CHECKSUM (v1 commit crc32_be)

	FeatureIncompatRevoke      uint32 = 0x1  // JBD2_FEATURE_INCOMPAT_REVOKE
	FeatureIncompat64Bit       uint32 = 0x2  // JBD2_FEATURE_INCOMPAT_64BIT
	FeatureIncompatAsyncCommit uint32 = 0x4  // JBD2_FEATURE_INCOMPAT_ASYNC_COMMIT
	FeatureIncompatCsumV2      uint32 = 0x8  // JBD2_FEATURE_INCOMPAT_CSUM_V2
	FeatureIncompatCsumV3      uint32 = 0x10 // JBD2_FEATURE_INCOMPAT_CSUM_V3
	FeatureIncompatFastCommit  uint32 = 0x20 // JBD2_FEATURE_INCOMPAT_FAST_COMMIT

	// knownIncompat is every incompat feature this package handles.
	knownIncompat = FeatureIncompatRevoke | FeatureIncompat64Bit | FeatureIncompatAsyncCommit |
		FeatureIncompatCsumV2 | FeatureIncompatCsumV3 | FeatureIncompatFastCommit

	FlagEscape   uint32 = 1 // JBD2_FLAG_ESCAPE: block began with Magic, zeroed in the log
	FlagSameUUID uint32 = 2 // JBD2_FLAG_SAME_UUID: no 16-byte UUID follows the tag
	FlagDeleted  uint32 = 4 // JBD2_FLAG_DELETED (unused by jbd2)
	FlagLastTag  uint32 = 8 // JBD2_FLAG_LAST_TAG

	ChecksumTypeCRC32  uint8 = 1 // JBD2_CRC32_CHKSUM
	ChecksumTypeMD5    uint8 = 2 // JBD2_MD5_CHKSUM
	ChecksumTypeSHA1   uint8 = 3 // JBD2_SHA1_CHKSUM
	ChecksumTypeCRC32C uint8 = 4 // JBD2_CRC32C_CHKSUM
	crc32ChksumSize    uint8 = 4 // JBD2_CRC32_CHKSUM_SIZE

	// SuperblockSize is sizeof(journal_superblock_t).
	SuperblockSize = 1024
	headerSize     = 12 // sizeof(journal_header_t)
	revokeHdrSize  = 16 // sizeof(jbd2_journal_revoke_header_t)
	tailSize       = 4  // sizeof(struct jbd2_journal_block_tail)
	commitHdrSize  = 60 // sizeof(struct commit_header)
	maxUsers       = 48 // JBD2_USERS_MAX
)

var be = binary.BigEndian

// Sentinel errors re-exported for callers.
var (
	ErrCorrupt     = errs.ErrCorrupt
	ErrIO          = errs.ErrIO
	ErrInvalid     = errs.ErrInvalid
	ErrClosed      = errs.ErrClosed
	ErrUnsupported = errs.ErrUnsupported
	ErrNoSpace     = errs.ErrNoSpace
	ErrReadOnly    = errs.ErrReadOnly
)

// Header mirrors journal_header_t, the first 12 bytes of every journal
// metadata block.
type Header struct {
	Magic     uint32
	BlockType uint32
	Sequence  uint32
}

func decodeHeader(b []byte) Header {
	return Header{be.Uint32(b[0:]), be.Uint32(b[4:]), be.Uint32(b[8:])}
}

func (h Header) encode(b []byte) {
	be.PutUint32(b[0:], h.Magic)
	be.PutUint32(b[4:], h.BlockType)
	be.PutUint32(b[8:], h.Sequence)
}

// Superblock mirrors journal_superblock_t (1024 bytes at journal block 0).
// Fields the format reserves are kept verbatim so encoding is exact.
type Superblock struct {
	Header                    // BlockType is 3 (v1) or 4 (v2)
	BlockSize       uint32    // s_blocksize
	MaxLen          uint32    // s_maxlen: journal length in blocks
	First           uint32    // s_first: first log block
	SeqTail         uint32    // s_sequence: tid of the first transaction in the log
	Start           uint32    // s_start: log block of the tail; 0 = journal empty
	Errno           int32     // s_errno
	FeatureCompat   uint32    // s_feature_compat (v2 only)
	FeatureIncompat uint32    // s_feature_incompat (v2 only)
	FeatureROCompat uint32    // s_feature_ro_compat (v2 only)
	UUID            [16]byte  // s_uuid
	NrUsers         uint32    // s_nr_users
	DynSuper        uint32    // s_dynsuper
	MaxTransaction  uint32    // s_max_transaction
	MaxTransData    uint32    // s_max_trans_data
	ChecksumType    uint8     // s_checksum_type
	Padding2        [3]byte   // s_padding2
	NumFCBlocks     uint32    // s_num_fc_blks
	Head            uint32    // s_head
	Padding         [160]byte // s_padding[40]
	Checksum        uint32    // s_checksum: crc32c(~0, sb with s_checksum = 0)
	Users           [768]byte // s_users[16*48]
}

// DecodeSuperblock parses a journal superblock. It checks the magic and
// block type only; Journal.Open validates the rest.
func DecodeSuperblock(b []byte) (*Superblock, error) {
	if len(b) < SuperblockSize {
		return nil, errs.Corruptf("journal superblock", 0, -1, "short buffer (%d bytes)", len(b))
	}
	sb := &Superblock{Header: decodeHeader(b)}
	if sb.Magic != Magic {
		return nil, errs.Corruptf("journal superblock", 0, 0, "bad magic %#x", sb.Magic)
	}
	if sb.BlockType != BlockTypeSuperblockV1 && sb.BlockType != BlockTypeSuperblockV2 {
		return nil, errs.Corruptf("journal superblock", 0, 4, "bad block type %d", sb.BlockType)
	}
	sb.BlockSize = be.Uint32(b[0x0C:])
	sb.MaxLen = be.Uint32(b[0x10:])
	sb.First = be.Uint32(b[0x14:])
	sb.SeqTail = be.Uint32(b[0x18:])
	sb.Start = be.Uint32(b[0x1C:])
	sb.Errno = int32(be.Uint32(b[0x20:]))
	sb.FeatureCompat = be.Uint32(b[0x24:])
	sb.FeatureIncompat = be.Uint32(b[0x28:])
	sb.FeatureROCompat = be.Uint32(b[0x2C:])
	copy(sb.UUID[:], b[0x30:0x40])
	sb.NrUsers = be.Uint32(b[0x40:])
	sb.DynSuper = be.Uint32(b[0x44:])
	sb.MaxTransaction = be.Uint32(b[0x48:])
	sb.MaxTransData = be.Uint32(b[0x4C:])
	sb.ChecksumType = b[0x50]
	copy(sb.Padding2[:], b[0x51:0x54])
	sb.NumFCBlocks = be.Uint32(b[0x54:])
	sb.Head = be.Uint32(b[0x58:])
	copy(sb.Padding[:], b[0x5C:0xFC])
	sb.Checksum = be.Uint32(b[0xFC:])
	copy(sb.Users[:], b[0x100:0x400])
	return sb, nil
}

// Encode writes the superblock into b[0:1024] as it stands (the checksum
// field is written as is; see SetChecksum).
func (sb *Superblock) Encode(b []byte) {
	_ = b[SuperblockSize-1]
	sb.Header.encode(b)
	be.PutUint32(b[0x0C:], sb.BlockSize)
	be.PutUint32(b[0x10:], sb.MaxLen)
	be.PutUint32(b[0x14:], sb.First)
	be.PutUint32(b[0x18:], sb.SeqTail)
	be.PutUint32(b[0x1C:], sb.Start)
	be.PutUint32(b[0x20:], uint32(sb.Errno))
	be.PutUint32(b[0x24:], sb.FeatureCompat)
	be.PutUint32(b[0x28:], sb.FeatureIncompat)
	be.PutUint32(b[0x2C:], sb.FeatureROCompat)
	copy(b[0x30:0x40], sb.UUID[:])
	be.PutUint32(b[0x40:], sb.NrUsers)
	be.PutUint32(b[0x44:], sb.DynSuper)
	be.PutUint32(b[0x48:], sb.MaxTransaction)
	be.PutUint32(b[0x4C:], sb.MaxTransData)
	b[0x50] = sb.ChecksumType
	copy(b[0x51:0x54], sb.Padding2[:])
	be.PutUint32(b[0x54:], sb.NumFCBlocks)
	be.PutUint32(b[0x58:], sb.Head)
	copy(b[0x5C:0xFC], sb.Padding[:])
	be.PutUint32(b[0xFC:], sb.Checksum)
	copy(b[0x100:0x400], sb.Users[:])
}

// ComputeChecksum returns crc32c(~0, sb) over the encoded superblock with
// s_checksum zeroed (jbd2_superblock_csum).
func (sb *Superblock) ComputeChecksum() uint32 {
	var b [SuperblockSize]byte
	c := *sb
	c.Checksum = 0
	c.Encode(b[:])
	return crc32c.Kernel(^uint32(0), b[:])
}

// SetChecksum updates s_checksum when the journal has checksum v2 or v3.
func (sb *Superblock) SetChecksum() {
	if sb.format().csumV2or3() {
		sb.Checksum = sb.ComputeChecksum()
	}
}

// features returns the feature words, which are meaningful only in a v2
// superblock (jbd2 ignores them in v1).
func (sb *Superblock) features() (compat, incompat, rocompat uint32) {
	if sb.BlockType != BlockTypeSuperblockV2 {
		return 0, 0, 0
	}
	return sb.FeatureCompat, sb.FeatureIncompat, sb.FeatureROCompat
}

// format returns the block-format parameters the superblock selects.
func (sb *Superblock) format() Format {
	c, i, _ := sb.features()
	f := Format{BlockSize: int(sb.BlockSize), Compat: c, Incompat: i}
	if f.csumV2or3() {
		f.Seed = crc32c.Kernel(^uint32(0), sb.UUID[:])
	}
	return f
}

// Format holds what decoding and encoding journal blocks depends on: the
// block size, the feature words and the checksum seed (crc32c(~0, s_uuid)
// when checksum v2/v3 is on).
type Format struct {
	BlockSize int
	Compat    uint32
	Incompat  uint32
	Seed      uint32
}

func (f Format) csumV2or3() bool {
	return f.Incompat&(FeatureIncompatCsumV2|FeatureIncompatCsumV3) != 0
}
func (f Format) csumV3() bool { return f.Incompat&FeatureIncompatCsumV3 != 0 }
func (f Format) is64() bool   { return f.Incompat&FeatureIncompat64Bit != 0 }
func (f Format) tailSize() int {
	if f.csumV2or3() {
		return tailSize
	}
	return 0
}

// TagBytes is journal_tag_bytes(): 16 for tag3 (csum v3), otherwise 12
// (+2 with csum v2) with 64bit, 4 fewer without.
func (f Format) TagBytes() int {
	if f.csumV3() {
		return 16
	}
	sz := 12
	if f.Incompat&FeatureIncompatCsumV2 != 0 {
		sz += 2
	}
	if f.is64() {
		return sz
	}
	return sz - 4
}

// blockTailCsum is the checksum stored in the last 4 bytes of descriptor and
// revoke blocks: crc32c(seed, block with the tail zeroed).
func (f Format) blockTailCsum(b []byte) uint32 {
	n := len(b) - tailSize
	c := crc32c.Kernel(f.Seed, b[:n])
	return crc32c.Kernel(c, []byte{0, 0, 0, 0})
}

func (f Format) blockTailOK(b []byte) bool {
	if !f.csumV2or3() {
		return true
	}
	return be.Uint32(b[len(b)-tailSize:]) == f.blockTailCsum(b)
}

// commitCsum is crc32c(seed, commit block with h_chksum[0] zeroed).
func (f Format) commitCsum(b []byte) uint32 {
	c := crc32c.Kernel(f.Seed, b[:16])
	c = crc32c.Kernel(c, []byte{0, 0, 0, 0})
	return crc32c.Kernel(c, b[20:])
}

// commitCsumPartialOK mirrors jbd2_commit_block_csum_verify_partial: the
// checksum of a block holding only the commit header, the rest zero.
func (f Format) commitCsumPartialOK(b []byte) bool {
	tmp := make([]byte, len(b))
	copy(tmp, b[:commitHdrSize])
	return be.Uint32(b[16:]) == f.commitCsum(tmp)
}

// TagCsum is the data block checksum a tag carries:
// crc32c(crc32c(seed, be32(sequence)), data). Csum v2 tags keep the low 16
// bits.
func (f Format) TagCsum(sequence uint32, data []byte) uint32 {
	var s [4]byte
	be.PutUint32(s[:], sequence)
	return crc32c.Kernel(crc32c.Kernel(f.Seed, s[:]), data)
}

// Tag mirrors journal_block_tag3_t / journal_block_tag_t: one journalled
// block in a descriptor.
type Tag struct {
	Block    uint64   // t_blocknr | t_blocknr_high<<32 (high only with 64bit)
	Flags    uint32   // t_flags (16 bits in the pre-v3 tag)
	Checksum uint32   // t_checksum (16 bits with csum v2)
	High     uint32   // t_blocknr_high as stored (kept for exact re-encoding)
	Pad      uint16   // the 2 trailing bytes of a csum v2 tag (kept for re-encoding)
	UUID     [16]byte // present on disk when Flags lacks FlagSameUUID
}

// Descriptor mirrors a JBD2_DESCRIPTOR_BLOCK: header, tags, and (csum
// v2/v3) a tail checksum.
type Descriptor struct {
	Sequence uint32
	Tags     []Tag
	// Rest holds the bytes after the last tag, verbatim, when decoded. When
	// nil, Encode zero-fills and writes the tail checksum.
	Rest []byte
	// TruncatedUUID is set when the last tag's UUID runs past the block
	// (corrupt input; jbd2 still counts and replays that tag).
	TruncatedUUID bool
}

// DecodeDescriptor parses the tags of a descriptor block the way jbd2's
// count_tags and replay loop walk them. It does not check the tail checksum.
func DecodeDescriptor(f Format, b []byte) (*Descriptor, error) {
	if len(b) != f.BlockSize || len(b) < headerSize+tailSize {
		return nil, errs.Corruptf("journal descriptor", 0, -1, "buffer %d bytes, block size %d", len(b), f.BlockSize)
	}
	h := decodeHeader(b)
	if h.Magic != Magic || h.BlockType != BlockTypeDescriptor {
		return nil, errs.Corruptf("journal descriptor", 0, 0, "bad header magic %#x type %d", h.Magic, h.BlockType)
	}
	d := &Descriptor{Sequence: h.Sequence}
	tb := f.TagBytes()
	size := len(b) - f.tailSize()
	p := headerSize
	for p+tb <= size {
		t := Tag{Flags: uint32(be.Uint16(b[p+6:]))}
		t.Block = uint64(be.Uint32(b[p:]))
		if tb >= 12 {
			t.High = be.Uint32(b[p+8:])
		}
		if !f.is64() && !f.csumV3() {
			t.High = 0
		}
		if f.is64() {
			t.Block |= uint64(t.High) << 32
		}
		if f.csumV3() {
			t.Flags = be.Uint32(b[p+4:])
			t.Checksum = be.Uint32(b[p+12:])
		} else {
			t.Checksum = uint32(be.Uint16(b[p+4:]))
			if tb == 14 || tb == 10 {
				t.Pad = be.Uint16(b[p+tb-2:])
			}
		}
		p += tb
		if t.Flags&FlagSameUUID == 0 {
			if p+16 > len(b) {
				// count_tags still counts this tag; its UUID is cut short.
				copy(t.UUID[:], b[p:])
				d.Tags = append(d.Tags, t)
				d.TruncatedUUID = true
				d.Rest = []byte{}
				return d, nil
			}
			copy(t.UUID[:], b[p:p+16])
			p += 16
		}
		d.Tags = append(d.Tags, t)
		if t.Flags&FlagLastTag != 0 {
			break
		}
	}
	d.Rest = append([]byte{}, b[p:]...)
	return d, nil
}

// Encode writes the descriptor into b (one block). With Rest nil the rest of
// the block is zeroed and, with csum v2/v3, the tail checksum set.
func (d *Descriptor) Encode(f Format, b []byte) error {
	if len(b) != f.BlockSize {
		return fmt.Errorf("journal: descriptor buffer %d bytes, block size %d: %w", len(b), f.BlockSize, ErrInvalid)
	}
	Header{Magic, BlockTypeDescriptor, d.Sequence}.encode(b)
	tb := f.TagBytes()
	p := headerSize
	for _, t := range d.Tags {
		need := tb
		if t.Flags&FlagSameUUID == 0 && !d.TruncatedUUID {
			need += 16
		}
		if p+need > len(b) {
			return fmt.Errorf("journal: %d tags do not fit a descriptor: %w", len(d.Tags), ErrInvalid)
		}
		be.PutUint32(b[p:], uint32(t.Block))
		high := t.High
		if f.is64() {
			high = uint32(t.Block >> 32)
		}
		if f.csumV3() {
			be.PutUint32(b[p+4:], t.Flags)
			be.PutUint32(b[p+8:], high)
			be.PutUint32(b[p+12:], t.Checksum)
		} else {
			be.PutUint16(b[p+4:], uint16(t.Checksum))
			be.PutUint16(b[p+6:], uint16(t.Flags))
			if tb >= 12 {
				be.PutUint32(b[p+8:], high)
			}
			if tb == 14 || tb == 10 {
				be.PutUint16(b[p+tb-2:], t.Pad)
			}
		}
		p += tb
		if t.Flags&FlagSameUUID == 0 {
			if d.TruncatedUUID && p+16 > len(b) {
				copy(b[p:], t.UUID[:])
				return nil
			}
			copy(b[p:p+16], t.UUID[:])
			p += 16
		}
	}
	if d.Rest != nil {
		if p+len(d.Rest) != len(b) {
			return fmt.Errorf("journal: descriptor Rest is %d bytes, %d left: %w", len(d.Rest), len(b)-p, ErrInvalid)
		}
		copy(b[p:], d.Rest)
		return nil
	}
	if p > len(b)-f.tailSize() {
		return fmt.Errorf("journal: descriptor tags overlap the tail: %w", ErrInvalid)
	}
	clear(b[p:])
	if f.csumV2or3() {
		be.PutUint32(b[len(b)-tailSize:], f.blockTailCsum(b))
	}
	return nil
}

// TagsPerDescriptor returns how many tags (all but the first with
// FlagSameUUID) fit one descriptor block.
func (f Format) TagsPerDescriptor() int {
	space := f.BlockSize - headerSize - f.tailSize() - 16
	return space / f.TagBytes()
}

// Commit mirrors struct commit_header, the JBD2_COMMIT_BLOCK.
type Commit struct {
	Sequence   uint32
	ChksumType uint8     // h_chksum_type
	ChksumSize uint8     // h_chksum_size
	Padding    [2]byte   // h_padding
	Chksum     [8]uint32 // h_chksum[JBD2_CHECKSUM_BYTES]
	Sec        uint64    // h_commit_sec
	Nsec       uint32    // h_commit_nsec
	Rest       []byte    // bytes 60..blocksize verbatim when decoded
}

// DecodeCommit parses a commit block; it does not verify checksums.
func DecodeCommit(b []byte) (*Commit, error) {
	if len(b) < commitHdrSize {
		return nil, errs.Corruptf("journal commit block", 0, -1, "short buffer (%d bytes)", len(b))
	}
	h := decodeHeader(b)
	if h.Magic != Magic || h.BlockType != BlockTypeCommit {
		return nil, errs.Corruptf("journal commit block", 0, 0, "bad header magic %#x type %d", h.Magic, h.BlockType)
	}
	c := &Commit{Sequence: h.Sequence, ChksumType: b[12], ChksumSize: b[13]}
	copy(c.Padding[:], b[14:16])
	for i := range c.Chksum {
		c.Chksum[i] = be.Uint32(b[16+4*i:])
	}
	c.Sec = be.Uint64(b[48:])
	c.Nsec = be.Uint32(b[56:])
	c.Rest = append([]byte{}, b[commitHdrSize:]...)
	return c, nil
}

// Encode writes the commit block into b. With Rest nil the rest is zeroed
// and, with csum v2/v3, h_chksum[0] is set to the block checksum
// (jbd2_commit_block_csum_set; type and size are left as given, 0 for v2/v3).
func (c *Commit) Encode(f Format, b []byte) {
	Header{Magic, BlockTypeCommit, c.Sequence}.encode(b)
	b[12], b[13] = c.ChksumType, c.ChksumSize
	copy(b[14:16], c.Padding[:])
	for i, v := range c.Chksum {
		be.PutUint32(b[16+4*i:], v)
	}
	be.PutUint64(b[48:], c.Sec)
	be.PutUint32(b[56:], c.Nsec)
	if c.Rest != nil {
		copy(b[commitHdrSize:], c.Rest)
		return
	}
	clear(b[commitHdrSize:])
	if f.csumV2or3() {
		be.PutUint32(b[16:], 0)
		be.PutUint32(b[16:], f.commitCsum(b))
	}
}

// Revoke mirrors a JBD2_REVOKE_BLOCK: jbd2_journal_revoke_header_t (header +
// r_count, the bytes used including the 16-byte header) then 4- or 8-byte
// big-endian block numbers, then the tail checksum with csum v2/v3.
type Revoke struct {
	Sequence uint32
	Count    uint32 // r_count as stored
	Blocks   []uint64
	Rest     []byte // bytes from max(r_count,16) to the end, verbatim when decoded
}

// DecodeRevoke parses a revoke block as scan_revoke_records does: r_count
// larger than the block (less the tail) is corrupt (the kernel's -EINVAL).
func DecodeRevoke(f Format, b []byte) (*Revoke, error) {
	if len(b) != f.BlockSize || len(b) < revokeHdrSize+tailSize {
		return nil, errs.Corruptf("journal revoke block", 0, -1, "buffer %d bytes, block size %d", len(b), f.BlockSize)
	}
	h := decodeHeader(b)
	if h.Magic != Magic || h.BlockType != BlockTypeRevoke {
		return nil, errs.Corruptf("journal revoke block", 0, 0, "bad header magic %#x type %d", h.Magic, h.BlockType)
	}
	r := &Revoke{Sequence: h.Sequence, Count: be.Uint32(b[12:])}
	if r.Count > uint32(len(b)-f.tailSize()) {
		return nil, errs.Corruptf("journal revoke block", 0, 12, "r_count %d exceeds the block", r.Count)
	}
	rl := 4
	if f.is64() {
		rl = 8
	}
	off, maxOff := revokeHdrSize, int(r.Count)
	for off+rl <= maxOff {
		if rl == 4 {
			r.Blocks = append(r.Blocks, uint64(be.Uint32(b[off:])))
		} else {
			r.Blocks = append(r.Blocks, be.Uint64(b[off:]))
		}
		off += rl
	}
	r.Rest = append([]byte{}, b[off:]...)
	return r, nil
}

// RevokesPerBlock returns how many records fit one revoke block.
func (f Format) RevokesPerBlock() int {
	rl := 4
	if f.is64() {
		rl = 8
	}
	return (f.BlockSize - revokeHdrSize - f.tailSize()) / rl
}

// Encode writes the revoke block into b. With Rest nil, Count is recomputed
// from Blocks, the rest zeroed and the tail checksum set.
func (r *Revoke) Encode(f Format, b []byte) error {
	rl := 4
	if f.is64() {
		rl = 8
	}
	Header{Magic, BlockTypeRevoke, r.Sequence}.encode(b)
	off := revokeHdrSize
	if r.Rest == nil {
		if len(r.Blocks) > f.RevokesPerBlock() {
			return fmt.Errorf("journal: %d revoke records do not fit a block: %w", len(r.Blocks), ErrInvalid)
		}
		r.Count = uint32(revokeHdrSize + rl*len(r.Blocks))
	}
	be.PutUint32(b[12:], r.Count)
	for _, blk := range r.Blocks {
		if rl == 4 {
			be.PutUint32(b[off:], uint32(blk))
		} else {
			be.PutUint64(b[off:], blk)
		}
		off += rl
	}
	if r.Rest != nil {
		if off+len(r.Rest) != len(b) {
			return fmt.Errorf("journal: revoke Rest is %d bytes, %d left: %w", len(r.Rest), len(b)-off, ErrInvalid)
		}
		copy(b[off:], r.Rest)
		return nil
	}
	clear(b[off:])
	if f.csumV2or3() {
		be.PutUint32(b[len(b)-tailSize:], f.blockTailCsum(b))
	}
	return nil
}

// crc32BE is the kernel's crc32_be(seed, p): MSB-first CRC-32 with
// polynomial 0x04C11DB7 and no inversion, used by the v1 commit checksum
// (FeatureCompatChecksum).
func crc32BE(crc uint32, p []byte) uint32 {
	for _, c := range p {
		crc = crc<<8 ^ crc32BETable[byte(crc>>24)^c]
	}
	return crc
}

var crc32BETable = func() (t [256]uint32) {
	for i := range t {
		c := uint32(i) << 24
		for range 8 {
			if c&0x80000000 != 0 {
				c = c<<1 ^ 0x04C11DB7
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return
}()
