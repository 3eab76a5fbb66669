package layout

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strings"

	"github.com/ext4io/ext4io/internal/crc32c"
	"github.com/ext4io/ext4io/internal/errs"
)

// Extended attributes (fs/ext4/xattr.h).
//
// Attributes live in two places: in the inode body after i_extra_isize,
// and in one external block named by i_file_acl, which identical sets of
// several inodes share with a reference count.
//
// In-inode (struct ext4_xattr_ibody_header), at byte 128+i_extra_isize:
//
//	0x00 h_magic u32 = 0xEA020000
//	0x04 entries..., ended by a zero u32; values packed from the end of
//	     the inode, e_value_offs counted from the first entry (0x04)
//
// External block (struct ext4_xattr_header, 32 bytes):
//
//	0x00 h_magic    u32 = 0xEA020000
//	0x04 h_refcount u32   inodes sharing the block
//	0x08 h_blocks   u32 = 1
//	0x0C h_hash     u32   ext4_xattr_rehash of the entry hashes
//	0x10 h_checksum u32   crc32c(fs seed, le64 block nr ++ block, h_checksum 0)
//	0x14 h_reserved u32[3]
//	0x20 entries..., sorted by (index, name length, name), ended by a zero
//	     u32; values packed from the end of the block, e_value_offs
//	     counted from the block start
//
// Entry (struct ext4_xattr_entry, 16 bytes + name padded to 4):
//
//	0x00 e_name_len    u8
//	0x01 e_name_index  u8    namespace (XattrIndexUser, ...)
//	0x02 e_value_offs  u16
//	0x04 e_value_inum  u32   EA inode holding the value (ea_inode), else 0
//	0x08 e_value_size  u32
//	0x0C e_hash        u32   ext4_xattr_hash_entry (0 in the inode body)
//	0x10 e_name        name bytes without the namespace prefix
//
// Values are padded to 4 bytes with zeroes.
//
// Invariants checked on decode (named for tests):
//
//	X1 h_magic == 0xEA020000 and h_blocks == 1 (block)
//	X2 every entry, and the zero u32 after the last, lies inside the region
//	X3 every value lies between the end of the entries and the region end
//	X4 names hold no NUL; values of EA inodes need the ea_inode feature's
//	   limits (size <= XattrMaxValueSize, offset 0)

// Part of the on-disk format; must not change.
const (
	XattrMagic          = 0xEA020000
	XattrHeaderLen      = 32 // struct ext4_xattr_header
	XattrIbodyHeaderLen = 4  // struct ext4_xattr_ibody_header
	XattrEntryLen       = 16 // struct ext4_xattr_entry without e_name
	xattrPad            = 4  // EXT4_XATTR_PAD

	// XattrMaxValueSize is XATTR_SIZE_MAX: the largest value Linux's
	// setxattr accepts, and the largest an EA inode holds.
	XattrMaxValueSize = 65536
	// XattrMaxNameLen is XATTR_NAME_MAX: the longest e_name.
	XattrMaxNameLen = 255
)

// Namespace indexes (e_name_index). Part of the on-disk format.
const (
	XattrIndexUser        = 1
	XattrIndexPosixACL    = 2 // system.posix_acl_access
	XattrIndexPosixACLDef = 3 // system.posix_acl_default
	XattrIndexTrusted     = 4
	XattrIndexLustre      = 5
	XattrIndexSecurity    = 6
	XattrIndexSystem      = 7 // system.data of inline_data, system.* else
	XattrIndexRichACL     = 8 // system.richacl
	XattrIndexEncryption  = 9 // "c": the encryption context, not listed
	XattrIndexHurd        = 10
)

// xattrPrefixes maps e_name_index to the prefix of the name Linux shows.
// The ACL and richacl indexes name a whole attribute (empty e_name).
var xattrPrefixes = [...]string{
	XattrIndexUser:        "user.",
	XattrIndexPosixACL:    "system.posix_acl_access",
	XattrIndexPosixACLDef: "system.posix_acl_default",
	XattrIndexTrusted:     "trusted.",
	XattrIndexSecurity:    "security.",
	XattrIndexSystem:      "system.",
	XattrIndexRichACL:     "system.richacl",
}

// XattrFullName returns the name Linux shows for an entry of namespace
// index with e_name name, and false for namespaces Linux does not list.
func XattrFullName(index uint8, name string) (string, bool) {
	if int(index) >= len(xattrPrefixes) || xattrPrefixes[index] == "" {
		return "", false
	}
	return xattrPrefixes[index] + name, true
}

// XattrSplitName splits a full attribute name into its namespace index and
// e_name, as ext4's xattr handlers do (the longest matching prefix wins, so
// "system.posix_acl_access" is index 2 with an empty e_name). It reports
// false for a name in no namespace ext4 stores.
func XattrSplitName(full string) (index uint8, name string, ok bool) {
	best := -1
	for i, p := range xattrPrefixes {
		if p == "" || !strings.HasPrefix(full, p) {
			continue
		}
		if best < 0 || len(p) > len(xattrPrefixes[best]) {
			best = i
		}
	}
	if best < 0 {
		return 0, "", false
	}
	name = full[len(xattrPrefixes[best]):]
	switch best {
	case XattrIndexPosixACL, XattrIndexPosixACLDef, XattrIndexRichACL:
		if name != "" { // "system.posix_acl_accessX" is a plain system. name
			best = XattrIndexSystem
			name = full[len("system."):]
		}
	}
	return uint8(best), name, true
}

// Xattr is one decoded extended attribute (in memory only; the entry
// mirrors struct ext4_xattr_entry).
type Xattr struct {
	Index uint8  // e_name_index
	Name  string // e_name, without the namespace prefix
	// Value is the value stored in the inode body or block; nil for a
	// value in an EA inode (ValueInum != 0), which holds ValueSize bytes.
	Value     []byte
	ValueInum uint32 // e_value_inum
	ValueSize uint32 // e_value_size
	Hash      uint32 // e_hash as decoded (recomputed by the encoders)
}

// FullName returns the name Linux shows ("user.foo"), or a name like
// "index5.foo" for a namespace Linux does not list.
func (x *Xattr) FullName() string {
	if n, ok := XattrFullName(x.Index, x.Name); ok {
		return n
	}
	return sprintf("index%d.%s", x.Index, x.Name)
}

// XattrEntrySize is EXT4_XATTR_LEN: the bytes an entry with a name of
// nameLen bytes takes.
func XattrEntrySize(nameLen int) int {
	return (XattrEntryLen + nameLen + xattrPad - 1) &^ (xattrPad - 1)
}

// XattrValueSize is EXT4_XATTR_SIZE: the bytes a value of n bytes takes.
func XattrValueSize(n int) int { return (n + xattrPad - 1) &^ (xattrPad - 1) }

// xattrSpace returns the bytes attrs take in a region: entries and values.
func xattrSpace(attrs []Xattr) int {
	s := 0
	for i := range attrs {
		s += XattrEntrySize(len(attrs[i].Name))
		if attrs[i].ValueInum == 0 {
			s += XattrValueSize(len(attrs[i].Value))
		}
	}
	return s
}

// XattrIbodyFits reports whether attrs fit an inode body region of n bytes
// (the bytes after 128+i_extra_isize).
func XattrIbodyFits(n int, attrs []Xattr) bool {
	if len(attrs) == 0 {
		return true
	}
	return XattrIbodyHeaderLen+xattrSpace(attrs)+4 <= n
}

// XattrBlockFits reports whether attrs fit one block of bs bytes.
func XattrBlockFits(bs int, attrs []Xattr) bool {
	return XattrHeaderLen+xattrSpace(attrs)+4 <= bs
}

// XattrHashEntry computes ext4_xattr_hash_entry over name and the value's
// little-endian 32-bit words (padded with zeroes). With signed it is the
// variant that took name bytes as signed char (ext4_xattr_hash_entry_signed,
// what kernels before 6.2 computed on most architectures); e2fsck accepts
// either.
func XattrHashEntry(name string, value []byte, signed bool) uint32 {
	const nameShift, valueShift = 5, 16
	var h uint32
	for i := 0; i < len(name); i++ {
		c := uint32(name[i])
		if signed {
			c = uint32(int32(int8(name[i])))
		}
		h = h<<nameShift ^ h>>(32-nameShift) ^ c
	}
	var w [4]byte
	for i := 0; i < len(value); i += 4 {
		w = [4]byte{}
		copy(w[:], value[i:])
		h = h<<valueShift ^ h>>(32-valueShift) ^ binary.LittleEndian.Uint32(w[:])
	}
	return h
}

// XattrHashEntryInode is the e_hash of an entry whose value lives in an
// EA inode: the name hashed with the EA inode's value checksum as one
// value word.
func XattrHashEntryInode(name string, valueCsum uint32) uint32 {
	var w [4]byte
	binary.LittleEndian.PutUint32(w[:], valueCsum)
	return XattrHashEntry(name, w[:], false)
}

// XattrBlockHash computes ext4_xattr_rehash over the entries' e_hash
// values in block order: 0 if any entry hash is 0.
func XattrBlockHash(attrs []Xattr) uint32 {
	const blockShift = 16
	var h uint32
	for i := range attrs {
		if attrs[i].Hash == 0 {
			return 0
		}
		h = h<<blockShift ^ h>>(32-blockShift) ^ attrs[i].Hash
	}
	return h
}

// xattrLess orders entries as ext4 keeps them in a block: by index, then
// name length, then name bytes.
func xattrCompare(a, b *Xattr) int {
	if a.Index != b.Index {
		return int(a.Index) - int(b.Index)
	}
	if len(a.Name) != len(b.Name) {
		return len(a.Name) - len(b.Name)
	}
	return strings.Compare(a.Name, b.Name)
}

// SortXattrs sorts attrs in ext4's block order.
func SortXattrs(attrs []Xattr) {
	slices.SortStableFunc(attrs, func(a, b Xattr) int { return xattrCompare(&a, &b) })
}

// decodeXattrEntries decodes the entries of a region: r[first:] holds the
// entries, values are at r[base+e_value_offs:] and must end by len(r).
func decodeXattrEntries(what string, blk uint64, r []byte, first, base int) ([]Xattr, error) {
	le := binary.LittleEndian
	bad := func(off int, format string, args ...any) error {
		return errs.Corruptf(what, blk, off, format, args...)
	}
	var attrs []Xattr
	var valOffs []int
	off := first
	for {
		if off+4 > len(r) {
			return nil, bad(off, "entries run past the end (no end marker)")
		}
		if le.Uint32(r[off:]) == 0 {
			break
		}
		if off+XattrEntryLen > len(r) {
			return nil, bad(off, "entry header runs past the end")
		}
		nameLen := int(r[off])
		size := XattrEntrySize(nameLen)
		if off+size+4 > len(r) {
			return nil, bad(off, "entry name of %d bytes runs past the end", nameLen)
		}
		x := Xattr{
			Index:     r[off+1],
			ValueInum: le.Uint32(r[off+4:]),
			ValueSize: le.Uint32(r[off+8:]),
			Hash:      le.Uint32(r[off+12:]),
		}
		name := r[off+XattrEntryLen : off+XattrEntryLen+nameLen]
		if bytes.IndexByte(name, 0) >= 0 {
			return nil, bad(off, "entry name holds a NUL byte")
		}
		x.Name = string(name)
		if nameLen == 0 && x.Index == 0 {
			// Its first word would read as the end marker once its
			// value moved: no namespace and no name is no attribute.
			return nil, bad(off, "entry with neither namespace nor name")
		}
		valOff := int(le.Uint16(r[off+2:]))
		switch {
		case x.ValueInum != 0:
			if x.ValueSize > XattrMaxValueSize {
				return nil, bad(off, "EA inode value of %d bytes", x.ValueSize)
			}
		case x.ValueSize == 0:
			x.Value = []byte{}
		default:
			if x.ValueSize > uint32(len(r)) || base+valOff+XattrValueSize(int(x.ValueSize)) > len(r) {
				return nil, bad(off, "value [%#x,+%d) runs past the end", valOff, x.ValueSize)
			}
			x.Value = append([]byte(nil), r[base+valOff:base+valOff+int(x.ValueSize)]...)
		}
		attrs = append(attrs, x)
		valOffs = append(valOffs, valOff)
		off += size
	}
	// X3: values (padded) lie past the entries and do not overlap, as
	// e2fsck's region check wants them.
	type span struct{ start, end int }
	var spans []span
	end := off + 4 // past the end marker
	for i := range attrs {
		if attrs[i].ValueInum != 0 || len(attrs[i].Value) == 0 {
			continue
		}
		if base+valOffs[i] < end {
			return nil, bad(base+valOffs[i], "value of %s overlaps the entries", attrs[i].FullName())
		}
		spans = append(spans, span{valOffs[i], valOffs[i] + XattrValueSize(len(attrs[i].Value))})
	}
	slices.SortFunc(spans, func(a, b span) int { return a.start - b.start })
	for i := 1; i < len(spans); i++ {
		if spans[i].start < spans[i-1].end {
			return nil, bad(base+spans[i].start, "values overlap")
		}
	}
	return attrs, nil
}

// encodeXattrEntries writes attrs into r: entries from first, values
// packed down from the end of r, offsets counted from base. The caller has
// checked that they fit. It returns the attrs with their hashes set.
func encodeXattrEntries(r []byte, first, base int, attrs []Xattr, hashed bool) {
	le := binary.LittleEndian
	clear(r[first:])
	off, valEnd := first, len(r)
	for i := range attrs {
		x := &attrs[i]
		r[off] = byte(len(x.Name))
		r[off+1] = x.Index
		copy(r[off+XattrEntryLen:], x.Name)
		valOff := 0
		if x.ValueInum == 0 {
			x.ValueSize = uint32(len(x.Value))
			if len(x.Value) > 0 {
				valEnd -= XattrValueSize(len(x.Value))
				copy(r[valEnd:], x.Value)
				valOff = valEnd - base
			}
			x.Hash = 0
			if hashed {
				x.Hash = XattrHashEntry(x.Name, x.Value, false)
			}
		}
		le.PutUint16(r[off+2:], uint16(valOff))
		le.PutUint32(r[off+4:], x.ValueInum)
		le.PutUint32(r[off+8:], x.ValueSize)
		le.PutUint32(r[off+12:], x.Hash)
		off += XattrEntrySize(len(x.Name))
	}
}

// XattrIbodyRegion returns the bytes of in's raw inode after
// i_extra_isize, where in-inode attributes live, or nil when the inode has
// no room for them (128-byte inodes, i_extra_isize 0 as Linux ignores it,
// or no space for the header and an end marker).
func XattrIbodyRegion(in *Inode) []byte {
	start := GoodOldInodeSize + int(in.ExtraIsize)
	if len(in.Raw) <= GoodOldInodeSize || in.ExtraIsize < 4 || start+XattrIbodyHeaderLen+4 > len(in.Raw) {
		return nil
	}
	return in.Raw[start:]
}

// DecodeXattrIbody decodes the in-inode attributes of an inode body region
// r (the bytes after 128+i_extra_isize). A region without the magic holds
// none.
func DecodeXattrIbody(r []byte) ([]Xattr, error) {
	if len(r) < XattrIbodyHeaderLen+4 || binary.LittleEndian.Uint32(r) != XattrMagic {
		return nil, nil
	}
	return decodeXattrEntries("in-inode xattr", 0, r, XattrIbodyHeaderLen, XattrIbodyHeaderLen)
}

// EncodeXattrIbody writes attrs (in their order, as ext4 appends them) into
// the inode body region r, with e_hash 0 as Linux stores in-inode entries;
// no attrs clear the region and its magic. It reports false, changing
// nothing, when they do not fit.
func EncodeXattrIbody(r []byte, attrs []Xattr) bool {
	if !XattrIbodyFits(len(r), attrs) {
		return false
	}
	clear(r)
	if len(attrs) == 0 {
		return true
	}
	binary.LittleEndian.PutUint32(r, XattrMagic)
	encodeXattrEntries(r, XattrIbodyHeaderLen, XattrIbodyHeaderLen, attrs, false)
	return true
}

// XattrBlockHeader mirrors struct ext4_xattr_header.
type XattrBlockHeader struct {
	Magic    uint32 // 0x00
	Refcount uint32 // 0x04
	Blocks   uint32 // 0x08
	Hash     uint32 // 0x0C
	Checksum uint32 // 0x10
}

// DecodeXattrBlockHeader decodes the header of an xattr block and checks
// its magic and h_blocks (X1).
func DecodeXattrBlockHeader(b []byte, blk uint64) (XattrBlockHeader, error) {
	le := binary.LittleEndian
	if len(b) < XattrHeaderLen+4 {
		return XattrBlockHeader{}, errs.Corruptf("xattr block", blk, 0, "block of %d bytes", len(b))
	}
	h := XattrBlockHeader{le.Uint32(b), le.Uint32(b[4:]), le.Uint32(b[8:]), le.Uint32(b[12:]), le.Uint32(b[16:])}
	if h.Magic != XattrMagic {
		return h, errs.Corruptf("xattr block", blk, 0, "magic %#x != %#x", h.Magic, uint32(XattrMagic))
	}
	if h.Blocks != 1 {
		return h, errs.Corruptf("xattr block", blk, 8, "h_blocks %d != 1", h.Blocks)
	}
	return h, nil
}

// DecodeXattrBlock decodes an external xattr block b (block number blk,
// for error messages): its header and entries in block order. Checksums
// are verified by VerifyXattrBlock.
func DecodeXattrBlock(b []byte, blk uint64) (XattrBlockHeader, []Xattr, error) {
	h, err := DecodeXattrBlockHeader(b, blk)
	if err != nil {
		return h, nil, err
	}
	attrs, err := decodeXattrEntries("xattr block", blk, b, XattrHeaderLen, 0)
	return h, attrs, err
}

// EncodeXattrBlock returns a block of bs bytes holding attrs sorted in
// ext4's order, with entry hashes, the block hash and refcount set; the
// checksum is set by SetXattrBlockChecksum. It reports false when attrs
// do not fit. attrs is sorted in place and gets its hashes.
func EncodeXattrBlock(bs int, refcount uint32, attrs []Xattr) ([]byte, bool) {
	if !XattrBlockFits(bs, attrs) {
		return nil, false
	}
	SortXattrs(attrs)
	b := make([]byte, bs)
	le := binary.LittleEndian
	le.PutUint32(b, XattrMagic)
	le.PutUint32(b[4:], refcount)
	le.PutUint32(b[8:], 1)
	encodeXattrEntries(b, XattrHeaderLen, 0, attrs, true)
	le.PutUint32(b[12:], XattrBlockHash(attrs))
	return b, true
}

// SetXattrBlockRefcount stores h_refcount.
func SetXattrBlockRefcount(b []byte, refcount uint32) {
	binary.LittleEndian.PutUint32(b[4:], refcount)
}

// XattrBlockChecksum computes ext4_xattr_block_csum: crc32c from the
// filesystem seed over the little-endian 64-bit block number, then the
// block with h_checksum taken as zero.
func XattrBlockChecksum(fsSeed uint32, blk uint64, b []byte) uint32 {
	var nr [8]byte
	binary.LittleEndian.PutUint64(nr[:], blk)
	c := crc32c.Kernel(fsSeed, nr[:])
	c = crc32c.Kernel(c, b[:16])
	c = crc32c.Kernel(c, []byte{0, 0, 0, 0})
	return crc32c.Kernel(c, b[20:])
}

// SetXattrBlockChecksum stores the block's checksum (metadata_csum only).
func SetXattrBlockChecksum(fsSeed uint32, blk uint64, b []byte) {
	binary.LittleEndian.PutUint32(b[16:], XattrBlockChecksum(fsSeed, blk, b))
}

// VerifyXattrBlock checks the block's checksum (call only with
// metadata_csum).
func VerifyXattrBlock(fsSeed uint32, blk uint64, b []byte) error {
	got := binary.LittleEndian.Uint32(b[16:])
	if want := XattrBlockChecksum(fsSeed, blk, b); got != want {
		return errs.Corruptf("xattr block", blk, 16, "checksum %#x != computed %#x", got, want)
	}
	return nil
}
