package layout

import (
	"encoding/binary"

	"github.com/ext4io/ext4io/internal/crc32c"
	"github.com/ext4io/ext4io/internal/errs"
)

// Orphan file blocks (orphan_file, compat 0x1000): the blocks of inode
// s_orphan_file_inum, each
//
//	0x00  u32 inode numbers[(B-8)/4]   0 = free slot
//	B-8   ob_magic    u32 = 0x0b10ca04 (struct ext4_orphan_block_tail)
//	B-4   ob_checksum u32 = crc32c(inode seed of the orphan file,
//	                        le64 physical block number ++ the slots)
//
// Invariant OB1: every block carries the magic, and with metadata_csum its
// checksum is current.

// Part of the on-disk format; must not change.
const (
	OrphanBlockMagic = 0x0b10ca04 // ob_magic
	OrphanTailLen    = 8          // struct ext4_orphan_block_tail
)

// OrphanSlots returns the number of inode slots in an orphan file block of
// blockSize bytes.
func OrphanSlots(blockSize int) int { return max(blockSize-OrphanTailLen, 0) / 4 }

// OrphanSlot returns the inode number in slot i of an orphan file block.
func OrphanSlot(b []byte, i int) uint32 { return binary.LittleEndian.Uint32(b[4*i:]) }

// SetOrphanSlot puts inode number ino into slot i of an orphan file block.
func SetOrphanSlot(b []byte, i int, ino uint32) { binary.LittleEndian.PutUint32(b[4*i:], ino) }

// OrphanBlockChecksum returns the checksum of orphan file block b at
// physical block pblk, as ext4_orphan_file_block_csum computes it.
func OrphanBlockChecksum(inodeSeed uint32, pblk uint64, b []byte) uint32 {
	var le [8]byte
	binary.LittleEndian.PutUint64(le[:], pblk)
	c := crc32c.Kernel(inodeSeed, le[:])
	return crc32c.Kernel(c, b[:OrphanSlots(len(b))*4])
}

// SetOrphanBlockChecksum writes ob_checksum of orphan file block b.
func SetOrphanBlockChecksum(inodeSeed uint32, pblk uint64, b []byte) {
	binary.LittleEndian.PutUint32(b[len(b)-4:], OrphanBlockChecksum(inodeSeed, pblk, b))
}

// InitOrphanBlock makes b an empty orphan file block: every slot free,
// the magic, and with csum the checksum.
func InitOrphanBlock(b []byte, inodeSeed uint32, pblk uint64, csum bool) {
	clear(b)
	binary.LittleEndian.PutUint32(b[len(b)-OrphanTailLen:], OrphanBlockMagic)
	if csum {
		SetOrphanBlockChecksum(inodeSeed, pblk, b)
	}
}

// VerifyOrphanBlock checks an orphan file block's magic and, with csum,
// its checksum (invariant OB1). ino is the orphan file's inode, for errors.
func VerifyOrphanBlock(inodeSeed uint32, b []byte, pblk uint64, ino uint32, csum bool) error {
	bs := len(b)
	if bs < OrphanTailLen {
		return &errs.CorruptError{What: "orphan file block", Ino: ino, Block: pblk, Off: 0, Msg: "too short for its tail"}
	}
	le := binary.LittleEndian
	if le.Uint32(b[bs-8:]) != OrphanBlockMagic {
		return &errs.CorruptError{What: "orphan file block", Ino: ino, Block: pblk, Off: bs - 8, Msg: "bad magic"}
	}
	if !csum {
		return nil
	}
	if got, want := le.Uint32(b[bs-4:]), OrphanBlockChecksum(inodeSeed, pblk, b); got != want {
		return &errs.CorruptError{What: "orphan file block", Ino: ino, Block: pblk, Off: bs - 4, Msg: sprintf("checksum %#x != computed %#x", got, want)}
	}
	return nil
}
