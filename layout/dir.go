package layout

import (
	"encoding/binary"

	"github.com/ext4io/ext4io/internal/crc32c"
	"github.com/ext4io/ext4io/internal/errs"
)

// Directory entry file types (ext4_dir_entry_2.file_type). Part of the
// on-disk format.
const (
	FtUnknown = 0
	FtRegFile = 1
	FtDir     = 2
	FtChrdev  = 3
	FtBlkdev  = 4
	FtFifo    = 5
	FtSock    = 6
	FtSymlink = 7

	// FtDirCsum marks the fake entry holding a directory block's checksum
	// (struct ext4_dir_entry_tail).
	FtDirCsum = 0xDE

	DirEntryHeaderLen = 8   // inode, rec_len, name_len, file_type
	DirTailLen        = 12  // struct ext4_dir_entry_tail
	MaxNameLen        = 255 // EXT4_NAME_LEN
)

// DirEntry mirrors struct ext4_dir_entry_2 (the filetype form).
type DirEntry struct {
	Inode    uint32 // 0x0; 0 for an unused entry
	RecLen   int    // 0x4 (decoded: 64 KiB blocks encode it specially)
	NameLen  uint8  // 0x6
	FileType uint8  // 0x7 (the high byte of name_len without filetype)
	Name     []byte // 0x8, NameLen bytes (aliases the block)
	Off      int    // in-memory only: byte offset in the block
}

// DirRecLen returns the minimal record length for a name of n bytes.
func DirRecLen(n int) int { return (DirEntryHeaderLen + n + 3) &^ 3 }

// DecodeRecLen decodes rec_len as ext4_rec_len_from_disk does.
func DecodeRecLen(v uint16, blockSize int) int {
	l := int(v)
	if blockSize < 65536 {
		return l
	}
	if v == 65535 || v == 0 {
		return blockSize
	}
	return l&65532 | (l&3)<<16
}

// EncodeRecLen encodes a record length as ext4_rec_len_to_disk does.
func EncodeRecLen(l, blockSize int) uint16 {
	if blockSize < 65536 {
		return uint16(l)
	}
	if l == blockSize {
		if blockSize == 65536 {
			return 65535
		}
		return 0
	}
	return uint16(l&65532 | (l>>16)&3)
}

// DirBlock iterates over the entries of one linear directory block.
// It validates each record as ext4_check_dir_entry does, and the name of
// each used entry as e2fsck does (invariant L7): not empty, no '/' and no
// NUL, and "." and ".." only in their slots. Entries with Inode 0 (unused
// space) are yielded too, their names unchecked; callers skip them.
//
// hasTail says the block ends in a checksum tail (metadata_csum), which is
// not yielded. filetype says whether the high name_len byte is a file type.
// dots says the block starts with the "." and ".." slots (block 0 of a
// directory, linear or the root of a hash index): the first entry, if used,
// must be named "." and the second ".."; elsewhere neither name may appear.
func DirBlock(b []byte, block uint64, ino uint32, hasTail, filetype, dots bool, fn func(DirEntry) error) error {
	bs := len(b)
	end := bs
	if hasTail {
		end -= DirTailLen
	}
	le := binary.LittleEndian
	for off, slot := 0, 0; off < end; slot++ {
		if end-off < DirEntryHeaderLen {
			return badDirEntry(ino, block, off, "%d bytes left, too short for an entry", end-off)
		}
		h := b[off : off+DirEntryHeaderLen]
		e := DirEntry{
			Inode:   le.Uint32(h),
			RecLen:  DecodeRecLen(le.Uint16(h[4:]), bs),
			NameLen: h[6],
			Off:     off,
		}
		nameLen := int(e.NameLen)
		if filetype {
			e.FileType = h[7]
		} else {
			nameLen |= int(h[7]) << 8
		}
		switch {
		case e.RecLen < DirRecLen(1):
			return badDirEntry(ino, block, off, "rec_len %d too small", e.RecLen)
		case e.RecLen&3 != 0:
			return badDirEntry(ino, block, off, "rec_len %d not a multiple of 4", e.RecLen)
		case e.RecLen < DirRecLen(nameLen):
			return badDirEntry(ino, block, off, "rec_len %d too small for name_len %d", e.RecLen, nameLen)
		case off+e.RecLen > end:
			return badDirEntry(ino, block, off, "rec_len %d runs past the end of the block", e.RecLen)
		case nameLen > MaxNameLen:
			return badDirEntry(ino, block, off, "name_len %d", nameLen)
		}
		e.Name = b[off+DirEntryHeaderLen : off+DirEntryHeaderLen+nameLen]
		if e.Inode != 0 {
			// CheckDirName, with the common case (a name of three bytes
			// or more outside the dot slots) tested here.
			if nameLen > 2 && !(dots && slot < 2) {
				if hasSlashOrNUL(e.Name) {
					return badDirEntry(ino, block, off, "name %q holds '/' or NUL", e.Name)
				}
			} else if msg := CheckDirName(e.Name, dots && slot < 2, slot); msg != "" {
				return badDirEntry(ino, block, off, "%s", msg)
			}
		}
		if err := fn(e); err != nil {
			return err
		}
		off += e.RecLen
	}
	return nil
}

// badDirEntry is DirBlock's error for the entry at off.
func badDirEntry(ino uint32, block uint64, off int, format string, args ...any) error {
	return &errs.CorruptError{What: "directory entry", Ino: ino, Block: block, Off: off, Msg: sprintf(format, args...)}
}

// CheckDirName validates the name of a used directory entry (invariant
// D1) and returns what is wrong with it, or "" if nothing is. dotSlot says
// the entry is in slot 0 or 1 of a block that starts with "." and ".."
// (slot names which): there it must be "." (slot 0) or ".." (slot 1).
// Everywhere else "." and ".." are refused, as are empty names and names
// holding '/' or NUL.
func CheckDirName(name []byte, dotSlot bool, slot int) string {
	if dotSlot {
		if want := "..."[:slot+1]; string(name) != want {
			return sprintf("entry %d is %q, not %q", slot, name, want)
		}
		return ""
	}
	switch {
	case len(name) == 0:
		return "empty name"
	case name[0] == '.' && (len(name) == 1 || len(name) == 2 && name[1] == '.'):
		return sprintf("entry %q outside its slot", name)
	case hasSlashOrNUL(name):
		return sprintf("name %q holds '/' or NUL", name)
	}
	return ""
}

// hasSlashOrNUL reports whether name holds a '/' or a NUL byte. It tests
// eight bytes at a time: a word has a zero byte iff (x-0x01..01) &^ x has
// a high bit set (exact as a yes/no answer), and x ^ 0x2f..2f has one
// where x has a '/'.
func hasSlashOrNUL(name []byte) bool {
	const ones, highs, slashes = 0x0101010101010101, 0x8080808080808080, 0x2f2f2f2f2f2f2f2f
	zero := func(x uint64) bool { return (x-ones)&^x&highs != 0 }
	if len(name) < 8 {
		for _, c := range name {
			if c == '/' || c == 0 {
				return true
			}
		}
		return false
	}
	le := binary.LittleEndian
	for i := 0; i < len(name)-8; i += 8 {
		if x := le.Uint64(name[i:]); zero(x) || zero(x^slashes) {
			return true
		}
	}
	x := le.Uint64(name[len(name)-8:]) // the last 8, overlapping the words before
	return zero(x) || zero(x^slashes)
}

// PutDirEntry writes an entry at off with the given record length.
func PutDirEntry(b []byte, off int, ino uint32, recLen int, ft uint8, name []byte) {
	le := binary.LittleEndian
	le.PutUint32(b[off:], ino)
	le.PutUint16(b[off+4:], EncodeRecLen(recLen, len(b)))
	b[off+6] = uint8(len(name))
	b[off+7] = ft
	copy(b[off+DirEntryHeaderLen:], name)
}

// DirRecLenAt returns the decoded rec_len of the directory entry at off.
func DirRecLenAt(b []byte, off int) int {
	return DecodeRecLen(binary.LittleEndian.Uint16(b[off+4:]), len(b))
}

// SetDirRecLen rewrites the rec_len of the directory entry at off.
func SetDirRecLen(b []byte, off, l int) {
	binary.LittleEndian.PutUint16(b[off+4:], EncodeRecLen(l, len(b)))
}

// SetDirEntryInode rewrites the inode number of the directory entry at off
// (0 marks the entry unused).
func SetDirEntryInode(b []byte, off int, ino uint32) { binary.LittleEndian.PutUint32(b[off:], ino) }

// HasDirTail reports whether the block ends in a well-formed checksum tail
// (struct ext4_dir_entry_tail: inode 0, rec_len 12, name_len 0, type 0xDE).
func HasDirTail(b []byte) bool {
	t := b[len(b)-DirTailLen:]
	le := binary.LittleEndian
	return le.Uint32(t) == 0 && le.Uint16(t[4:]) == DirTailLen && t[6] == 0 && t[7] == FtDirCsum
}

// DirBlockChecksum returns the checksum of a linear directory block:
// crc32c(inode seed, block[0 : len-12]).
func DirBlockChecksum(inodeSeed uint32, b []byte) uint32 {
	return crc32c.Kernel(inodeSeed, b[:len(b)-DirTailLen])
}

// SetDirTail writes the checksum tail into the last 12 bytes of b.
func SetDirTail(inodeSeed uint32, b []byte) {
	t := b[len(b)-DirTailLen:]
	le := binary.LittleEndian
	le.PutUint32(t, 0)
	le.PutUint16(t[4:], DirTailLen)
	t[6], t[7] = 0, FtDirCsum
	le.PutUint32(t[8:], DirBlockChecksum(inodeSeed, b))
}

// VerifyDirBlock checks a linear directory block's checksum tail.
func VerifyDirBlock(inodeSeed uint32, b []byte, block uint64, ino uint32) error {
	if !HasDirTail(b) {
		return &errs.CorruptError{What: "directory block", Ino: ino, Block: block, Off: len(b) - DirTailLen, Msg: "missing checksum tail"}
	}
	stored := binary.LittleEndian.Uint32(b[len(b)-4:])
	if want := DirBlockChecksum(inodeSeed, b); stored != want {
		return &errs.CorruptError{What: "directory block", Ino: ino, Block: block, Off: len(b) - 4,
			Msg: sprintf("checksum %#x != computed %#x", stored, want)}
	}
	return nil
}

// IsDxNodeBlock reports whether b looks like an interior htree index block
// (dx_node): one unused entry (inode 0) whose record spans the block. An
// empty linear block without a checksum tail looks the same; both hold no
// names.
func IsDxNodeBlock(b []byte) bool {
	if len(b) < DirEntryHeaderLen {
		return false
	}
	le := binary.LittleEndian
	return le.Uint32(b) == 0 && DecodeRecLen(le.Uint16(b[4:]), len(b)) == len(b)
}

// DirEntryRoom returns how many bytes a new record could take from entry
// e (as DirBlock yields it): all of an unused record, the slack past the
// name of a used one.
func DirEntryRoom(e DirEntry) int {
	if e.Inode == 0 {
		return e.RecLen
	}
	return e.RecLen - DirRecLen(int(e.NameLen))
}

// InsertDirEntry puts a record for name into the record slot (as DirBlock
// yields it), as ext4_insert_dentry does: a used record shrinks to its
// minimal length and the new one takes the rest; an unused one is
// overwritten whole. The caller has checked DirEntryRoom(slot) >=
// DirRecLen(len(name)).
func InsertDirEntry(b []byte, slot DirEntry, ino uint32, ft uint8, name []byte) {
	if slot.Inode == 0 {
		PutDirEntry(b, slot.Off, ino, slot.RecLen, ft, name)
		return
	}
	used := DirRecLen(int(slot.NameLen))
	SetDirRecLen(b, slot.Off, used)
	PutDirEntry(b, slot.Off+used, ino, slot.RecLen-used, ft, name)
}

// RemoveDirEntry deletes the record at off as ext4_generic_delete_entry
// does: it joins the record at prev (the one before it in the block) and
// its header and name are zeroed, or, first in its block (prev < 0), its
// inode becomes 0. Both offsets are as DirBlock yields them.
func RemoveDirEntry(b []byte, off, prev int) {
	if prev < 0 {
		SetDirEntryInode(b, off, 0)
		return
	}
	SetDirRecLen(b, prev, DirRecLenAt(b, prev)+DirRecLenAt(b, off))
	clear(b[off : off+DirEntryHeaderLen+int(b[off+6])])
}

// RetargetDirEntry points the record at off (as DirBlock yields it) at
// inode ino, and with filetype sets its file type to ft.
func RetargetDirEntry(b []byte, off int, ino uint32, ft uint8, filetype bool) {
	SetDirEntryInode(b, off, ino)
	if filetype {
		b[off+7] = ft
	}
}

// Offsets of the "." and ".." entries at the start of a directory's block 0
// (linear or htree root). Part of the on-disk format.
const (
	dotNameOff    = 0x08 // "." name
	dotDotOff     = 0x0C // ".." entry
	dotDotNameLen = 0x12 // ".." name_len
	dotDotType    = 0x13 // ".." file_type
	dotDotNameOff = 0x14 // ".." name
)

// SetDirDotDot points the ".." entry of a directory's block 0 at parent. It
// reports false, changing nothing, when b does not start with "." and
// "..".
func SetDirDotDot(b []byte, parent uint32) bool {
	if len(b) < DxRootInfoOff || string(b[dotDotNameOff:dotDotNameOff+2]) != ".." || b[dotDotNameLen] != 2 || string(b[dotNameOff:dotNameOff+1]) != "." {
		return false
	}
	binary.LittleEndian.PutUint32(b[dotDotOff:], parent)
	return true
}

// DxRootDots decodes the "." and ".." entries of an htree root block from
// their fixed places (the ".." record spans the rest of the block, so
// DirBlock cannot walk it). It reports false when the names are not "."
// and "..".
func DxRootDots(b []byte) (dot, dotdot DirEntry, ok bool) {
	if len(b) < DxRootInfoOff || string(b[dotNameOff:dotNameOff+1]) != "." || string(b[dotDotNameOff:dotDotNameOff+2]) != ".." {
		return DirEntry{}, DirEntry{}, false
	}
	le := binary.LittleEndian
	dot = DirEntry{Inode: le.Uint32(b), RecLen: DecodeRecLen(le.Uint16(b[4:]), len(b)), NameLen: 1, FileType: b[7],
		Name: b[dotNameOff : dotNameOff+1], Off: 0}
	dotdot = DirEntry{Inode: le.Uint32(b[dotDotOff:]), RecLen: DecodeRecLen(le.Uint16(b[dotDotOff+4:]), len(b)), NameLen: 2,
		FileType: b[dotDotType], Name: b[dotDotNameOff : dotDotNameOff+2], Off: dotDotOff}
	return dot, dotdot, true
}

// Inline-data directories (inline_data): i_block holds the parent's inode
// number (u32) then entries; entries continue in the system.data xattr,
// which data holds from InodeBlockSize on. "." and ".." are not stored.
const inlineDirParentLen = 4

// DecodeInlineDir splits an inline directory's data (i_block followed by
// the system.data value) into the parent inode number and the regions
// holding entries, each to be walked with DirBlock (dots false). It
// reports false when data is too short to hold the parent.
func DecodeInlineDir(data []byte) (parent uint32, regions [][]byte, ok bool) {
	if len(data) < inlineDirParentLen {
		return 0, nil, false
	}
	parent = binary.LittleEndian.Uint32(data)
	regions = [][]byte{data[inlineDirParentLen:min(len(data), InodeBlockSize)]}
	if len(data) > InodeBlockSize {
		regions = append(regions, data[InodeBlockSize:])
	}
	return parent, regions, true
}
