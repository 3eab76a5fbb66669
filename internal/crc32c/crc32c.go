// Package crc32c computes CRC-32C (Castagnoli) exactly as the ext4 and jbd2
// on-disk formats use it.
//
// The kernel's crc32c(seed, p) has no pre- or post-inversion of its own: the
// caller passes the running value. In Go's terms that is
//
//	^crc32.Update(^seed, castagnoli, p)
//
// which is what Kernel returns. The seeds ext4 uses:
//
//   - superblock s_checksum: Kernel(^0, sb[0:0x3FC])
//   - filesystem seed s_csum_seed: Kernel(^0, s_uuid), or s_checksum_seed when
//     the metadata_csum_seed feature is set
//   - inode seed: Kernel(Kernel(fsSeed, le32(ino)), le32(i_generation)); extent
//     tree blocks and directory blocks are checksummed from the inode seed
//   - group descriptors, bitmaps: from fsSeed with the group number mixed in
//
// jbd2 (checksum v2/v3) uses Kernel(^0, j_uuid) as its seed.
package crc32c

import "hash/crc32"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Kernel returns the kernel's crc32c(seed, p).
func Kernel(seed uint32, p []byte) uint32 {
	return ^crc32.Update(^seed, castagnoli, p)
}

// KernelU32 returns Kernel(seed, le32(v)) without allocating.
// It runs the table bytewise: a slice passed to crc32.Update escapes to
// the heap.
func KernelU32(seed, v uint32) uint32 {
	crc := seed
	for range 4 {
		crc = castagnoli[byte(crc)^byte(v)] ^ crc>>8
		v >>= 8
	}
	return crc
}
