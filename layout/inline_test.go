package layout

import "testing"

func TestInlineDirParentRoundTrip(t *testing.T) {
	var blk [InodeBlockSize]byte
	for _, ino := range []uint32{2, 11, 0x01020304, 1<<32 - 1} {
		SetInlineDirParent(blk[:], ino)
		if got := InlineDirParent(blk[:]); got != ino {
			t.Fatalf("parent %#x decodes as %#x", ino, got)
		}
		if blk[0] != byte(ino) || blk[3] != byte(ino>>24) {
			t.Fatalf("parent %#x stored as % x, want little-endian", ino, blk[:4])
		}
	}
	if blk[InlineDirParentLen] != 0 {
		t.Fatal("parent pointer wrote past its 4 bytes")
	}
}
