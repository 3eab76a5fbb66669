package journal

import (
	"testing"
)

// TestAdv27HeldRevokesWakeCheckpoint: the revoke records of committed
// transactions stay in memory until a checkpoint, and a revoke record
// costs the log a few bytes but memory a map entry or two. With the
// checkpoint woken only by the log's use, a workload that frees metadata
// blocks over and over (directories made and removed: 500 pairs per commit
// kept 70,000 records and ~4 MiB after 140 commits with a 16 MiB log,
// growing until the log was half full) held memory many times half the
// log's size. Past maxHeldRevokes held records, a commit wakes the
// checkpoint whatever the log's use.
func TestAdv27HeldRevokesWakeCheckpoint(t *testing.T) {
	const logBlocks, bs = 8192, 1024
	blocks := int64(1 + logBlocks + 2*maxHeldRevokes)
	dev := newMemDev(blocks * bs)
	j, err := Create(Config{Dev: dev, BlockSize: bs, Blocks: logBlocks, CommitInterval: -1,
		Map: func(b uint32) (uint64, error) { return uint64(b) + 1, nil }}, CreateOptions{CsumV3: true, Is64Bit: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	perTxn := 4 * j.f.RevokesPerBlock() // four revoke blocks a transaction
	home := uint64(1 + logBlocks)
	kicked := false
	for i := 0; i*perTxn <= 2*maxHeldRevokes && !kicked; i++ {
		h, err := j.Start(perTxn)
		if err != nil {
			t.Fatal(err)
		}
		// The same blocks each time, as a directory removed and made
		// again reuses its block.
		for b := range perTxn {
			if err := h.Revoke(home + uint64(b)); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.Stop(); err != nil {
			t.Fatal(err)
		}
		if err := j.Commit(); err != nil {
			t.Fatal(err)
		}
		j.mu.Lock()
		half := j.mu.used > (j.last-j.first)/2
		j.mu.Unlock()
		if half {
			t.Fatalf("log half full after %d transactions: the test's log is too small to tell", i+1)
		}
		// Commit wakes the checkpoint goroutine before it returns: a
		// kick is pending, or the checkpoint took it already.
		kicked = len(j.cpKick) > 0 || j.Stats().Checkpoints > 0
	}
	if !kicked {
		j.mu.Lock()
		held, used := j.mu.heldRevokes, j.mu.used
		j.mu.Unlock()
		t.Fatalf("%d revoke records held by committed transactions and no checkpoint woken (log %d/%d blocks used)", held, used, logBlocks)
	}
}
