package ext4io

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestReleaseWaitsForCheckpoint checks the wiring of
// journal.WaitCheckpoint: a directory block that a committed transaction
// logged, then an rmdir revoked and freed, stays unallocatable while a
// checkpoint that began before the rmdir's commit is still writing the
// block's old copy home; it is released when the checkpoint ends.
// Otherwise a new owner's data could land on the block before the stale
// copy does (the torture failure fixed by 51ad3cd, seed 20261222).
func TestReleaseWaitsForCheckpoint(t *testing.T) {
	mem := memdev.NewBlockSize(32<<20, 4096)
	if err := Format(mem, FormatOptions{BlockSize: 4096}); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		home    int64 = -1 // the directory block's device offset, once known
		blocked       = make(chan struct{})
		release       = make(chan struct{})
	)
	inj := errordev.Func(func(op errordev.Op) error {
		mu.Lock()
		hit := op.Kind == errordev.Write && home >= 0 && op.Off == home
		if hit {
			home = -1 // block the first such write only
		}
		mu.Unlock()
		if hit {
			close(blocked)
			<-release
		}
		return nil
	})
	v, err := Open(errordev.New(mem, inj), Options{Writable: true, PageCacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	var unblock sync.Once
	// Runs before Close, which would wait for the checkpoint.
	defer unblock.Do(func() { close(release) })
	if err := v.Mkdir("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := v.resolve("/d", true)
	if err != nil {
		t.Fatal(err)
	}
	exts, err := d.Extents()
	d.Close()
	if err != nil || len(exts) != 1 || exts[0].Length != 1 {
		t.Fatalf("/d's blocks: %+v, %v", exts, err)
	}
	if err := v.Sync(); err != nil { // the block's copy is in the log
		t.Fatal(err)
	}
	mu.Lock()
	home = int64(exts[0].Physical) * int64(v.BlockSize())
	mu.Unlock()
	cpDone := make(chan error, 1)
	go func() { cpDone <- v.jm.j.Checkpoint() }()
	select {
	case <-blocked:
	case <-time.After(10 * time.Second):
		t.Fatal("the checkpoint did not write /d's block home")
	}
	if err := v.Rmdir("/d"); err != nil {
		t.Fatal(err)
	}
	// The revoke commits. Not v.Sync: it waits for the release too.
	if err := v.jm.commit(false); err != nil {
		t.Fatal(err)
	}
	if err := v.jm.j.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := v.jm.busyBlocks.Load(); n < 1 {
		t.Fatalf("busy blocks %d after the rmdir's commit, want the directory block", n)
	}
	// The release runs in the background after the commit: give it time
	// to (wrongly) run.
	time.Sleep(200 * time.Millisecond)
	if n := v.jm.busyBlocks.Load(); n < 1 {
		t.Fatal("the directory block was released while a checkpoint was writing its old copy home")
	}
	unblock.Do(func() { close(release) })
	if err := <-cpDone; err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for v.jm.busyBlocks.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("busy blocks %d after the checkpoint ended", v.jm.busyBlocks.Load())
		}
		time.Sleep(time.Millisecond)
	}
}
