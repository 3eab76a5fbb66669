package ext4io

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/stretchr/testify/require"
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

// TestDataReleaseSkipsCheckpoint: blocks freed without a revoke (a
// truncated file's data blocks, never journaled) are released by the
// freeing commit's Sync while a checkpoint is still writing home: no
// checkpoint can hold a copy of them, so the Sync does not wait for it.
func TestDataReleaseSkipsCheckpoint(t *testing.T) {
	mem := memdev.NewBlockSize(32<<20, 4096)
	require.NoError(t, Format(mem, FormatOptions{BlockSize: 4096}))
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
			home = -1
		}
		mu.Unlock()
		if hit {
			close(blocked)
			<-release
		}
		return nil
	})
	v, err := Open(errordev.New(mem, inj), Options{Writable: true, PageCacheBytes: -1})
	require.NoError(t, err)
	defer v.Close()
	var unblock sync.Once
	defer unblock.Do(func() { close(release) })
	require.NoError(t, v.Mkdir("/d", 0o755))
	d, err := v.resolve("/d", true)
	require.NoError(t, err)
	dexts, err := d.Extents()
	d.Close()
	require.NoError(t, err)
	require.Len(t, dexts, 1)
	f, err := v.Create("/f")
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteAt(make([]byte, 8*4096), 0)
	require.NoError(t, err)
	require.NoError(t, v.Sync()) // /d's block is in the log, /f's data home
	mu.Lock()
	home = int64(dexts[0].Physical) * int64(v.BlockSize())
	mu.Unlock()
	cpDone := make(chan error, 1)
	go func() { cpDone <- v.jm.j.Checkpoint() }()
	select {
	case <-blocked:
	case <-time.After(10 * time.Second):
		t.Fatal("the checkpoint did not write /d's block home")
	}
	require.NoError(t, f.Truncate(0))
	require.NotZero(t, v.jm.busyBlocks.Load(), "the data blocks are busy until the truncate commits")
	synced := make(chan error, 1)
	go func() { synced <- f.Sync() }()
	select {
	case err := <-synced:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Sync of a truncate waited for a checkpoint that cannot hold the freed blocks")
	}
	require.Zero(t, v.jm.busyBlocks.Load(), "the data blocks are allocatable once Sync returns")
	unblock.Do(func() { close(release) })
	require.NoError(t, <-cpDone)
}
