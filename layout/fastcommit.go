package layout

import (
	"bytes"
	"encoding/binary"
	"errors"

	"github.com/ext4io/ext4io/internal/crc32c"
	"github.com/ext4io/ext4io/internal/errs"
)

// Fast-commit tags: ext4's log of fsync deltas in the jbd2 fast-commit area
// (fs/ext4/fast_commit.h; all fields little-endian). A block is a sequence
// of tag-length-value records; a record never straddles blocks (the writer
// pads with FCTagPad), and a fast commit ends with a FCTagTail whose value
// runs to the end of its block.
//
//	struct ext4_fc_tl:          0x0 fc_tag (le16) | 0x2 fc_len (le16) | 0x4 value[fc_len]
//	HEAD     ext4_fc_head:      0x0 fc_features (le32, must be 0) | 0x4 fc_tid (le32)
//	ADD_RANGE ext4_fc_add_range: 0x0 fc_ino | 0x4 fc_ex[12] (a struct ext4_extent:
//	                            ee_block le32 | ee_len le16 | ee_start_hi le16 | ee_start_lo le32)
//	DEL_RANGE ext4_fc_del_range: 0x0 fc_ino | 0x4 fc_lblk | 0x8 fc_len
//	CREAT, LINK, UNLINK ext4_fc_dentry_info: 0x0 fc_parent_ino | 0x4 fc_ino | 0x8 fc_dname[fc_len-8]
//	INODE    ext4_fc_inode:     0x0 fc_ino | 0x4 fc_raw_inode[fc_len-4] (the on-disk inode)
//	TAIL     ext4_fc_tail:      0x0 fc_tid | 0x4 fc_crc | padding to the block end
//	PAD:                        fc_len bytes ignored
//
// fc_crc = crc32c(0, every record since the previous tail (or the start),
// whole, then this tail's 4-byte header and fc_tid). All tags values are
// part of the on-disk format; they must not change.
//
// Invariants (ScanFastCommits mirrors ext4_fc_replay_scan and e2fsck's
// scan):
//   - FC1: the area holds fast commits only if block 0 starts with HEAD;
//     HEAD's fc_features is 0 and its fc_tid is the expected tid.
//   - FC2: the tags to replay are those up to the last TAIL carrying the
//     expected tid and a matching fc_crc, met before the first bad TAIL,
//     unknown tag, empty ADD_RANGE extent or bad dentry name.
const (
	FCTagAddRange = 0x0001 // EXT4_FC_TAG_ADD_RANGE
	FCTagDelRange = 0x0002 // EXT4_FC_TAG_DEL_RANGE
	FCTagCreat    = 0x0003 // EXT4_FC_TAG_CREAT
	FCTagLink     = 0x0004 // EXT4_FC_TAG_LINK
	FCTagUnlink   = 0x0005 // EXT4_FC_TAG_UNLINK
	FCTagInode    = 0x0006 // EXT4_FC_TAG_INODE
	FCTagPad      = 0x0007 // EXT4_FC_TAG_PAD
	FCTagTail     = 0x0008 // EXT4_FC_TAG_TAIL
	FCTagHead     = 0x0009 // EXT4_FC_TAG_HEAD

	// FCSupportedFeatures is EXT4_FC_SUPPORTED_FEATURES.
	FCSupportedFeatures = 0
	// FCTagBaseLen is sizeof(struct ext4_fc_tl).
	FCTagBaseLen = 4

	fcHeadLen     = 8  // sizeof(struct ext4_fc_head)
	fcAddRangeLen = 16 // sizeof(struct ext4_fc_add_range)
	fcDelRangeLen = 12 // sizeof(struct ext4_fc_del_range)
	fcDentryLen   = 8  // sizeof(struct ext4_fc_dentry_info), name excluded
	fcInodeLen    = 4  // sizeof(struct ext4_fc_inode), raw inode excluded
	fcTailLen     = 8  // sizeof(struct ext4_fc_tail)
	extentLen     = 12 // sizeof(struct ext4_extent)
	extInitMaxLen = 32768
)

// FCTag is one decoded fast-commit record (struct ext4_fc_tl and its
// value). Value aliases the block it was decoded from.
type FCTag struct {
	Tag   uint16 // fc_tag
	Value []byte // fc_len bytes
	Off   int    // in-memory only: byte offset of the record in its block
	Block int    // in-memory only: index of the block in the area
}

// FCTagName returns the name debugfs's logdump prints for a tag.
func FCTagName(tag uint16) string {
	switch tag {
	case FCTagAddRange:
		return "ADD_RANGE"
	case FCTagDelRange:
		return "DEL_RANGE"
	case FCTagCreat:
		return "CREAT_DENTRY"
	case FCTagLink:
		return "ADD_ENTRY"
	case FCTagUnlink:
		return "DEL_ENTRY"
	case FCTagInode:
		return "INODE"
	case FCTagPad:
		return "PAD"
	case FCTagTail:
		return "TAIL"
	case FCTagHead:
		return "HEAD"
	}
	return "ERROR"
}

// fcMinLen returns the smallest valid fc_len of a known tag, and false for
// an unknown tag.
func fcMinLen(tag uint16) (int, bool) {
	switch tag {
	case FCTagAddRange:
		return fcAddRangeLen, true
	case FCTagDelRange:
		return fcDelRangeLen, true
	case FCTagCreat, FCTagLink, FCTagUnlink:
		return fcDentryLen + 1, true
	case FCTagInode:
		return fcInodeLen + GoodOldInodeSize, true
	case FCTagPad:
		return 0, true
	case FCTagTail:
		return fcTailLen, true
	case FCTagHead:
		return fcHeadLen, true
	}
	return 0, false
}

// DecodeFCBlock splits one fast-commit block into records, walking them as
// the kernel does (while the cursor is below blocksize-1). It stops with an
// error at a record whose header or value runs past the block, whose tag
// is unknown, or whose fc_len is too short for its tag (checks the kernel
// added as ext4_fc_value_len_isvalid); the records before it are returned.
func DecodeFCBlock(b []byte, block int) ([]FCTag, error) {
	var out []FCTag
	le := binary.LittleEndian
	for off := 0; off < len(b)-1; {
		if len(b)-off < FCTagBaseLen {
			return out, errs.Corruptf("fast commit", uint64(block), off, "%d bytes left, too short for a tag", len(b)-off)
		}
		tag, n := le.Uint16(b[off:]), int(le.Uint16(b[off+2:]))
		if off+FCTagBaseLen+n > len(b) {
			return out, errs.Corruptf("fast commit", uint64(block), off, "tag %s: fc_len %d runs past the block", FCTagName(tag), n)
		}
		min, ok := fcMinLen(tag)
		if !ok {
			return out, errs.Corruptf("fast commit", uint64(block), off, "unknown tag %#x", tag)
		}
		if n < min || (tag == FCTagCreat || tag == FCTagLink || tag == FCTagUnlink) && n-fcDentryLen > MaxNameLen {
			return out, errs.Corruptf("fast commit", uint64(block), off, "tag %s: fc_len %d", FCTagName(tag), n)
		}
		out = append(out, FCTag{Tag: tag, Value: b[off+FCTagBaseLen : off+FCTagBaseLen+n], Off: off, Block: block})
		off += FCTagBaseLen + n
	}
	return out, nil
}

// Encode appends the record (struct ext4_fc_tl, then Value) to b.
func (t FCTag) Encode(b []byte) []byte {
	b = binary.LittleEndian.AppendUint16(b, t.Tag)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(t.Value)))
	return append(b, t.Value...)
}

// FCHead mirrors struct ext4_fc_head.
type FCHead struct {
	Features uint32 // fc_features
	Tid      uint32 // fc_tid
}

// FCTail mirrors struct ext4_fc_tail.
type FCTail struct {
	Tid uint32 // fc_tid
	Crc uint32 // fc_crc
}

// FCRange is the value of ADD_RANGE (struct ext4_fc_add_range, its extent
// decoded) or DEL_RANGE (struct ext4_fc_del_range; Pblk and Unwritten
// zero).
type FCRange struct {
	Ino       uint32 // fc_ino
	Lblk      uint32 // ee_block / fc_lblk
	Len       uint32 // ee_len without the unwritten bit / fc_len
	Pblk      uint64 // ee_start_hi<<32 | ee_start_lo (ADD_RANGE)
	Unwritten bool   // ee_len > 32768 (ADD_RANGE)
}

// FCDentry is the value of CREAT, LINK and UNLINK (struct
// ext4_fc_dentry_info).
type FCDentry struct {
	Parent uint32 // fc_parent_ino
	Ino    uint32 // fc_ino
	Name   []byte // fc_dname (aliases the block)
}

// FCInode is the value of INODE (struct ext4_fc_inode).
type FCInode struct {
	Ino uint32 // fc_ino
	Raw []byte // fc_raw_inode (aliases the block)
}

var fle = binary.LittleEndian

// Head decodes a HEAD value.
func (t FCTag) Head() FCHead { return FCHead{fle.Uint32(t.Value), fle.Uint32(t.Value[4:])} }

// Tail decodes a TAIL value.
func (t FCTag) Tail() FCTail { return FCTail{fle.Uint32(t.Value), fle.Uint32(t.Value[4:])} }

// Range decodes an ADD_RANGE or DEL_RANGE value. An ADD_RANGE extent of
// length 0 is rejected, as ext2fs_decode_extent does.
func (t FCTag) Range() (FCRange, error) {
	v := t.Value
	r := FCRange{Ino: fle.Uint32(v)}
	if t.Tag == FCTagDelRange {
		r.Lblk, r.Len = fle.Uint32(v[4:]), fle.Uint32(v[8:])
		return r, nil
	}
	e := v[4 : 4+extentLen]
	r.Lblk = fle.Uint32(e)
	l := uint32(fle.Uint16(e[4:]))
	if l > extInitMaxLen {
		r.Len, r.Unwritten = l-extInitMaxLen, true
	} else {
		r.Len = l
	}
	r.Pblk = uint64(fle.Uint16(e[6:]))<<32 | uint64(fle.Uint32(e[8:]))
	if r.Len == 0 {
		return r, errs.Corruptf("fast commit", uint64(t.Block), t.Off, "ADD_RANGE of inode %d: empty extent", r.Ino)
	}
	return r, nil
}

// Dentry decodes a CREAT, LINK or UNLINK value. The name is untrusted: it
// must not be empty, "." or "..", nor hold '/' or NUL.
func (t FCTag) Dentry() (FCDentry, error) {
	d := FCDentry{fle.Uint32(t.Value), fle.Uint32(t.Value[4:]), t.Value[fcDentryLen:]}
	n := d.Name
	if len(n) == 0 || string(n) == "." || string(n) == ".." || bytes.IndexByte(n, '/') >= 0 || bytes.IndexByte(n, 0) >= 0 {
		return d, errs.Corruptf("fast commit", uint64(t.Block), t.Off, "%s of inode %d: bad name %q", FCTagName(t.Tag), d.Ino, n)
	}
	return d, nil
}

// Inode decodes an INODE value.
func (t FCTag) Inode() FCInode { return FCInode{fle.Uint32(t.Value), t.Value[fcInodeLen:]} }

// EncodeFCHead, EncodeFCRange, EncodeFCDentry, EncodeFCInode and
// EncodeFCTail build tag values (for tests and for writing fast commits).
func EncodeFCHead(h FCHead) FCTag {
	v := fle.AppendUint32(nil, h.Features)
	return FCTag{Tag: FCTagHead, Value: fle.AppendUint32(v, h.Tid)}
}

// EncodeFCRange encodes r as an ADD_RANGE (add) or DEL_RANGE value.
func EncodeFCRange(r FCRange, add bool) FCTag {
	v := fle.AppendUint32(nil, r.Ino)
	if !add {
		v = fle.AppendUint32(v, r.Lblk)
		return FCTag{Tag: FCTagDelRange, Value: fle.AppendUint32(v, r.Len)}
	}
	l := r.Len
	if r.Unwritten {
		l += extInitMaxLen
	}
	v = fle.AppendUint32(v, r.Lblk)
	v = fle.AppendUint16(v, uint16(l))
	v = fle.AppendUint16(v, uint16(r.Pblk>>32))
	v = fle.AppendUint32(v, uint32(r.Pblk))
	return FCTag{Tag: FCTagAddRange, Value: v}
}

// EncodeFCDentry encodes a CREAT, LINK or UNLINK value.
func EncodeFCDentry(tag uint16, d FCDentry) FCTag {
	v := fle.AppendUint32(nil, d.Parent)
	v = fle.AppendUint32(v, d.Ino)
	return FCTag{Tag: tag, Value: append(v, d.Name...)}
}

// EncodeFCInode encodes an INODE value.
func EncodeFCInode(in FCInode) FCTag {
	return FCTag{Tag: FCTagInode, Value: append(fle.AppendUint32(nil, in.Ino), in.Raw...)}
}

// FCTailCrc continues crc over a TAIL record's header and fc_tid, the part
// of the tail fc_crc covers.
func FCTailCrc(crc uint32, tid uint32, valueLen int) uint32 {
	var h [FCTagBaseLen + 4]byte
	fle.PutUint16(h[0:], FCTagTail)
	fle.PutUint16(h[2:], uint16(valueLen))
	fle.PutUint32(h[4:], tid)
	return crc32c.Kernel(crc, h[:])
}

// FCRecordCrc continues crc over a whole record as stored.
func FCRecordCrc(crc uint32, t FCTag) uint32 {
	var h [FCTagBaseLen]byte
	fle.PutUint16(h[0:], t.Tag)
	fle.PutUint16(h[2:], uint16(len(t.Value)))
	return crc32c.Kernel(crc32c.Kernel(crc, h[:]), t.Value)
}

// FCScan is the result of ScanFastCommits.
type FCScan struct {
	// Tags are the records to replay, HEAD, PAD and TAIL included, in
	// order (the kernel's fc_replay_num_tags first tags).
	Tags []FCTag
	// Commits counts the valid TAILs.
	Commits int
	// Stop says why the scan ended after the last valid TAIL: nil at the
	// end of the written area (a zero tag), else the corrupt or stale
	// record met.
	Stop error
}

// ScanFastCommits finds the valid fast commits of an area (FC1, FC2), as
// ext4_fc_replay_scan and e2fsck's ext4_fc_replay_scan do. A scan that
// finds no valid TAIL returns no tags; Stop says why (a bad first TAIL is
// -EFSBADCRC in the kernel).
func ScanFastCommits(blocks [][]byte, expectedTid uint32) FCScan {
	var s FCScan
	if len(blocks) == 0 || len(blocks[0]) < FCTagBaseLen || fle.Uint16(blocks[0]) != FCTagHead {
		return s
	}
	var crc uint32
	var pending []FCTag
	for bi, b := range blocks {
		tags, derr := DecodeFCBlock(b, bi)
		for _, t := range tags {
			switch t.Tag {
			case FCTagAddRange:
				if _, err := t.Range(); err != nil {
					s.Stop = err
					return s
				}
				crc = FCRecordCrc(crc, t)
			case FCTagCreat, FCTagLink, FCTagUnlink:
				if _, err := t.Dentry(); err != nil {
					s.Stop = err
					return s
				}
				crc = FCRecordCrc(crc, t)
			case FCTagHead:
				h := t.Head()
				if h.Features&^FCSupportedFeatures != 0 {
					s.Stop = errs.Corruptf("fast commit", uint64(bi), t.Off, "HEAD features %#x", h.Features)
					return s
				}
				if h.Tid != expectedTid {
					s.Stop = errs.Corruptf("fast commit", uint64(bi), t.Off, "HEAD tid %d, expected %d", h.Tid, expectedTid)
					return s
				}
				crc = FCRecordCrc(crc, t)
			case FCTagTail:
				tl := t.Tail()
				crc = FCTailCrc(crc, tl.Tid, len(t.Value))
				pending = append(pending, t)
				if tl.Tid != expectedTid || tl.Crc != crc {
					s.Stop = errs.Corruptf("fast commit", uint64(bi), t.Off, "TAIL tid %d crc %#x, expected tid %d crc %#x", tl.Tid, tl.Crc, expectedTid, crc)
					return s
				}
				s.Tags = append(s.Tags, pending...)
				s.Commits++
				pending, crc = nil, 0
				continue
			default:
				crc = FCRecordCrc(crc, t)
			}
			pending = append(pending, t)
		}
		if derr != nil {
			if isZeroTag(b, derr) {
				return s
			}
			s.Stop = derr
			return s
		}
	}
	return s
}

// isZeroTag reports whether a decode error is the zeroed, never written
// part of the area (tag 0), the usual end of the last fast commit.
func isZeroTag(b []byte, err error) bool {
	var ce *errs.CorruptError
	if !errors.As(err, &ce) || ce.Off < 0 || ce.Off+FCTagBaseLen > len(b) {
		return false
	}
	return fle.Uint16(b[ce.Off:]) == 0
}

// FCMergeInode overwrites the on-disk inode ondisk with the fast-commit
// copy fc as e2fsck's ext4_fc_handle_inode does: the fields before i_block
// and from i_generation to the inode's end come from fc; i_block stays
// (the extent tree replayed so far) unless the inode has inline data, and
// an extent inode whose i_block lacks the extent magic gets an empty root.
// Both slices have the inode's length (128 + i_extra_isize of fc).
func FCMergeInode(ondisk, fc []byte) {
	const iblock, igen = 0x28, 0x64
	copy(ondisk[:iblock], fc[:iblock])
	copy(ondisk[igen:], fc[igen:])
	flags := fle.Uint32(ondisk[0x20:])
	switch {
	case flags&InodeFlagExtents != 0:
		if fle.Uint16(ondisk[iblock:]) != 0xF30A {
			clear(ondisk[iblock : iblock+12])
			fle.PutUint16(ondisk[iblock:], 0xF30A) // eh_magic
			fle.PutUint16(ondisk[iblock+4:], (InodeBlockSize-12)/12)
		}
	case flags&InodeFlagInlineData != 0:
		copy(ondisk[iblock:iblock+InodeBlockSize], fc[iblock:iblock+InodeBlockSize])
	}
}

// FCInodeLen returns how many bytes of an INODE tag's raw inode e2fsck
// uses: 128, plus i_extra_isize when the inode size is larger. It fails
// when i_extra_isize is below 4 or does not fit the inode size, or the
// tag is too short.
func FCInodeLen(raw []byte, inodeSize int) (int, error) {
	n := GoodOldInodeSize
	if inodeSize > GoodOldInodeSize {
		if len(raw) < inodeExtraIsizeOff+2 {
			return 0, errs.Corruptf("fast commit inode", 0, -1, "%d bytes, no i_extra_isize", len(raw))
		}
		x := int(fle.Uint16(raw[inodeExtraIsizeOff:]))
		if x < inodeChecksumHiEnd || x > inodeSize-GoodOldInodeSize {
			return 0, errs.Corruptf("fast commit inode", 0, inodeExtraIsizeOff, "i_extra_isize %d", x)
		}
		n += x
	}
	if len(raw) < n {
		return 0, errs.Corruptf("fast commit inode", 0, -1, "%d bytes, inode needs %d", len(raw), n)
	}
	return n, nil
}

// XattrBlockRelease drops one reference from the xattr block b (struct
// ext4_xattr_header: 0x0 h_magic | 0x4 h_refcount | 0x10 h_checksum), as
// ext4_xattr_release_block does when fast-commit replay frees an inode,
// and reports whether the block is now unused (it is then left as it was).
// Otherwise h_refcount is decremented and, with metadata_csum, h_checksum
// recomputed: crc32c(s_csum_seed, le64 block number, then the block with
// h_checksum taken as zero).
func XattrBlockRelease(b []byte, blocknr uint64, csumSeed uint32, csum bool) (free bool, err error) {
	if len(b) < XattrHeaderLen || fle.Uint32(b) != XattrMagic {
		return false, errs.Corruptf("xattr block", blocknr, 0, "bad magic")
	}
	ref := fle.Uint32(b[4:])
	if ref <= 1 {
		return true, nil
	}
	SetXattrBlockRefcount(b, ref-1)
	if csum {
		SetXattrBlockChecksum(csumSeed, blocknr, b)
	}
	return false, nil
}
