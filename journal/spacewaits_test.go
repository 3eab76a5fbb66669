package journal

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStatsSpaceWaits: commits for which the background checkpoint keeps
// log space count no Stats.SpaceWaits; with the checkpoint held at its
// first home write, commits fill the rest of the log and the next Start
// that finds it short counts one (and waits until the checkpoint ends).
func TestStatsSpaceWaits(t *testing.T) {
	mem := newTestDev(t)
	dev := &homeGate{Device: mem, from: tHome0 * tBS, open: make(chan struct{}), hit: make(chan struct{})}
	cfg := testConfig(mem)
	cfg.Dev = dev
	j, err := Create(cfg, CreateOptions{CsumV3: true, Is64Bit: true})
	require.NoError(t, err)
	// Three log blocks a commit: 22 use more than half of the 127-block
	// log and wake the checkpoint, which blocks on its first home write.
	for i := range 22 {
		commitBlock(t, j, uint64(tHome0+i%tHomeN), bytes.Repeat([]byte{byte(i)}, tBS))
	}
	select {
	case <-dev.hit:
	case <-time.After(10 * time.Second):
		t.Fatal("no checkpoint started with more than half the log in use")
	}
	require.Zero(t, j.Stats().SpaceWaits, "the log had room for every commit")
	// Twenty more commits fit the log's rest; one of them finds it short.
	done := make(chan error, 1)
	go func() {
		for i := range 20 {
			h, err := j.Start(1)
			if err == nil {
				b := uint64(tHome0 + i%tHomeN)
				if err = h.GetWriteAccess(b); err == nil {
					err = h.Dirty(b, bytes.Repeat([]byte{0xA0 + byte(i)}, tBS))
				}
				if serr := h.Stop(); err == nil {
					err = serr
				}
			}
			if err == nil {
				err = j.Sync(context.Background())
			}
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	require.Eventually(t, func() bool { return j.Stats().SpaceWaits > 0 }, 10*time.Second, time.Millisecond,
		"no Start found the log short with the checkpoint held")
	close(dev.open)
	require.NoError(t, <-done)
	require.NoError(t, j.Close())
}
