package layout

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"
)

func sampleXattrs() []Xattr {
	return []Xattr{
		{Index: XattrIndexUser, Name: "zeta", Value: []byte("last by name")},
		{Index: XattrIndexSecurity, Name: "selinux", Value: []byte("system_u:object_r:etc_t:s0\x00")},
		{Index: XattrIndexUser, Name: "a", Value: []byte{}},
		{Index: XattrIndexUser, Name: "big", Value: bytes.Repeat([]byte{0xA5}, 301)},
		{Index: XattrIndexPosixACL, Name: "", Value: EncodeACLExt4([]ACLEntry{{ACLUserObj, 6, 0}, {ACLUser, 4, 1000}, {ACLGroupObj, 4, 0}, {ACLMask, 4, 0}, {ACLOther, 0, 0}})},
		{Index: XattrIndexTrusted, Name: "t\xe9", Value: []byte("x")},
	}
}

// sameXattrs compares names and values (not hashes) in order.
func sameXattrs(a, b []Xattr) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Index != b[i].Index || a[i].Name != b[i].Name || !bytes.Equal(a[i].Value, b[i].Value) ||
			a[i].ValueInum != b[i].ValueInum || a[i].ValueSize != b[i].ValueSize {
			return false
		}
	}
	return true
}

func TestXattrBlockRoundTrip(t *testing.T) {
	attrs := sampleXattrs()
	b, ok := EncodeXattrBlock(1024, 3, attrs)
	if !ok {
		t.Fatal("sample does not fit 1 KiB")
	}
	SetXattrBlockChecksum(0x12345678, 77, b)
	if err := VerifyXattrBlock(0x12345678, 77, b); err != nil {
		t.Fatal(err)
	}
	if VerifyXattrBlock(0x12345678, 78, b) == nil {
		t.Fatal("checksum does not cover the block number")
	}
	h, got, err := DecodeXattrBlock(b, 77)
	if err != nil {
		t.Fatal(err)
	}
	if h.Refcount != 3 || h.Blocks != 1 || h.Hash != XattrBlockHash(got) || h.Hash == 0 {
		t.Fatalf("header %+v", h)
	}
	if !sameXattrs(got, attrs) {
		t.Fatalf("decoded %+v\nwant %+v", got, attrs)
	}
	// Sorted by index, name length, name.
	for i := 1; i < len(got); i++ {
		if xattrCompare(&got[i-1], &got[i]) >= 0 {
			t.Fatalf("entries %s and %s out of ext4's order", got[i-1].FullName(), got[i].FullName())
		}
	}
	for _, x := range got {
		if x.Hash != XattrHashEntry(x.Name, x.Value, false) {
			t.Fatalf("%s: e_hash %#x", x.FullName(), x.Hash)
		}
	}
	if _, ok := EncodeXattrBlock(1024, 1, []Xattr{{Index: 1, Name: "x", Value: make([]byte, 1024-32-20-4+1)}}); ok {
		t.Fatal("oversized value fits")
	}
	if _, ok := EncodeXattrBlock(1024, 1, []Xattr{{Index: 1, Name: "x", Value: make([]byte, 1024-32-20-4)}}); !ok {
		t.Fatal("largest value does not fit")
	}
}

func TestXattrIbodyRoundTrip(t *testing.T) {
	r := make([]byte, 256-128-32)
	attrs := []Xattr{{Index: XattrIndexUser, Name: "k", Value: []byte("v1")}, {Index: XattrIndexSystem, Name: "data", Value: []byte{}}}
	if !EncodeXattrIbody(r, attrs) {
		t.Fatal("does not fit")
	}
	got, err := DecodeXattrIbody(r)
	if err != nil {
		t.Fatal(err)
	}
	if !sameXattrs(got, attrs) || got[0].Hash != 0 {
		t.Fatalf("decoded %+v", got)
	}
	if !EncodeXattrIbody(r, nil) || !bytes.Equal(r, make([]byte, len(r))) {
		t.Fatal("empty set leaves bytes")
	}
	if EncodeXattrIbody(r, []Xattr{{Index: 1, Name: "x", Value: make([]byte, 90)}}) {
		t.Fatal("90-byte value fits 96 bytes")
	}
}

func TestXattrNames(t *testing.T) {
	for _, tc := range []struct {
		full  string
		index uint8
		name  string
		ok    bool
	}{
		{"user.foo", 1, "foo", true},
		{"system.posix_acl_access", 2, "", true},
		{"system.posix_acl_default", 3, "", true},
		{"system.posix_acl_accessX", 7, "posix_acl_accessX", true},
		{"trusted.t", 4, "t", true},
		{"security.selinux", 6, "selinux", true},
		{"system.data", 7, "data", true},
		{"system.richacl", 8, "", true},
		{"other.x", 0, "", false},
		{"user", 0, "", false},
	} {
		i, n, ok := XattrSplitName(tc.full)
		if i != tc.index || n != tc.name || ok != tc.ok {
			t.Errorf("XattrSplitName(%q) = %d %q %v", tc.full, i, n, ok)
		}
		if ok {
			if back, _ := XattrFullName(i, n); back != tc.full {
				t.Errorf("XattrFullName(%d, %q) = %q", i, n, back)
			}
		}
	}
}

// TestXattrSizes pins the struct sizes the offsets assume.
func TestXattrSizes(t *testing.T) {
	if XattrHeaderLen != 32 || XattrEntryLen != 16 || XattrIbodyHeaderLen != 4 {
		t.Fatal("struct ext4_xattr_header/entry/ibody_header sizes changed")
	}
	for n, want := range map[int]int{0: 16, 1: 20, 4: 20, 5: 24, 255: 272} {
		if got := XattrEntrySize(n); got != want {
			t.Errorf("EXT4_XATTR_LEN(%d) = %d, want %d", n, got, want)
		}
	}
	if XattrValueSize(0) != 0 || XattrValueSize(1) != 4 || XattrValueSize(4) != 4 || XattrValueSize(5) != 8 {
		t.Error("EXT4_XATTR_SIZE padding")
	}
}

func TestXattrHash(t *testing.T) {
	// Worked by hand from ext4_xattr_hash_entry: name "a" gives 0x61;
	// then one value word 0x64636261 ("abcd"): 0x61<<16 ^ 0 ^ word.
	if h := XattrHashEntry("a", nil, false); h != 0x61 {
		t.Fatalf("hash(a) = %#x", h)
	}
	if h := XattrHashEntry("a", []byte("abcd"), false); h != 0x610000^0x64636261 {
		t.Fatalf("hash(a, abcd) = %#x", h)
	}
	// Bytes >= 0x80 differ between the signed and unsigned variants.
	if XattrHashEntry("\xe9", nil, false) == XattrHashEntry("\xe9", nil, true) {
		t.Fatal("signed variant equals unsigned for 0xe9")
	}
	if XattrBlockHash([]Xattr{{Hash: 1}, {Hash: 0}}) != 0 {
		t.Fatal("a zero entry hash must zero the block hash")
	}
}

func TestACLRoundTrip(t *testing.T) {
	ents := []ACLEntry{{ACLUserObj, 7, ACLUndefinedID}, {ACLUser, 5, 1001}, {ACLGroupObj, 5, ACLUndefinedID},
		{ACLGroup, 1, 50}, {ACLMask, 7, ACLUndefinedID}, {ACLOther, 0, ACLUndefinedID}}
	disk := EncodeACLExt4(ents)
	if len(disk) != 4+4*4+2*8 {
		t.Fatalf("ext4 ACL of %d bytes", len(disk))
	}
	got, err := DecodeACLExt4(disk)
	if err != nil || !reflect.DeepEqual(got, ents) {
		t.Fatalf("ext4 form: %v %v", got, err)
	}
	x := EncodeACLXattr(ents)
	if len(x) != 4+8*len(ents) {
		t.Fatalf("xattr ACL of %d bytes", len(x))
	}
	got, err = DecodeACLXattr(x)
	if err != nil || !reflect.DeepEqual(got, ents) {
		t.Fatalf("xattr form: %v %v", got, err)
	}
}

func FuzzXattrBlock(f *testing.F) {
	b, _ := EncodeXattrBlock(1024, 2, sampleXattrs())
	f.Add(b)
	b, _ = EncodeXattrBlock(1024, 1, nil)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, attrs, err := DecodeXattrBlock(b, 9)
		if err != nil {
			return
		}
		_ = VerifyXattrBlock(1, 9, b)
		// What decodes re-encodes (sorted, packed) and decodes to the same
		// set; the canonical encoding is a fixed point.
		if len(b) > 65536 {
			return
		}
		enc, ok := EncodeXattrBlock(len(b), 1, attrs)
		if !ok {
			t.Fatalf("decoded set of %d attrs does not fit its own block", len(attrs))
		}
		_, again, err := DecodeXattrBlock(enc, 9)
		if err != nil {
			t.Fatal(err)
		}
		if !sameXattrs(again, attrs) {
			t.Fatal("re-encoded block decodes differently")
		}
		enc2, _ := EncodeXattrBlock(len(b), 1, again)
		if !bytes.Equal(enc, enc2) {
			t.Fatal("canonical encoding is not a fixed point")
		}
	})
}

func FuzzXattrIbody(f *testing.F) {
	r := make([]byte, 96)
	EncodeXattrIbody(r, []Xattr{{Index: 1, Name: "k", Value: []byte("v")}, {Index: 7, Name: "data", Value: []byte{}}})
	f.Add(r)
	f.Fuzz(func(t *testing.T, r []byte) {
		attrs, err := DecodeXattrIbody(r)
		if err != nil || len(attrs) == 0 {
			return
		}
		out := make([]byte, len(r))
		if !EncodeXattrIbody(out, attrs) {
			t.Fatal("decoded set does not fit its own region")
		}
		again, err := DecodeXattrIbody(out)
		if err != nil || !sameXattrs(again, attrs) {
			t.Fatalf("re-encoded region decodes differently: %v", err)
		}
		out2 := make([]byte, len(r))
		EncodeXattrIbody(out2, again)
		if !bytes.Equal(out, out2) {
			t.Fatal("canonical encoding is not a fixed point")
		}
	})
}

func FuzzXattrACL(f *testing.F) {
	ents := []ACLEntry{{ACLUserObj, 7, ACLUndefinedID}, {ACLUser, 5, 1001}, {ACLOther, 0, ACLUndefinedID}}
	f.Add(EncodeACLExt4(ents))
	f.Add(EncodeACLXattr(ents))
	f.Fuzz(func(t *testing.T, b []byte) {
		if e, err := DecodeACLExt4(b); err == nil {
			if !bytes.Equal(EncodeACLExt4(e), b) {
				t.Fatal("ext4 ACL does not re-encode identically")
			}
			if back, err := DecodeACLXattr(EncodeACLXattr(e)); err != nil || fmt.Sprint(back) != fmt.Sprint(e) {
				t.Fatalf("xattr form of an ext4 ACL: %v", err)
			}
		}
		if e, err := DecodeACLXattr(b); err == nil {
			if back, err := DecodeACLExt4(EncodeACLExt4(e)); err != nil || fmt.Sprint(back) != fmt.Sprint(e) {
				t.Fatalf("ext4 form of an xattr ACL: %v", err)
			}
		}
	})
}
