package journal

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInlineCommitFailure: a commit that a Sync runs on its own goroutine
// fails (BeforeCommit returns an error) while other Syncs wait, one for
// that transaction and one for the next, left to the commit goroutine.
// Every Sync returns the error, the journal stays aborted (Start, Sync
// and Close fail with it) and nothing commits after the failure.
func TestInlineCommitFailure(t *testing.T) {
	dev := newTestDev(t)
	cfg := testConfig(dev)
	boom := errors.New("boom")
	var (
		mu     sync.Mutex
		calls  int
		inline bool // the failing commit ran on its Sync's goroutine
		held   = make(chan struct{})
		hold   = make(chan struct{})
	)
	cfg.BeforeCommit = func(tid uint32) error {
		mu.Lock()
		calls++
		first := calls == 1
		mu.Unlock()
		if first {
			buf := make([]byte, 64<<10)
			inline = strings.Contains(string(buf[:runtime.Stack(buf, false)]), "journal.(*Journal).SyncFlushed")
			close(held)
			<-hold
			return boom
		}
		return nil
	}
	j, err := Create(cfg, CreateOptions{UUID: [16]byte{4}, CsumV3: true})
	require.NoError(t, err)
	dirty := func(b uint64) uint32 {
		h, err := j.Start(1)
		require.NoError(t, err)
		require.NoError(t, h.GetWriteAccess(b))
		require.NoError(t, h.Dirty(b, initialBlock(b+1)))
		require.NoError(t, h.Stop())
		return h.TID()
	}
	tid1 := dirty(tHome0)
	errs := make(chan error, 3)
	go func() { errs <- j.Sync(context.Background()) }() // commits inline, held
	<-held
	require.True(t, inline, "the first Sync commits on its own goroutine")
	go func() { errs <- j.WaitCommit(context.Background(), tid1) }()
	dirty(tHome0 + 1)
	go func() { errs <- j.Sync(context.Background()) }() // left to the commit goroutine
	time.Sleep(20 * time.Millisecond)
	close(hold)
	for range 3 {
		select {
		case err := <-errs:
			assert.ErrorIs(t, err, boom)
		case <-time.After(5 * time.Second):
			t.Fatal("a Sync did not return after the commit failed")
		}
	}
	after := make(chan struct{})
	go func() {
		defer close(after)
		_, err := j.Start(1)
		assert.ErrorIs(t, err, boom)
		assert.ErrorIs(t, j.Sync(context.Background()), boom)
		assert.Zero(t, j.Stats().Commits, "nothing committed after the failure")
		assert.ErrorIs(t, j.Close(), boom)
	}()
	select {
	case <-after:
	case <-time.After(5 * time.Second):
		t.Fatal("Start, Sync or Close hung after the failed commit")
	}
}
