package journal

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSyncCommitsInline: a lone Sync that finds no commit in flight
// commits on its own goroutine (no hand-off to the commit goroutine and
// back); a Sync with a context that can end, one that finds a commit in
// flight, and one that runs while Syncs have been running alongside each
// other leave their transactions to the commit goroutine. All return with
// their transaction committed.
func TestSyncCommitsInline(t *testing.T) {
	dev := newTestDev(t)
	cfg := testConfig(dev)
	var (
		mu      sync.Mutex
		callers = map[uint32]string{} // tid -> who ran its commit
		hold    = make(chan struct{})
		held    = make(chan struct{})
		holdTid atomic.Uint32
	)
	cfg.BeforeCommit = func(tid uint32) error {
		buf := make([]byte, 64<<10)
		stack := string(buf[:runtime.Stack(buf, false)])
		who := "other"
		switch {
		case strings.Contains(stack, "journal.(*Journal).SyncFlushed"):
			who = "sync"
		case strings.Contains(stack, "journal.(*Journal).commitLoop"):
			who = "loop"
		}
		mu.Lock()
		callers[tid] = who
		mu.Unlock()
		if tid == holdTid.Load() {
			close(held)
			<-hold // this commit stays in flight
		}
		return nil
	}
	j, err := Create(cfg, CreateOptions{UUID: [16]byte{3}, CsumV3: true})
	require.NoError(t, err)
	defer j.Close()
	dirty := func(b uint64) uint32 {
		h, err := j.Start(1)
		require.NoError(t, err)
		require.NoError(t, h.GetWriteAccess(b))
		require.NoError(t, h.Dirty(b, initialBlock(b+1)))
		require.NoError(t, h.Stop())
		return h.TID()
	}
	// A lone Sync with a context that can end: its wait can end before
	// the commit, so the commit goroutine runs it.
	tid0 := dirty(tHome0 + 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, j.Sync(ctx))
	// A lone Sync. Whether the commit goroutine has let go of the last
	// commit when the Sync looks is up to the scheduler (a loaded machine
	// can leave it in flight a moment longer, and the Sync then waits for
	// it and hands its commit over), so lone Syncs are tried until one
	// finds the journal idle: without the inline path, none commits on
	// its own goroutine.
	var tid1 uint32
	for range 50 {
		tid1 = dirty(tHome0)
		require.NoError(t, j.Sync(context.Background()))
		mu.Lock()
		inline := callers[tid1] == "sync"
		mu.Unlock()
		if inline {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	// A Sync whose commit stays in flight, and one that comes meanwhile.
	tid2 := dirty(tHome0 + 1)
	holdTid.Store(tid2)
	done2 := make(chan error, 1)
	go func() { done2 <- j.Sync(context.Background()) }()
	<-held
	tid3 := dirty(tHome0 + 2)
	done3 := make(chan error, 1)
	go func() { done3 <- j.Sync(context.Background()) }()
	select {
	case err := <-done3:
		t.Fatalf("Sync returned (%v) before its transaction could commit", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(hold)
	require.NoError(t, <-done2)
	require.NoError(t, <-done3)
	// Syncs ran alongside each other just now: the next one leaves its
	// commit to the commit goroutine, so that others' changes may join
	// the transaction until that goroutine takes it (group commit).
	tid4 := dirty(tHome0 + 3)
	require.NoError(t, j.Sync(context.Background()))
	mu.Lock()
	defer mu.Unlock()
	// tid2's Sync found the journal idle as tid1's did, or, on a loaded
	// machine, the commit goroutine's last commit not yet let go of.
	require.Contains(t, []string{"sync", "loop"}, callers[tid2])
	require.Equal(t, "sync", callers[tid1], "no lone Sync of 50 committed on its own goroutine")
	require.Equal(t, "loop", callers[tid0])
	require.Equal(t, "loop", callers[tid3])
	require.Equal(t, "loop", callers[tid4])
}
