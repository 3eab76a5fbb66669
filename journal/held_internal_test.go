package journal

import (
	"bytes"
	"runtime"
	"testing"
)

// heldLayout is the device of the held-bytes tests: the journal superblock
// and log in blocks [1, 1+logBlocks), home blocks after.
const heldLog, heldBS = 16384, 1024

func newHeldJournal(t *testing.T, homeBlocks int, maxHeld int64) (*Journal, *memDev, uint64) {
	t.Helper()
	dev := newMemDev(int64(1+heldLog+homeBlocks) * heldBS)
	j, err := Create(Config{Dev: dev, BlockSize: heldBS, Blocks: heldLog, CommitInterval: -1, MaxHeldBytes: maxHeld,
		Map: func(b uint32) (uint64, error) { return uint64(b) + 1, nil }},
		CreateOptions{CsumV3: true, Is64Bit: true, NoZeroLog: true})
	if err != nil {
		t.Fatal(err)
	}
	return j, dev, uint64(1 + heldLog)
}

// heldCheck returns the held bytes after checking them against the
// copies the committed transactions actually keep.
func heldCheck(t *testing.T, j *Journal) int64 {
	t.Helper()
	j.mu.Lock()
	defer j.mu.Unlock()
	var want int64
	for _, c := range j.mu.checkpoint {
		n := 0
		for _, b := range c.buffers {
			if b != nil {
				n++
			}
		}
		if n != c.held {
			t.Fatalf("transaction %d: held %d, %d copies kept", c.tid, c.held, n)
		}
		want += int64(n) * int64(j.bs)
	}
	if j.mu.heldBytes != want {
		t.Fatalf("heldBytes %d, committed transactions keep %d bytes", j.mu.heldBytes, want)
	}
	return want
}

// commitDistinct commits one transaction dirtying n blocks from first on.
func commitDistinct(t *testing.T, j *Journal, first uint64, n int) uint32 {
	t.Helper()
	h, err := j.Start(n)
	if err != nil {
		t.Fatal(err)
	}
	tid := h.TID()
	buf := make([]byte, j.bs)
	for b := first; b < first+uint64(n); b++ {
		buf[0], buf[1] = byte(b), byte(b>>8)
		if err := h.GetWriteAccess(b); err != nil {
			t.Fatal(err)
		}
		if err := h.Dirty(b, buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := j.Commit(); err != nil {
		t.Fatal(err)
	}
	return tid
}

// TestHeldBytesBounded: the block copies of committed transactions stay
// in memory until a checkpoint writes them home. With the checkpoint woken
// only by the log's use, a large log held up to half its size of them
// (512 MiB with the 1 GiB log mkfs.ext4 gives a 128 GiB filesystem),
// whatever the configured caches. Commits of distinct blocks that never
// fill half the log must keep the held bytes within twice MaxHeldBytes
// (past which Start checkpoints itself) plus the transaction that crossed
// it, wake the checkpoint, and leave every block at home.
func TestHeldBytesBounded(t *testing.T) {
	const bound, perTxn, txns = 256 << 10, 32, 150
	j, dev, home := newHeldJournal(t, perTxn*txns, bound)
	defer j.Close()
	peak := int64(0)
	for i := range txns {
		commitDistinct(t, j, home+uint64(i*perTxn), perTxn)
		held := heldCheck(t, j)
		peak = max(peak, held)
		if limit := int64(2*bound + perTxn*heldBS); held > limit {
			t.Fatalf("after %d commits: %d bytes of block copies held, bound %d (%d with the transaction that crossed twice the bound)", i+1, held, bound, limit)
		}
		j.mu.Lock()
		half := j.mu.used > (j.last-j.first)/2
		j.mu.Unlock()
		if half {
			t.Fatalf("log half full after %d transactions: the test's log is too small to tell", i+1)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	st := j.Stats()
	if st.Checkpoints < 2 {
		t.Fatalf("%d checkpoints (peak %d bytes held): the bound woke none before Close", st.Checkpoints, peak)
	}
	if held := heldCheck(t, j); held != 0 {
		t.Fatalf("%d bytes held after Close", held)
	}
	got, want := make([]byte, heldBS), make([]byte, heldBS)
	for b := home; b < home+perTxn*txns; b++ {
		want[0], want[1] = byte(b), byte(b>>8)
		if _, err := dev.ReadAt(got, int64(b)*heldBS); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("home block %d not written by the checkpoints", b)
		}
	}
	t.Logf("%d checkpoints, %d space waits, peak %d bytes held (bound %d)", st.Checkpoints, st.SpaceWaits, peak, bound)
}

// TestHeldBytesStartCheckpoints: when the committed transactions hold more
// than twice MaxHeldBytes (the checkpoint goroutine has not kept up), Start
// writes them home before the handle joins. The bound is lowered after the
// commits, so no commit woke the checkpoint goroutine.
func TestHeldBytesStartCheckpoints(t *testing.T) {
	const perTxn, txns = 32, 20
	j, _, home := newHeldJournal(t, perTxn*txns, -1)
	defer j.Close()
	for i := range txns {
		commitDistinct(t, j, home+uint64(i*perTxn), perTxn)
	}
	held := heldCheck(t, j)
	if held != perTxn*txns*heldBS {
		t.Fatalf("no bound: %d bytes held, want %d", held, perTxn*txns*heldBS)
	}
	if st := j.Stats(); st.Checkpoints != 0 {
		t.Fatalf("%d checkpoints with no bound and the log far from half full", st.Checkpoints)
	}
	j.mu.Lock()
	j.maxHeld = held/2 - 1
	j.mu.Unlock()
	h, err := j.Start(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	if held := heldCheck(t, j); held != 0 {
		t.Fatalf("Start over twice the bound left %d bytes held", held)
	}
	if st := j.Stats(); st.Checkpoints != 1 || st.SpaceWaits != 1 {
		t.Fatalf("Start over twice the bound: %d checkpoints, %d space waits; want 1, 1", st.Checkpoints, st.SpaceWaits)
	}
}

// TestHeldBytesMarkHome: copies MarkHome drops leave the count at once;
// copies it keeps because a checkpoint is writing their transaction leave
// with the transaction; marking one twice counts it once.
func TestHeldBytesMarkHome(t *testing.T) {
	const perTxn = 8
	j, _, home := newHeldJournal(t, 2*perTxn, -1)
	defer j.Close()
	tid := commitDistinct(t, j, home, perTxn)
	commitDistinct(t, j, home+perTxn, perTxn)
	if held := heldCheck(t, j); held != 2*perTxn*heldBS {
		t.Fatalf("%d bytes held, want %d", held, 2*perTxn*heldBS)
	}
	blks := []uint64{home, home + 1, home + 2, home + 100} // the last not in tid
	if j.MarkHome(tid, blks) {
		t.Fatal("MarkHome reported done with a block tid does not hold")
	}
	if held := heldCheck(t, j); held != (2*perTxn-3)*heldBS {
		t.Fatalf("after MarkHome of 3 blocks: %d bytes held, want %d", held, (2*perTxn-3)*heldBS)
	}
	j.MarkHome(tid, blks[:2])
	if held := heldCheck(t, j); held != (2*perTxn-3)*heldBS {
		t.Fatalf("after marking 2 blocks again: %d bytes held, want %d", held, (2*perTxn-3)*heldBS)
	}
	// A checkpoint in progress up to tid: MarkHome keeps the copy (the
	// checkpoint may be reading it) and waits for the checkpoint.
	j.cpMu.Lock()
	j.mu.Lock()
	j.mu.cpActive, j.mu.cpUpTo = true, tid
	j.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		j.MarkHome(tid, []uint64{home + 3})
	}()
	for {
		j.mu.Lock()
		_, marked := j.mu.checkpoint[0].home[home+3]
		j.mu.Unlock()
		if marked {
			break
		}
		runtime.Gosched()
	}
	if held := heldCheck(t, j); held != (2*perTxn-3)*heldBS {
		t.Fatalf("MarkHome during a checkpoint: %d bytes held, want %d", held, (2*perTxn-3)*heldBS)
	}
	j.mu.Lock()
	j.mu.cpActive = false
	j.mu.Unlock()
	j.cpMu.Unlock()
	<-done
	if err := j.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if held := heldCheck(t, j); held != 0 {
		t.Fatalf("after Checkpoint: %d bytes held", held)
	}
}

// TestHeldBytesDefaultLogRhythm: with the default bound, a log of 64 MiB
// (mkfs.ext4's for filesystems of 4 to 16 GiB with 4 KiB blocks, and the
// largest it gives below) is checkpointed when half of it is in use, as
// before the bound: its copies cannot pass 32 MiB first, so the bound
// neither wakes the checkpoint goroutine nor makes Start checkpoint before
// the log's use does. Here 1 KiB blocks, 65536 of them, and transactions
// of 256 distinct blocks: with 6 descriptor and commit blocks each, a
// bound of 31 MiB would be passed before the log is half full.
func TestHeldBytesDefaultLogRhythm(t *testing.T) {
	if testing.Short() {
		t.Skip("fills half of a 64 MiB log")
	}
	const logBlocks, bs, perTxn = 65536, 1024, 256
	homeBlocks := logBlocks/2 + 2*perTxn
	dev := newMemDev(int64(1+logBlocks+homeBlocks) * bs)
	j, err := Create(Config{Dev: dev, BlockSize: bs, Blocks: logBlocks, CommitInterval: -1,
		Map: func(b uint32) (uint64, error) { return uint64(b) + 1, nil }},
		CreateOptions{CsumV3: true, Is64Bit: true, NoZeroLog: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if j.maxHeld != DefaultMaxHeldBytes {
		t.Fatalf("bound %d, want the default %d", j.maxHeld, DefaultMaxHeldBytes)
	}
	home := uint64(1 + logBlocks)
	for i := 0; ; i++ {
		commitDistinct(t, j, home+uint64(i*perTxn), perTxn)
		j.mu.Lock()
		half := j.mu.used > (j.last-j.first)/2
		held, over, hard := j.mu.heldBytes, j.heldOverLocked(j.maxHeld), j.heldOverLocked(j.maxHeldHard())
		j.mu.Unlock()
		if over && !half || hard {
			t.Fatalf("after %d commits: %d bytes of copies held wake the checkpoint (Start checkpoints: %v) before the log is half full", i+1, held, hard)
		}
		if half {
			if st := j.Stats(); st.SpaceWaits != 0 {
				t.Fatalf("%d space waits", st.SpaceWaits)
			}
			break
		}
	}
}
