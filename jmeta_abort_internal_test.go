package ext4io

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestSyncAbortKeepsNewerMetadata is the torture failure "create f3 ...
// open: file does not exist" (seed 20261202, round 311): a Volume.Sync
// (commit with wait) logged a directory block, released the transaction
// gate and waited for the journal; meanwhile a Create changed the block
// again and another commit moved the newer copy into the journal; then the
// journal aborted and the waiting Sync put its older copy back into the
// pending set, where it shadowed the newer one: the just-created name
// vanished from the in-memory directory.
func TestSyncAbortKeepsNewerMetadata(t *testing.T) {
	mem := memdev.NewBlockSize(32<<20, 4096)
	if err := Format(mem, FormatOptions{BlockSize: 4096}); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		armed   bool
		blocked = make(chan struct{})
		release = make(chan struct{})
		dead    bool
	)
	inj := errordev.Func(func(op errordev.Op) error {
		if op.Kind != errordev.Write && op.Kind != errordev.Flush {
			return nil
		}
		mu.Lock()
		if dead {
			mu.Unlock()
			return errordev.ErrInjected
		}
		if !armed {
			mu.Unlock()
			return nil
		}
		armed = false
		mu.Unlock()
		// The first write of the armed commit: hold it until the test
		// has logged a newer copy, then fail it (and everything after).
		close(blocked)
		<-release
		mu.Lock()
		dead = true
		mu.Unlock()
		return errordev.ErrInjected
	})
	v, err := Open(errordev.New(mem, inj), Options{Writable: true, PageCacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if err := v.Mkdir("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := v.Create("/d/a")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := v.Sync(); err != nil {
		t.Fatal(err)
	}
	// Older copy of /d's block: {a, b}.
	if f, err = v.Create("/d/b"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	mu.Lock()
	armed = true
	mu.Unlock()
	syncErr := make(chan error, 1)
	go func() { syncErr <- v.Sync() }() // logs {a, b}, then waits for the commit
	select {
	case <-blocked:
	case <-time.After(10 * time.Second):
		t.Fatal("the commit never wrote")
	}
	// The Sync released the gate and waits: a newer copy {a, b, c} goes
	// into the next transaction, as an operation's endOp commit does.
	if f, err = v.Create("/d/c"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := v.jm.commit(false); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-syncErr; err == nil || !errors.Is(err, ErrIO) {
		t.Fatalf("Sync after the injected fault: %v, want an I/O error", err)
	}
	for _, name := range []string{"/d/a", "/d/b", "/d/c"} {
		f, err := v.Open(name)
		if err != nil {
			t.Fatalf("after the journal aborted: %v", err)
		}
		f.Close()
	}
}

// TestCommitWaitsForEarlierReleases: a waiting commit returns only once
// the blocks freed by every earlier commit are allocatable, also when it
// freed none itself. Before, it waited for its own frees only: after an
// unlink whose operation committed without waiting, the retry of an
// allocation that failed for space (retryNoSpace, a commit with nothing
// freed) could run while the earlier commit's blocks were still being
// released, and fail with ErrNoSpace on a half-empty volume.
func TestCommitWaitsForEarlierReleases(t *testing.T) {
	_, v := memVolume(t, 64<<20, 4096)
	defer v.Close()
	var blks []uint64
	if err := v.beginOp(); err != nil {
		t.Fatal(err)
	}
	for range 4000 {
		s, _, err := v.alloc.Alloc(0, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		blks = append(blks, s)
	}
	if err := v.endOp(); err != nil {
		t.Fatal(err)
	}
	if err := v.jm.commit(true); err != nil {
		t.Fatal(err)
	}
	if err := v.beginOp(); err != nil {
		t.Fatal(err)
	}
	for _, b := range blks {
		if err := v.freeMapped(b, 1); err != nil {
			t.Fatal(err)
		}
	}
	v.txnGate.RUnlock(0) // endOp without its commit
	if err := v.jm.commit(false); err != nil {
		t.Fatal(err)
	}
	if err := v.jm.commit(true); err != nil {
		t.Fatal(err)
	}
	if n := v.jm.busyBlocks.Load(); n != 0 {
		t.Fatalf("%d freed blocks not allocatable after a waiting commit", n)
	}
}
