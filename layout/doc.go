// Package layout encodes and decodes ext4's on-disk structures and computes
// the checksums ext4 keeps on them. It does no I/O: callers read the bytes
// and hand them over.
//
// Everything on disk is little-endian. Each type names its kernel twin and
// is decoded field by field at the offsets of the kernel's struct; the raw
// bytes are kept so that fields ext4io does not model survive a
// decode/encode round trip unchanged.
//
// Filesystem layout (block size B, first data block 1 when B = 1024):
//
//	byte 0      1024          2048 (B=1K) / B
//	+-----------+-------------+---------------------+----------------+
//	| boot/pad  | superblock  | group descriptors   | reserved GDT   | ...
//	+-----------+-------------+---------------------+----------------+
//	then per group (flex_bg packs these for several groups together):
//	| block bitmap | inode bitmap | inode table | data blocks ...     |
//
// Superblock (struct ext4_super_block, 1024 bytes at byte 1024):
//
//	0x00 s_inodes_count       0x04 s_blocks_count_lo   0x14 s_first_data_block
//	0x18 s_log_block_size     0x20 s_blocks_per_group  0x28 s_inodes_per_group
//	0x38 s_magic (0xEF53)     0x58 s_inode_size        0x5C..0x67 features
//	0x68 s_uuid[16]           0xFE s_desc_size         0x150 s_blocks_count_hi
//	0x270 s_checksum_seed     0x3FC s_checksum (crc32c of bytes 0..0x3FB)
//
// Invariants checked on decode (named for tests):
//
//	L1 s_magic == 0xEF53 and 10 <= log block size + 10 <= 16
//	L2 blocks_per_group, inodes_per_group > 0 and fit one bitmap block
//	L3 s_inode_size is a power of two in [128, block size]
//	L4 with 64bit, 64 <= s_desc_size <= 1024, power of two
//	L5 the superblock checksum matches when metadata_csum is set
//	L6 every group descriptor's table locations lie inside the filesystem
//	L7 a used directory entry's name is not empty, holds no '/' or NUL, and is
//	   "." or ".." exactly in the first two slots of a directory's block 0
//	   (DirBlock, CheckDirName)
//
// Extended attributes (in-inode and block formats, hashes, checksum;
// invariants X1-X4) are drawn in the source beside the Xattr constants
// (XattrMagic), POSIX ACL forms beside ACLEntry, inline data and inline
// directories beside InlineDirParentLen.
//
// Orphan file blocks (slots, magic and checksum; invariant OB1) are drawn
// in orphan.go, htree index blocks in htree.go.
//
// Fast-commit tags (the records ext4 writes to the jbd2 fast-commit area)
// are drawn beside the FCTag constants, with the invariants FC1, FC2 of a
// valid fast commit that ScanFastCommits checks.
package layout

import "github.com/ext4io/ext4io/internal/errs"

// Sentinel errors re-exported from internal/errs.
var (
	ErrCorrupt     = errs.ErrCorrupt
	ErrUnsupported = errs.ErrUnsupported
)
