package journal

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

const (
	fcJLen  = 1040 // journal blocks: 1024 of log + 16 of fast commits
	fcNum   = 16
	fcHome0 = 1100 // first home block
	fcDev   = 1200
)

func fcConfig(dev *memDev) Config {
	return Config{Dev: dev, BlockSize: tBS, Blocks: fcJLen, CommitInterval: -1,
		Map: func(j uint32) (uint64, error) { return uint64(j) + tJOff, nil }}
}

// newFastCommitJournal creates a journal and turns the fast_commit feature
// on with s_num_fc_blks = numFC, as mke2fs -O fast_commit does.
func newFastCommitJournal(t *testing.T, dev *memDev, numFC uint32) {
	t.Helper()
	j, err := Create(fcConfig(dev), CreateOptions{CsumV3: true, Is64Bit: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, tBS)
	dev.ReadAt(buf, tJOff*tBS)
	sb, err := DecodeSuperblock(buf)
	if err != nil {
		t.Fatal(err)
	}
	sb.FeatureIncompat |= FeatureIncompatFastCommit
	sb.NumFCBlocks = numFC
	sb.SetChecksum()
	sb.Encode(buf)
	dev.WriteAt(buf, tJOff*tBS)
	dev.Flush()
}

// TestFastCommitArea checks that the log leaves the fast-commit area alone
// while it wraps (FC1's layout), and that Recover hands the area to
// Config.FastCommit with the tid after the last complete transaction
// (FC2) before emptying the journal.
func TestFastCommitArea(t *testing.T) {
	dev := newMemDev(fcDev * tBS)
	newFastCommitJournal(t, dev, fcNum)
	// Mark the area, including the unused block between log and area.
	mark := func(b uint32) []byte { return bytes.Repeat([]byte{0xFC, byte(b)}, tBS/2) }
	for b := uint32(fcJLen - fcNum); b < fcJLen; b++ {
		dev.WriteAt(mark(b), int64(b+tJOff)*tBS)
	}
	j, err := Open(fcConfig(dev))
	if err != nil {
		t.Fatal(err)
	}
	if j.last != fcJLen-fcNum || j.fcFirst != fcJLen-fcNum+1 || j.fcLast != fcJLen {
		t.Fatalf("log ends at %d, fast commits [%d,%d)", j.last, j.fcFirst, j.fcLast)
	}
	// Enough transactions to wrap the 1023-block log several times.
	for i := range 1200 {
		h, err := j.Start(3)
		if err != nil {
			t.Fatal(err)
		}
		for k := range 3 {
			b := uint64(fcHome0 + (i+k)%50)
			h.GetWriteAccess(b)
			h.Dirty(b, bytes.Repeat([]byte{byte(i), byte(k)}, tBS/2))
		}
		h.Stop()
		if err := j.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// Copied under the device's lock: the background checkpoint may be
	// writing.
	cur := dev.snapshot()
	for b := uint32(fcJLen - fcNum); b < fcJLen; b++ {
		got := cur[int64(b+tJOff)*tBS : int64(b+tJOff+1)*tBS]
		if !bytes.Equal(got, mark(b)) {
			t.Fatalf("the log wrote journal block %d, in the fast-commit area", b)
		}
	}
	// Crash now: the journal holds committed transactions.
	img := dev.snapshot()
	j.Close()
	crashed := newMemDev(int64(len(img)))
	copy(crashed.cur, img)
	copy(crashed.durable, img)
	var area FastCommitArea
	cfg := fcConfig(crashed)
	cfg.FastCommit = func(a FastCommitArea) (int, error) {
		area = a
		// The log must be home already and the journal not yet emptied.
		if !crashedNeedsRecovery(crashed) {
			t.Error("journal emptied before the fast-commit replay")
		}
		return 5, nil
	}
	j2, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	info, err := j2.Recover()
	if err != nil {
		t.Fatal(err)
	}
	if info.FastCommitTags != 5 || area.ExpectedTid != info.EndSeq || len(area.Blocks) != fcNum-1 {
		t.Fatalf("FastCommit saw tid %d and %d blocks (info %+v)", area.ExpectedTid, len(area.Blocks), info)
	}
	if !bytes.Equal(area.Blocks[0], mark(fcJLen-fcNum+1)) {
		t.Fatal("FastCommit's first block is not j_fc_first")
	}
	if j2.NeedsRecovery() {
		t.Fatal("journal still needs recovery")
	}
	j2.Close()

	// A replayer error leaves the journal as it was.
	crashed = newMemDev(int64(len(img)))
	copy(crashed.cur, img)
	cfg = fcConfig(crashed)
	boom := errors.New("boom")
	cfg.FastCommit = func(FastCommitArea) (int, error) { return 0, boom }
	j3, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j3.Recover(); !errors.Is(err, boom) {
		t.Fatalf("Recover = %v, want the replayer's error", err)
	}
	if !crashedNeedsRecovery(crashed) {
		t.Fatal("a failed fast-commit replay emptied the journal")
	}
	// Nor may closing the journal after the failure empty it.
	if err := j3.Close(); err == nil {
		t.Error("Close after a failed recovery reported no error")
	}
	if !crashedNeedsRecovery(crashed) {
		t.Fatal("Close after a failed recovery emptied the journal")
	}
}

func crashedNeedsRecovery(d *memDev) bool {
	sb, err := DecodeSuperblock(d.cur[tJOff*tBS : (tJOff+1)*tBS])
	return err == nil && sb.Start != 0
}

func TestFastCommitAreaTooBig(t *testing.T) {
	dev := newMemDev(fcDev * tBS)
	newFastCommitJournal(t, dev, 100) // leaves 940 < 1024 blocks of log
	if _, err := Open(fcConfig(dev)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open = %v, want ErrCorrupt", err)
	}
}
