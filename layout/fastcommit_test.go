package layout

import (
	"bytes"
	"errors"
	"testing"
)

// fcBuilder lays tags out in blocks the way ext4's fast-commit writer
// does: a record that does not fit the rest of a block is preceded by a
// PAD filling it, and each commit ends with a TAIL padded to the block
// end whose fc_crc covers everything since the previous TAIL.
type fcBuilder struct {
	bs     int
	blocks [][]byte
	cur    []byte
	crc    uint32
}

func (b *fcBuilder) add(t FCTag) {
	need := FCTagBaseLen + len(t.Value)
	if len(b.cur)+need > b.bs || b.bs-len(b.cur)-need < FCTagBaseLen && b.bs-len(b.cur)-need != 0 {
		pad := FCTag{Tag: FCTagPad, Value: make([]byte, b.bs-len(b.cur)-FCTagBaseLen)}
		b.crc = FCRecordCrc(b.crc, pad)
		b.cur = pad.Encode(b.cur)
		b.flush()
	}
	b.crc = FCRecordCrc(b.crc, t)
	b.cur = t.Encode(b.cur)
}

func (b *fcBuilder) flush() {
	if len(b.cur) > 0 {
		blk := make([]byte, b.bs)
		copy(blk, b.cur)
		b.blocks = append(b.blocks, blk)
		b.cur = nil
	}
}

// tail ends a commit; with corrupt set its fc_crc is wrong.
func (b *fcBuilder) tail(tid uint32, corrupt bool) {
	if b.bs-len(b.cur) < FCTagBaseLen+fcTailLen {
		b.add(FCTag{Tag: FCTagPad, Value: make([]byte, b.bs-len(b.cur)-FCTagBaseLen)})
		b.flush()
	}
	n := b.bs - len(b.cur) - FCTagBaseLen
	crc := FCTailCrc(b.crc, tid, n)
	if corrupt {
		crc++
	}
	v := make([]byte, n)
	fle.PutUint32(v, tid)
	fle.PutUint32(v[4:], crc)
	b.cur = FCTag{Tag: FCTagTail, Value: v}.Encode(b.cur)
	b.crc = 0
	b.flush()
}

func testInodeRaw() []byte {
	in := &Inode{Mode: ModeReg | 0o644, LinksCount: 1, Size: 5000, Flags: InodeFlagExtents, ExtraIsize: 32}
	return in.Encode(256)
}

// seedFastCommits returns an area with two commits of tid 7.
func seedFastCommits(bs int) [][]byte {
	b := &fcBuilder{bs: bs}
	b.add(EncodeFCHead(FCHead{Tid: 7}))
	b.add(EncodeFCInode(FCInode{Ino: 12, Raw: testInodeRaw()}))
	b.add(EncodeFCRange(FCRange{Ino: 12, Lblk: 0, Len: 2, Pblk: 1 << 33}, true))
	b.add(EncodeFCDentry(FCTagCreat, FCDentry{Parent: 2, Ino: 12, Name: []byte("file")}))
	b.add(EncodeFCInode(FCInode{Ino: 12, Raw: testInodeRaw()}))
	b.tail(7, false)
	b.add(EncodeFCRange(FCRange{Ino: 12, Lblk: 1, Len: 1}, false))
	b.add(EncodeFCRange(FCRange{Ino: 12, Lblk: 5, Len: 3, Pblk: 99, Unwritten: true}, true))
	b.add(EncodeFCDentry(FCTagLink, FCDentry{Parent: 2, Ino: 12, Name: []byte("other")}))
	b.add(EncodeFCDentry(FCTagUnlink, FCDentry{Parent: 2, Ino: 12, Name: []byte("file")}))
	b.tail(7, false)
	return b.blocks
}

func TestFCTagRoundTrip(t *testing.T) {
	r := FCRange{Ino: 5, Lblk: 10, Len: 32768, Pblk: 0xABCD_12345678}
	got, err := EncodeFCRange(r, true).Range()
	if err != nil || got != r {
		t.Fatalf("ADD_RANGE round trip: %+v, %v", got, err)
	}
	r = FCRange{Ino: 5, Lblk: 10, Len: 32767, Pblk: 77, Unwritten: true}
	if got, _ := EncodeFCRange(r, true).Range(); got != r {
		t.Fatalf("unwritten ADD_RANGE round trip: %+v", got)
	}
	d := FCRange{Ino: 5, Lblk: 1, Len: 0x7FFFFFFF}
	if got, _ := EncodeFCRange(d, false).Range(); got != d {
		t.Fatalf("DEL_RANGE round trip: %+v", got)
	}
	if h := EncodeFCHead(FCHead{Features: 0, Tid: 9}).Head(); h.Tid != 9 {
		t.Fatalf("HEAD: %+v", h)
	}
	de, err := EncodeFCDentry(FCTagLink, FCDentry{Parent: 2, Ino: 3, Name: []byte("x")}).Dentry()
	if err != nil || de.Parent != 2 || de.Ino != 3 || string(de.Name) != "x" {
		t.Fatalf("dentry: %+v, %v", de, err)
	}
	for _, bad := range []string{".", "..", "a/b", "a\x00b"} {
		if _, err := EncodeFCDentry(FCTagCreat, FCDentry{Parent: 2, Ino: 3, Name: []byte(bad)}).Dentry(); err == nil {
			t.Errorf("dentry name %q accepted", bad)
		}
	}
	if _, err := EncodeFCRange(FCRange{Ino: 1}, true).Range(); err == nil {
		t.Fatal("an empty ADD_RANGE extent decoded")
	}
	tag := EncodeFCInode(FCInode{Ino: 12, Raw: testInodeRaw()})
	blk := tag.Encode(nil)
	tags, err := DecodeFCBlock(append(blk, 0, 0, 0, 0), 0)
	if len(tags) != 1 || tags[0].Tag != FCTagInode || !bytes.Equal(tags[0].Value, tag.Value) {
		t.Fatalf("DecodeFCBlock: %v, %v", tags, err)
	}
}

// TestScanFastCommits checks the validity rules FC1 and FC2.
func TestScanFastCommits(t *testing.T) {
	const bs = 1024
	area := seedFastCommits(bs)
	s := ScanFastCommits(area, 7)
	if s.Commits != 2 || s.Stop != nil || len(s.Tags) != 11 {
		t.Fatalf("valid area: %d commits, %d tags, stop %v", s.Commits, len(s.Tags), s.Stop)
	}
	if s.Tags[0].Tag != FCTagHead || s.Tags[len(s.Tags)-1].Tag != FCTagTail {
		t.Fatalf("tags run from %s to %s", FCTagName(s.Tags[0].Tag), FCTagName(s.Tags[len(s.Tags)-1].Tag))
	}
	// FC2: a full commit of tid 7 supersedes the area (expected tid 8).
	if s := ScanFastCommits(area, 8); len(s.Tags) != 0 || s.Stop == nil {
		t.Fatalf("stale area replayed %d tags", len(s.Tags))
	}
	// FC1: no HEAD at the start, nothing to replay.
	if s := ScanFastCommits([][]byte{make([]byte, bs)}, 7); len(s.Tags) != 0 || s.Stop != nil {
		t.Fatalf("empty area: %+v", s)
	}
	// A bad crc in the second commit keeps the first.
	b := &fcBuilder{bs: bs}
	b.add(EncodeFCHead(FCHead{Tid: 3}))
	b.add(EncodeFCDentry(FCTagLink, FCDentry{Parent: 2, Ino: 12, Name: []byte("a")}))
	b.tail(3, false)
	b.add(EncodeFCDentry(FCTagLink, FCDentry{Parent: 2, Ino: 13, Name: []byte("b")}))
	b.tail(3, true)
	b.add(EncodeFCDentry(FCTagLink, FCDentry{Parent: 2, Ino: 14, Name: []byte("c")}))
	b.tail(3, false)
	s = ScanFastCommits(b.blocks, 3)
	if s.Commits != 1 || len(s.Tags) != 3 || !errors.Is(s.Stop, ErrCorrupt) {
		t.Fatalf("bad second tail: %d commits, %d tags, stop %v", s.Commits, len(s.Tags), s.Stop)
	}
	// A bad first tail replays nothing.
	b = &fcBuilder{bs: bs}
	b.add(EncodeFCHead(FCHead{Tid: 3}))
	b.tail(3, true)
	if s := ScanFastCommits(b.blocks, 3); len(s.Tags) != 0 || s.Stop == nil {
		t.Fatalf("bad first tail: %+v", s)
	}
	// Unsupported HEAD features stop the scan.
	b = &fcBuilder{bs: bs}
	b.add(EncodeFCHead(FCHead{Features: 1, Tid: 3}))
	b.tail(3, false)
	if s := ScanFastCommits(b.blocks, 3); len(s.Tags) != 0 {
		t.Fatalf("HEAD with features 1 replayed %d tags", len(s.Tags))
	}
	// An unknown tag after a valid commit ends the scan there.
	area = seedFastCommits(bs)
	junk := make([]byte, bs)
	fle.PutUint16(junk, 0x77)
	fle.PutUint16(junk[2:], 4)
	area = append(area[:1], junk)
	if s := ScanFastCommits(area, 7); s.Commits != 1 || s.Stop == nil {
		t.Fatalf("unknown tag: %d commits, stop %v", s.Commits, s.Stop)
	}
}

func TestFCMergeInode(t *testing.T) {
	ondisk := testInodeRaw()
	copy(ondisk[0x28:], []byte{0x0A, 0xF3, 1, 0, 4, 0}) // an extent root with one entry
	fc := (&Inode{Mode: ModeReg | 0o600, LinksCount: 2, Size: 77, Flags: InodeFlagExtents, ExtraIsize: 32, Generation: 5}).Encode(256)
	n, err := FCInodeLen(fc, 256)
	if err != nil || n != 160 {
		t.Fatalf("FCInodeLen = %d, %v", n, err)
	}
	FCMergeInode(ondisk[:n], fc[:n])
	in, err := DecodeInode(ondisk, 256)
	if err != nil {
		t.Fatal(err)
	}
	if in.Mode != ModeReg|0o600 || in.LinksCount != 2 || in.Size != 77 || in.Generation != 5 || in.Block[2] != 1 {
		t.Fatalf("merged inode: %+v", in)
	}
	bad := append([]byte(nil), fc...)
	fle.PutUint16(bad[0x80:], 200)
	if _, err := FCInodeLen(bad, 256); err == nil {
		t.Fatal("i_extra_isize 200 accepted for 256-byte inodes")
	}
}

// FuzzFastCommitArea decodes arbitrary fast-commit blocks: no panics, every
// decoded record re-encodes to its bytes, and a scan returns only whole
// commits (ending in a TAIL).
func FuzzFastCommitArea(f *testing.F) {
	for _, b := range seedFastCommits(1024) {
		f.Add(b, uint32(7))
	}
	f.Add(make([]byte, 1024), uint32(0))
	f.Fuzz(func(t *testing.T, b []byte, tid uint32) {
		tags, _ := DecodeFCBlock(b, 0)
		var re []byte
		for _, tg := range tags {
			if !bytes.Equal(b[tg.Off:tg.Off+FCTagBaseLen+len(tg.Value)], tg.Encode(nil)) {
				t.Fatalf("record at %d does not re-encode", tg.Off)
			}
			re = tg.Encode(re)
			switch tg.Tag {
			case FCTagAddRange, FCTagDelRange:
				tg.Range()
			case FCTagCreat, FCTagLink, FCTagUnlink:
				_, _ = tg.Dentry()
			case FCTagInode:
				FCInodeLen(tg.Inode().Raw, 256)
			case FCTagHead:
				tg.Head()
			case FCTagTail:
				tg.Tail()
			}
		}
		if !bytes.Equal(re, b[:len(re)]) {
			t.Fatal("records do not re-encode to the block's prefix")
		}
		half := len(b) / 2
		s := ScanFastCommits([][]byte{b[:half], b[half:]}, tid)
		if n := len(s.Tags); n > 0 && s.Tags[n-1].Tag != FCTagTail {
			t.Fatalf("scan ends with %s", FCTagName(s.Tags[n-1].Tag))
		}
	})
}
