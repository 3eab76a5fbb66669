package journal

import (
	"bytes"
	"testing"
)

// commitBlock commits a transaction that logs data as blk's contents.
func commitBlock(t *testing.T, j *Journal, blk uint64, data []byte) {
	t.Helper()
	h, err := j.Start(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.GetWriteAccess(blk); err != nil {
		t.Fatal(err)
	}
	if err := h.Dirty(blk, data); err != nil {
		t.Fatal(err)
	}
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := j.Commit(); err != nil {
		t.Fatal(err)
	}
}

// revoke commits a transaction that revokes blk.
func revoke(t *testing.T, j *Journal, blk uint64) {
	t.Helper()
	h, err := j.Start(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Revoke(blk); err != nil {
		t.Fatal(err)
	}
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := j.Commit(); err != nil {
		t.Fatal(err)
	}
}

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
	logBlock := func(b uint64, data []byte) { commitBlock(t, j, b, data) }
	logBlock(blk, meta)
	logBlock(other, meta)
	// Freed: forgotten and revoked by a transaction that commits; then
	// reused for data, written straight home.
	j.Forget(blk)
	revoke(t, j, blk)
	j.WaitCheckpoint()
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

// TestForgetBeforeRevokeCommits: a checkpoint that runs after a block was
// forgotten but before the transaction revoking it commits writes the
// committed copy home, since the log's tail passes it. Skipping it (the
// bug a torture run found: a directory created, checkpointed and being
// removed when the power went) left the directory pointing at a block
// holding a file's old data, with nothing left in the log to replay.
func TestForgetBeforeRevokeCommits(t *testing.T) {
	dev := newTestDev(t)
	j, err := Create(testConfig(dev), CreateOptions{CsumV3: true, Is64Bit: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	blk := uint64(tHome0)
	old := bytes.Repeat([]byte{0x0D}, tBS) // what the block held before
	dev.WriteAt(old, int64(blk)*tBS)
	meta := bytes.Repeat([]byte{0x4D}, tBS)
	commitBlock(t, j, blk, meta)
	j.Forget(blk) // its revoke is not committed yet
	if err := j.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, tBS)
	dev.ReadAt(buf, int64(blk)*tBS)
	if !bytes.Equal(buf, meta) {
		t.Fatal("checkpoint passed a committed copy whose revoke had not committed without writing it home")
	}
	// Once the revoke commits, the block is the file system's to reuse:
	// later checkpoints leave it alone.
	revoke(t, j, blk)
	j.WaitCheckpoint()
	data := bytes.Repeat([]byte{0xDA}, tBS)
	dev.WriteAt(data, int64(blk)*tBS)
	if err := j.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	dev.ReadAt(buf, int64(blk)*tBS)
	if !bytes.Equal(buf, data) {
		t.Fatal("checkpoint wrote a block whose revoke had committed")
	}
}
