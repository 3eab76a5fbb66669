// Package extent reads and changes ext4 extent trees (and maps the block
// lists of old ext2/ext3 files) the way the Linux kernel does.
//
// An inode's extent tree starts in i_block (60 bytes): a 12-byte header and
// four 12-byte entries. Deeper nodes are whole filesystem blocks:
//
//	tree node (root: i_block, 60 bytes; other nodes: one block)
//	+0   ext4_extent_header   eh_magic u16 (0xF30A) | eh_entries u16 | eh_max u16
//	                          | eh_depth u16 | eh_generation u32
//	+12  entry[0]             depth 0: ext4_extent     depth > 0: ext4_extent_idx
//	+24  entry[1]
//	...
//	+12+12*eh_max             ext4_extent_tail: et_checksum u32 (blocks only)
//
//	ext4_extent      +0 ee_block u32 | +4 ee_len u16 | +6 ee_start_hi u16 | +8 ee_start_lo u32
//	ext4_extent_idx  +0 ei_block u32 | +4 ei_leaf_lo u32 | +8 ei_leaf_hi u16 | +10 ei_unused u16
//
// ee_len <= 32768 is a written extent of ee_len blocks; ee_len > 32768 is an
// unwritten (preallocated) extent of ee_len-32768 blocks. et_checksum, present
// when metadata_csum is on, is crc32c(inode seed, block[0 : 12+12*eh_max]).
//
// Invariants of every tree this package writes (and checks when reading):
//   - I1 magic: eh_magic == 0xF30A; eh_entries <= eh_max; eh_max <= 4 in the
//     root and <= (blockSize-12)/12 in a block.
//   - I2 depth: a child's eh_depth is its parent's minus one; depth <= 5;
//     index nodes are never empty (only the root leaf may be).
//   - I3 order: keys strictly increase within a node; extents do not overlap;
//     every key in a subtree lies in [parent key, next parent key).
//   - I4 keys: an index key equals the first key of its child (reading
//     accepts key <= first key, as the kernel's lookup does).
//   - I5 ranges: 1 <= Len <= 32768 (32767 unwritten); extents end at or
//     before logical block 2^32-1; physical blocks (of extents and of
//     child tree blocks) lie in [FirstDataBlock, BlocksCount) and outside
//     Config.SystemZone.
//   - I6 checksum: with metadata_csum, every tree block carries a valid tail.
package extent

import (
	"encoding/binary"

	"github.com/ext4io/ext4io/internal/crc32c"
	"github.com/ext4io/ext4io/internal/errs"
)

// On-disk constants. All are part of the on-disk format.
const (
	Magic      = 0xF30A // eh_magic
	HeaderSize = 12     // sizeof(struct ext4_extent_header)
	EntrySize  = 12     // sizeof(struct ext4_extent) == sizeof(struct ext4_extent_idx)
	TailSize   = 4      // sizeof(struct ext4_extent_tail)
	RootSize   = 60     // sizeof(i_block)
	RootMax    = 4      // (RootSize-HeaderSize)/EntrySize: entries in the in-inode root
	// MaxDepth is the deepest tree accepted or built (EXT4_MAX_EXTENT_DEPTH).
	MaxDepth = 5
	// MaxWrittenLen and MaxUnwrittenLen are the longest extents
	// (EXT_INIT_MAX_LEN and EXT_UNWRITTEN_MAX_LEN).
	MaxWrittenLen   = 32768
	MaxUnwrittenLen = 32767
	// EndLblk is EXT_MAX_BLOCKS: the first logical block no extent may
	// cover. Extents lie in [0, EndLblk).
	EndLblk = 0xFFFFFFFF
	// maxPblk is one past the largest 48-bit physical block.
	maxPblk = 1 << 48
)

// Sentinel errors, shared with every ext4io package.
var (
	ErrCorrupt = errs.ErrCorrupt
	ErrNoSpace = errs.ErrNoSpace
	ErrInvalid = errs.ErrInvalid
	ErrIO      = errs.ErrIO
)

// Header mirrors struct ext4_extent_header.
type Header struct {
	Magic      uint16 // eh_magic, Magic when valid
	Entries    uint16 // eh_entries: entries in use
	Max        uint16 // eh_max: capacity of the node
	Depth      uint16 // eh_depth: 0 for a leaf
	Generation uint32 // eh_generation
}

// DecodeHeader decodes the header at b[0:12]. b must hold 12 bytes.
func DecodeHeader(b []byte) Header {
	_ = b[11]
	return Header{
		Magic:      binary.LittleEndian.Uint16(b[0:]),
		Entries:    binary.LittleEndian.Uint16(b[2:]),
		Max:        binary.LittleEndian.Uint16(b[4:]),
		Depth:      binary.LittleEndian.Uint16(b[6:]),
		Generation: binary.LittleEndian.Uint32(b[8:]),
	}
}

// Encode writes h to b[0:12].
func (h Header) Encode(b []byte) {
	_ = b[11]
	binary.LittleEndian.PutUint16(b[0:], h.Magic)
	binary.LittleEndian.PutUint16(b[2:], h.Entries)
	binary.LittleEndian.PutUint16(b[4:], h.Max)
	binary.LittleEndian.PutUint16(b[6:], h.Depth)
	binary.LittleEndian.PutUint32(b[8:], h.Generation)
}

// Extent mirrors struct ext4_extent, decoded: the unwritten flag is split
// out of ee_len, so Len is always the number of blocks mapped.
type Extent struct {
	Lblk      uint32 // ee_block: first logical block
	Len       uint32 // blocks mapped (ee_len without the unwritten bias)
	Pblk      uint64 // ee_start_hi<<32 | ee_start_lo: first physical block
	Unwritten bool   // ee_len > 32768
}

// End returns one past the last logical block of e.
func (e Extent) End() uint64 { return uint64(e.Lblk) + uint64(e.Len) }

// DecodeExtent decodes the ext4_extent at b[0:12].
func DecodeExtent(b []byte) Extent {
	_ = b[11]
	l := uint32(binary.LittleEndian.Uint16(b[4:]))
	e := Extent{
		Lblk: binary.LittleEndian.Uint32(b[0:]),
		Pblk: uint64(binary.LittleEndian.Uint16(b[6:]))<<32 | uint64(binary.LittleEndian.Uint32(b[8:])),
		Len:  l,
	}
	if l > MaxWrittenLen {
		e.Len = l - MaxWrittenLen
		e.Unwritten = true
	}
	return e
}

// Encode writes e to b[0:12] as an ext4_extent. It fails with ErrInvalid
// when e has no encoding: Len > 32768 (32767 unwritten), an unwritten
// extent of length 0, or Pblk >= 2^48. (A written Len of 0 encodes, so that
// every 12 bytes decode and re-encode identically; trees reject it.)
func (e Extent) Encode(b []byte) error {
	_ = b[11]
	l := e.Len
	if e.Unwritten {
		if l == 0 || l > MaxUnwrittenLen {
			return invalidf("unwritten extent length %d out of range", l)
		}
		l += MaxWrittenLen
	} else if l > MaxWrittenLen {
		return invalidf("extent length %d > %d", l, MaxWrittenLen)
	}
	if e.Pblk >= maxPblk {
		return invalidf("physical block %d beyond 48 bits", e.Pblk)
	}
	binary.LittleEndian.PutUint32(b[0:], e.Lblk)
	binary.LittleEndian.PutUint16(b[4:], uint16(l))
	binary.LittleEndian.PutUint16(b[6:], uint16(e.Pblk>>32))
	binary.LittleEndian.PutUint32(b[8:], uint32(e.Pblk))
	return nil
}

// Index mirrors struct ext4_extent_idx.
type Index struct {
	Lblk   uint32 // ei_block: first logical block covered by the child
	Pblk   uint64 // ei_leaf_hi<<32 | ei_leaf_lo: the child node's block
	Unused uint16 // ei_unused, kept so that decoding round-trips
}

// DecodeIndex decodes the ext4_extent_idx at b[0:12].
func DecodeIndex(b []byte) Index {
	_ = b[11]
	return Index{
		Lblk:   binary.LittleEndian.Uint32(b[0:]),
		Pblk:   uint64(binary.LittleEndian.Uint16(b[8:]))<<32 | uint64(binary.LittleEndian.Uint32(b[4:])),
		Unused: binary.LittleEndian.Uint16(b[10:]),
	}
}

// Encode writes x to b[0:12]. It fails with ErrInvalid when Pblk >= 2^48.
func (x Index) Encode(b []byte) error {
	_ = b[11]
	if x.Pblk >= maxPblk {
		return invalidf("index block %d beyond 48 bits", x.Pblk)
	}
	binary.LittleEndian.PutUint32(b[0:], x.Lblk)
	binary.LittleEndian.PutUint32(b[4:], uint32(x.Pblk))
	binary.LittleEndian.PutUint16(b[8:], uint16(x.Pblk>>32))
	binary.LittleEndian.PutUint16(b[10:], x.Unused)
	return nil
}

// InodeSeed returns the checksum seed of inode ino with generation gen:
// crc32c(crc32c(fsSeed, le32 ino), le32 gen).
func InodeSeed(fsSeed, ino, gen uint32) uint32 {
	return crc32c.KernelU32(crc32c.KernelU32(fsSeed, ino), gen)
}

// TailOffset returns where struct ext4_extent_tail sits in a block whose
// header has eh_max == max.
func TailOffset(max int) int { return HeaderSize + EntrySize*max }

// BlockChecksum returns the ext4_extent_tail checksum of tree block b (whose
// eh_max is read from b) under inode seed seed. It returns false when the
// tail does not fit in b.
func BlockChecksum(b []byte, seed uint32) (uint32, bool) {
	if len(b) < HeaderSize {
		return 0, false
	}
	off := TailOffset(int(binary.LittleEndian.Uint16(b[4:])))
	if off+TailSize > len(b) {
		return 0, false
	}
	return crc32c.Kernel(seed, b[:off]), true
}

// SetBlockChecksum stores the tail checksum of tree block b. It returns
// false when the tail does not fit in b.
func SetBlockChecksum(b []byte, seed uint32) bool {
	c, ok := BlockChecksum(b, seed)
	if ok {
		binary.LittleEndian.PutUint32(b[TailOffset(int(binary.LittleEndian.Uint16(b[4:]))):], c)
	}
	return ok
}

// VerifyBlockChecksum reports whether tree block b carries a valid tail.
func VerifyBlockChecksum(b []byte, seed uint32) bool {
	c, ok := BlockChecksum(b, seed)
	return ok && binary.LittleEndian.Uint32(b[TailOffset(int(binary.LittleEndian.Uint16(b[4:]))):]) == c
}

// EmptyRoot returns the i_block of an inode with an empty extent tree, as
// ext4_ext_tree_init writes it.
func EmptyRoot() [RootSize]byte {
	var r [RootSize]byte
	Header{Magic: Magic, Max: RootMax}.Encode(r[:])
	return r
}
