package layout

import (
	"encoding/binary"

	"github.com/ext4io/ext4io/internal/crc32c"
	"github.com/ext4io/ext4io/internal/errs"
)

// Hash-indexed (htree) directory blocks.
//
// dx_root (block 0 of an indexed directory):
//
//	0x00 "."  entry: inode, rec_len 12, name_len 1, type, ".\0\0\0"
//	0x0C ".." entry: inode, rec_len B-12, name_len 2, type, "..\0\0"
//	0x18 dx_root_info: reserved_zero u32, hash_version u8, info_length u8 (8),
//	     indirect_levels u8, unused_flags u8
//	0x20 dx_countlimit: limit u16, count u16, then block u32 of entry 0
//	0x28 dx_entry[count-1]: hash u32, block u32
//
// dx_node (interior index block): a fake entry (inode 0, rec_len B) then
// dx_countlimit at 0x08 and the entries. With metadata_csum, a dx_tail
// (reserved u32, checksum u32) follows the limit entries.
const (
	DxRootInfoOff  = 0x18
	DxRootCountOff = 0x20
	DxNodeCountOff = 0x08
	DxEntrySize    = 8
	DxTailSize     = 8
	// DxMaxLevels is the most indirect levels: 2 without large_dir, 3 with.
	DxMaxLevels         = 2
	DxMaxLevelsLargeDir = 3
)

// DxEntry mirrors struct dx_entry. The first entry of a node has no hash
// on disk (its slot holds the count and limit); it decodes with Hash 0.
type DxEntry struct {
	Hash  uint32
	Block uint32 // logical block within the directory
}

// DxRootInfo mirrors struct dx_root_info.
type DxRootInfo struct {
	HashVersion    uint8
	InfoLength     uint8
	IndirectLevels uint8
	UnusedFlags    uint8
}

// DxNode is a decoded index node (root or interior).
type DxNode struct {
	Limit, Count int
	Entries      []DxEntry
	CountOff     int // byte offset of dx_countlimit in the block
}

// DecodeDxRoot decodes the root info and index of an htree root block.
func DecodeDxRoot(b []byte, block uint64, ino uint32, csum bool, largeDir bool) (DxRootInfo, *DxNode, error) {
	bad := func(off int, format string, args ...any) error {
		return &errs.CorruptError{What: "htree root", Ino: ino, Block: block, Off: off, Msg: sprintf(format, args...)}
	}
	if len(b) < DxRootCountOff+DxEntrySize {
		return DxRootInfo{}, nil, bad(0, "block too small")
	}
	info := DxRootInfo{
		HashVersion:    b[DxRootInfoOff+4],
		InfoLength:     b[DxRootInfoOff+5],
		IndirectLevels: b[DxRootInfoOff+6],
		UnusedFlags:    b[DxRootInfoOff+7],
	}
	if binary.LittleEndian.Uint32(b[DxRootInfoOff:]) != 0 {
		return info, nil, bad(DxRootInfoOff, "reserved_zero is not zero")
	}
	if info.InfoLength != 8 {
		return info, nil, bad(DxRootInfoOff+5, "info_length %d != 8", info.InfoLength)
	}
	max := uint8(DxMaxLevels)
	if largeDir {
		max = DxMaxLevelsLargeDir
	}
	if info.IndirectLevels >= max {
		return info, nil, bad(DxRootInfoOff+6, "indirect_levels %d, max %d", info.IndirectLevels, max-1)
	}
	n, err := decodeDxEntries(b, DxRootCountOff, csum, block, ino)
	return info, n, err
}

// DecodeDxNode decodes an interior index block.
func DecodeDxNode(b []byte, block uint64, ino uint32, csum bool) (*DxNode, error) {
	if len(b) < DxNodeCountOff+DxEntrySize {
		return nil, &errs.CorruptError{What: "htree node", Ino: ino, Block: block, Off: 0, Msg: "block too small"}
	}
	return decodeDxEntries(b, DxNodeCountOff, csum, block, ino)
}

// DxLimit returns the number of entries an index node holds.
func DxLimit(blockSize, countOff int, csum bool) int {
	n := (blockSize - countOff) / DxEntrySize
	if csum {
		n -= DxTailSize / DxEntrySize
	}
	return n
}

func decodeDxEntries(b []byte, countOff int, csum bool, block uint64, ino uint32) (*DxNode, error) {
	le := binary.LittleEndian
	n := &DxNode{
		Limit:    int(le.Uint16(b[countOff:])),
		Count:    int(le.Uint16(b[countOff+2:])),
		CountOff: countOff,
	}
	if want := DxLimit(len(b), countOff, csum); n.Limit != want {
		return nil, &errs.CorruptError{What: "htree node", Ino: ino, Block: block, Off: countOff,
			Msg: sprintf("limit %d != %d", n.Limit, want)}
	}
	if n.Count == 0 || n.Count > n.Limit {
		return nil, &errs.CorruptError{What: "htree node", Ino: ino, Block: block, Off: countOff + 2,
			Msg: sprintf("count %d, limit %d", n.Count, n.Limit)}
	}
	n.Entries = make([]DxEntry, n.Count)
	for i := range n.Entries {
		off := countOff + i*DxEntrySize
		if i > 0 {
			n.Entries[i].Hash = le.Uint32(b[off:])
		}
		n.Entries[i].Block = le.Uint32(b[off+4:])
	}
	return n, nil
}

// PutDxEntries writes count, limit and entries at countOff.
func PutDxEntries(b []byte, countOff, limit int, entries []DxEntry) {
	le := binary.LittleEndian
	for i, e := range entries {
		off := countOff + i*DxEntrySize
		if i > 0 {
			le.PutUint32(b[off:], e.Hash)
		}
		le.PutUint32(b[off+4:], e.Block)
	}
	le.PutUint16(b[countOff:], uint16(limit))
	le.PutUint16(b[countOff+2:], uint16(len(entries)))
}

// DxChecksum computes an index block's checksum as ext4_dx_csum does: over
// the block up to the last used entry, then the tail's reserved word and
// four zero bytes. The tail sits right after the limit entries.
func DxChecksum(inodeSeed uint32, b []byte, countOff, count, limit int) uint32 {
	size := countOff + count*DxEntrySize
	tail := countOff + limit*DxEntrySize
	c := crc32c.Kernel(inodeSeed, b[:size])
	c = crc32c.Kernel(c, b[tail:tail+4])
	return crc32c.Kernel(c, []byte{0, 0, 0, 0})
}

// VerifyDx checks an index block's dx_tail checksum.
func VerifyDx(inodeSeed uint32, b []byte, n *DxNode, block uint64, ino uint32) error {
	tail := n.CountOff + n.Limit*DxEntrySize
	if tail+DxTailSize > len(b) {
		return &errs.CorruptError{What: "htree node", Ino: ino, Block: block, Off: tail, Msg: "no room for dx_tail"}
	}
	stored := binary.LittleEndian.Uint32(b[tail+4:])
	if want := DxChecksum(inodeSeed, b, n.CountOff, n.Count, n.Limit); stored != want {
		return &errs.CorruptError{What: "htree node", Ino: ino, Block: block, Off: tail + 4,
			Msg: sprintf("checksum %#x != computed %#x", stored, want)}
	}
	return nil
}

// SetDxTail writes the dx_tail checksum of an index block.
func SetDxTail(inodeSeed uint32, b []byte, countOff, count, limit int) {
	tail := countOff + limit*DxEntrySize
	binary.LittleEndian.PutUint32(b[tail:], 0)
	binary.LittleEndian.PutUint32(b[tail+4:], DxChecksum(inodeSeed, b, countOff, count, limit))
}

// DxLookup returns the index of the entry whose range holds hash: the last
// entry whose hash is <= the given hash (entry 0 covers everything below
// entry 1).
func (n *DxNode) DxLookup(hash uint32) int {
	lo, hi := 1, len(n.Entries)-1
	for lo <= hi {
		m := (lo + hi) / 2
		if n.Entries[m].Hash > hash {
			hi = m - 1
		} else {
			lo = m + 1
		}
	}
	return lo - 1
}

// PutDxRootInfo writes dx_root_info (reserved_zero 0) into a root block.
func PutDxRootInfo(b []byte, info DxRootInfo) {
	binary.LittleEndian.PutUint32(b[DxRootInfoOff:], 0)
	b[DxRootInfoOff+4] = info.HashVersion
	b[DxRootInfoOff+5] = info.InfoLength
	b[DxRootInfoOff+6] = info.IndirectLevels
	b[DxRootInfoOff+7] = info.UnusedFlags
}

// DxCountOff returns where an index block's dx_countlimit starts: at
// DxNodeCountOff in a node, right after dx_root_info (by its info_length)
// in the root.
func DxCountOff(b []byte, root bool) int {
	if !root {
		return DxNodeCountOff
	}
	if len(b) <= DxRootInfoOff+5 {
		return DxRootCountOff
	}
	return DxRootInfoOff + int(b[DxRootInfoOff+5])
}

// DxCountLimit reads the limit and count of the dx_countlimit at countOff;
// both are 0 when the block is too short to hold it.
func DxCountLimit(b []byte, countOff int) (limit, count int) {
	if countOff < 0 || countOff+4 > len(b) {
		return 0, 0
	}
	le := binary.LittleEndian
	return int(le.Uint16(b[countOff:])), int(le.Uint16(b[countOff+2:]))
}

// NewDxNodeBlock returns an interior index block of blockSize bytes: the
// fake entry (inode 0, rec_len spanning the block), then entries. With
// csum the limit leaves room for the dx_tail, which the caller sets.
func NewDxNodeBlock(blockSize int, csum bool, entries []DxEntry) ([]byte, *DxNode) {
	b := make([]byte, blockSize)
	binary.LittleEndian.PutUint16(b[4:], EncodeRecLen(blockSize, blockSize))
	n := &DxNode{Limit: DxLimit(blockSize, DxNodeCountOff, csum), CountOff: DxNodeCountOff,
		Entries: append([]DxEntry(nil), entries...)}
	n.Count = len(n.Entries)
	PutDxEntries(b, n.CountOff, n.Limit, n.Entries)
	return b, n
}

// MakeDxRoot converts a linear directory's full block 0 (b0) into an
// htree root and a leaf, as make_indexed_dir does: the entries after ".."
// move to leaf (to become logical block 1), the last one spanning the
// rest of it; root keeps "." and "..", ".." now spanning the block, then
// dx_root_info with hashVersion and one dx entry pointing at block 1.
// hasTail says blocks end in a checksum tail (metadata_csum); the caller
// sets the leaf's tail and the root's dx_tail. It returns nil blocks and
// no error when b0 does not start with "." and ".." records or holds
// nothing after them; block and ino name b0 in errors.
func MakeDxRoot(b0 []byte, block uint64, ino uint32, hasTail bool, hashVersion uint8) (root, leaf []byte, err error) {
	le := binary.LittleEndian
	bs := len(b0)
	end := bs
	if hasTail {
		end -= DirTailLen
	}
	if bs < DxRootCountOff+DxEntrySize || end < DxRootInfoOff {
		return nil, nil, nil
	}
	dotLen := DecodeRecLen(le.Uint16(b0[4:]), bs)
	if dotLen != DirRecLen(1) || b0[6] != 1 || b0[dotNameOff] != '.' || b0[dotDotNameLen] != 2 || string(b0[dotDotNameOff:dotDotNameOff+2]) != ".." {
		return nil, nil, nil
	}
	dotdotLen := DecodeRecLen(le.Uint16(b0[dotDotOff+4:]), bs)
	start := dotDotOff + dotdotLen
	if start >= end {
		return nil, nil, nil
	}
	leaf = make([]byte, bs)
	copy(leaf, b0[start:end])
	last := 0
	for off := 0; off < end-start; {
		rl := DecodeRecLen(le.Uint16(leaf[off+4:]), bs)
		if rl < DirRecLen(1) || off+rl > end-start {
			return nil, nil, &errs.CorruptError{What: "directory entry", Ino: ino, Block: block, Off: start + off, Msg: "bad rec_len while indexing"}
		}
		last = off
		off += rl
	}
	le.PutUint16(leaf[last+4:], EncodeRecLen(end-last, bs))
	root = make([]byte, bs)
	copy(root, b0[:DxRootInfoOff])
	le.PutUint16(root[dotDotOff+4:], EncodeRecLen(bs-DirRecLen(1), bs))
	PutDxRootInfo(root, DxRootInfo{HashVersion: hashVersion, InfoLength: 8})
	PutDxEntries(root, DxRootCountOff, DxLimit(bs, DxRootCountOff, hasTail), []DxEntry{{Block: 1}})
	return root, leaf, nil
}
