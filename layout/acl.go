package layout

import (
	"encoding/binary"

	"github.com/ext4io/ext4io/internal/errs"
)

// POSIX ACLs (fs/ext4/acl.h, include/uapi/linux/posix_acl_xattr.h).
//
// ext4 stores system.posix_acl_access and system.posix_acl_default in a
// compact form; the system calls (and getfattr) see the xattr ABI form.
//
// ext4 form (struct ext4_acl_header + entries):
//
//	0x00 a_version u32 = 1
//	then per entry: e_tag u16, e_perm u16, and e_id u32 for ACL_USER and
//	ACL_GROUP only (struct ext4_acl_entry; struct ext4_acl_entry_short
//	for the others)
//
// xattr ABI form (struct posix_acl_xattr_header + entries):
//
//	0x00 a_version u32 = 2
//	then per entry: e_tag u16, e_perm u16, e_id u32 (ACL_UNDEFINED_ID,
//	0xFFFFFFFF, for the entries without an id)

// Part of the on-disk format and the ABI; must not change.
const (
	ACLVersionExt4  = 1 // EXT4_ACL_VERSION
	ACLVersionXattr = 2 // POSIX_ACL_XATTR_VERSION
	ACLUndefinedID  = 0xFFFFFFFF

	ACLUserObj  = 0x01
	ACLUser     = 0x02
	ACLGroupObj = 0x04
	ACLGroup    = 0x08
	ACLMask     = 0x10
	ACLOther    = 0x20
)

// ACLEntry is one entry of a POSIX ACL (in memory).
type ACLEntry struct {
	Tag  uint16
	Perm uint16
	ID   uint32 // ACLUndefinedID for tags without an id
}

func aclHasID(tag uint16) bool { return tag == ACLUser || tag == ACLGroup }

func aclTagValid(tag uint16) bool {
	switch tag {
	case ACLUserObj, ACLUser, ACLGroupObj, ACLGroup, ACLMask, ACLOther:
		return true
	}
	return false
}

// DecodeACLExt4 decodes ext4's compact ACL form (ext4_acl_from_disk).
func DecodeACLExt4(b []byte) ([]ACLEntry, error) {
	le := binary.LittleEndian
	bad := func(off int, format string, args ...any) error {
		return errs.Corruptf("ACL", 0, off, format, args...)
	}
	if len(b) < 4 || le.Uint32(b) != ACLVersionExt4 {
		return nil, bad(0, "not an ext4 ACL (version or size)")
	}
	var out []ACLEntry
	for off := 4; off < len(b); {
		if off+4 > len(b) {
			return nil, bad(off, "entry runs past the end")
		}
		e := ACLEntry{Tag: le.Uint16(b[off:]), Perm: le.Uint16(b[off+2:]), ID: ACLUndefinedID}
		if !aclTagValid(e.Tag) {
			return nil, bad(off, "entry tag %#x", e.Tag)
		}
		off += 4
		if aclHasID(e.Tag) {
			if off+4 > len(b) {
				return nil, bad(off, "entry id runs past the end")
			}
			e.ID = le.Uint32(b[off:])
			off += 4
		}
		out = append(out, e)
	}
	return out, nil
}

// EncodeACLExt4 encodes entries in ext4's compact form (ext4_acl_to_disk).
func EncodeACLExt4(entries []ACLEntry) []byte {
	le := binary.LittleEndian
	b := le.AppendUint32(nil, ACLVersionExt4)
	for _, e := range entries {
		b = le.AppendUint16(b, e.Tag)
		b = le.AppendUint16(b, e.Perm)
		if aclHasID(e.Tag) {
			b = le.AppendUint32(b, e.ID)
		}
	}
	return b
}

// DecodeACLXattr decodes the xattr ABI form (posix_acl_from_xattr's
// checks of version, size and tags).
func DecodeACLXattr(b []byte) ([]ACLEntry, error) {
	le := binary.LittleEndian
	if len(b) < 4 || le.Uint32(b) != ACLVersionXattr || (len(b)-4)%8 != 0 {
		return nil, errs.Corruptf("ACL", 0, 0, "not a POSIX ACL xattr (version 2, 8-byte entries)")
	}
	var out []ACLEntry
	for off := 4; off < len(b); off += 8 {
		e := ACLEntry{Tag: le.Uint16(b[off:]), Perm: le.Uint16(b[off+2:]), ID: le.Uint32(b[off+4:])}
		if !aclTagValid(e.Tag) {
			return nil, errs.Corruptf("ACL", 0, off, "entry tag %#x", e.Tag)
		}
		if !aclHasID(e.Tag) {
			e.ID = ACLUndefinedID
		}
		out = append(out, e)
	}
	return out, nil
}

// EncodeACLXattr encodes entries in the xattr ABI form.
func EncodeACLXattr(entries []ACLEntry) []byte {
	le := binary.LittleEndian
	b := le.AppendUint32(nil, ACLVersionXattr)
	for _, e := range entries {
		id := e.ID
		if !aclHasID(e.Tag) {
			id = ACLUndefinedID
		}
		b = le.AppendUint16(b, e.Tag)
		b = le.AppendUint16(b, e.Perm)
		b = le.AppendUint32(b, id)
	}
	return b
}
