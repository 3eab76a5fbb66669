package journal

import (
	"bytes"
	"testing"
)

// TestForgetKeepsReusedHome: a metadata block committed to the journal and
// then freed and reused for data must not be overwritten with its old
// metadata by a checkpoint (the bug a long namespace run found), and
// Lookup must stop returning the old copy; a later transaction that
// dirties the block again is checkpointed normally.
func TestForgetKeepsReusedHome(t *testing.T) {
	dev := newTestDev(t)
	j, err := Create(testConfig(dev), CreateOptions{CsumV3: true, Is64Bit: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	blk, other := uint64(tHome0), uint64(tHome0+1)
	meta := bytes.Repeat([]byte{0x4D}, tBS)
	logBlock := func(b uint64, data []byte) {
		h, err := j.Start(1)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.GetWriteAccess(b); err != nil {
			t.Fatal(err)
		}
		if err := h.Dirty(b, data); err != nil {
			t.Fatal(err)
		}
		if err := h.Stop(); err != nil {
			t.Fatal(err)
		}
		if err := j.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	logBlock(blk, meta)
	logBlock(other, meta)
	// Freed and reused for data, written straight home.
	j.Forget(blk)
	data := bytes.Repeat([]byte{0xDA}, tBS)
	dev.WriteAt(data, int64(blk)*tBS)
	buf := make([]byte, tBS)
	if j.Lookup(blk, buf) {
		t.Fatal("Lookup returned the forgotten copy")
	}
	if err := j.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	dev.ReadAt(buf, int64(blk)*tBS)
	if !bytes.Equal(buf, data) {
		t.Fatal("checkpoint wrote the forgotten metadata over the reused block")
	}
	dev.ReadAt(buf, int64(other)*tBS)
	if !bytes.Equal(buf, meta) {
		t.Fatal("checkpoint skipped a block that was not forgotten")
	}
	// Reused as metadata again: the new copy goes home.
	meta2 := bytes.Repeat([]byte{0x2D}, tBS)
	j.Forget(blk)
	logBlock(blk, meta2)
	if !j.Lookup(blk, buf) || !bytes.Equal(buf, meta2) {
		t.Fatal("Lookup does not return the block dirtied after Forget")
	}
	if err := j.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	dev.ReadAt(buf, int64(blk)*tBS)
	if !bytes.Equal(buf, meta2) {
		t.Fatal("checkpoint skipped a block dirtied again after Forget")
	}
}
