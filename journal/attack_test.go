package journal

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestSyncDurableUnderGroupCommit attacks group commit: goroutines log
// their own blocks and Sync concurrently (batched commits, coalesced log
// writes, the log wrapping many times, background checkpoints), while the
// test takes crash images (only flushed state, or a random part of the
// unflushed writes with the last one torn). After recovery every block
// holds what the last Sync that returned nil before the crash covered, or
// newer. Variants: shared device, external journal (FSDev != Dev), a
// journal opened with async_commit (its first commit clears it), and a home
// write failing during a background checkpoint.
func TestSyncDurableUnderGroupCommit(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		external, async, fail bool
	}{
		{name: "shared"},
		{name: "external", external: true},
		{name: "async", async: true},
		{name: "external-async", external: true, async: true},
		{name: "checkpoint-fault", fail: true},
		{name: "external-checkpoint-fault", external: true, fail: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			syncDurableAttack(t, tc.external, tc.async, tc.fail)
		})
	}
}

const (
	atkWorkers = 4
	atkBlocks  = 6 // home blocks per worker, all rewritten by each handle
	atkRounds  = 80
)

func atkBlock(w, k int, b uint64) []byte {
	buf := make([]byte, tBS)
	for i := range buf {
		buf[i] = byte(w*31 + k*7 + int(b))
	}
	binary.BigEndian.PutUint32(buf[4:], uint32(w))
	binary.BigEndian.PutUint32(buf[8:], uint32(k))
	return buf
}

func syncDurableAttack(t *testing.T, external, async, fail bool) {
	memJ := memdev.NewBlockSize(tDevBlks*tBS, tBS)
	memF := memJ
	if external {
		memF = memdev.NewBlockSize(tDevBlks*tBS, tBS)
	}
	for b := uint64(tHome0); b < tHome0+tHomeN; b++ {
		_, err := memF.WriteAt(initialBlock(b), int64(b)*tBS)
		require.NoError(t, err)
	}
	cj, err := errordev.NewCrashable(memJ)
	require.NoError(t, err)
	cf := cj
	if external {
		cf, err = errordev.NewCrashable(memF)
		require.NoError(t, err)
	}
	// The fault fails home writes (checkpoints) only.
	toggle := errordev.NewToggle(errordev.InRange(errordev.Kinds(errordev.Always(), errordev.Write), tHome0*tBS, tHomeN*tBS))
	// Flushes take a disk's time, so that a commit lasts long enough for
	// the other workers' Syncs to overlap it and batch (in memory a Sync
	// that commits on its own goroutine ends before the next one starts).
	slowFlush := errordev.Func(func(op errordev.Op) error {
		if op.Kind == errordev.Flush {
			time.Sleep(50 * time.Microsecond)
		}
		return nil
	})
	fdev := errordev.New(cf, errordev.Any(slowFlush, toggle))
	var jdev blockdev.Device = errordev.New(cj, slowFlush)
	if !external {
		jdev = fdev
	}
	cfg := Config{Dev: jdev, BlockSize: tBS, Blocks: tJLen, CommitInterval: -1,
		Map: func(j uint32) (uint64, error) { return uint64(j) + tJOff, nil }}
	if external {
		cfg.FSDev = fdev
	}
	j, err := Create(cfg, CreateOptions{UUID: [16]byte{9}, CsumV3: true, Sequence: 3})
	require.NoError(t, err)
	if async {
		j.sbMu.Lock()
		nsb := j.sb
		nsb.FeatureIncompat |= FeatureIncompatAsyncCommit
		require.NoError(t, j.writeSuperblockLocked(&nsb, true))
		j.sbMu.Unlock()
		j.f = nsb.format() // before any handle: no committer yet
	}

	var synced [atkWorkers]atomic.Int64 // last round whose Sync returned nil
	for w := range synced {
		synced[w].Store(-1)
	}
	var wg sync.WaitGroup
	errs := make(chan error, atkWorkers)
	// The workers start together: a Sync commits on its caller's
	// goroutine when no commit is in flight, and on memdev nothing
	// blocks, so a worker started first could otherwise run many rounds
	// before the others' Syncs overlap with its own.
	var ready sync.WaitGroup
	ready.Add(atkWorkers)
	for w := range atkWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ready.Done()
			ready.Wait()
			base := uint64(tHome0 + w*atkBlocks)
			for k := range atkRounds {
				if fail && w == 0 && k >= atkRounds/3 && !toggle.Enabled() {
					// Once the attack has checkpointed and batched, so
					// that the fault hits a journal doing both.
					if st := j.Stats(); st.Checkpoints > 0 && st.BatchWaits > 0 {
						toggle.Enable()
					}
				}
				h, err := j.Start(atkBlocks)
				if err != nil {
					errs <- err
					return
				}
				for b := base; b < base+atkBlocks; b++ {
					err := h.GetWriteAccess(b)
					if err == nil {
						err = h.Dirty(b, atkBlock(w, k, b))
					}
					if err != nil {
						h.Stop()
						errs <- err
						return
					}
				}
				if err := h.Stop(); err != nil {
					errs <- err
					return
				}
				if err := j.Sync(context.Background()); err != nil {
					errs <- err
					return
				}
				synced[w].Store(int64(k))
			}
		}()
	}
	check := func(what string, keep float64, tear bool, seed uint64) {
		var want [atkWorkers]int64
		for w := range want {
			want[w] = synced[w].Load() // before the crash images
		}
		imgJ, err := cj.Crash(errordev.CrashOptions{Seed: seed, KeepProb: keep, TearLast: tear})
		require.NoError(t, err)
		imgF := imgJ
		if external {
			imgF, err = cf.Crash(errordev.CrashOptions{Seed: seed, KeepProb: keep, TearLast: tear})
			require.NoError(t, err)
		}
		rcfg := cfg
		rcfg.Dev, rcfg.FSDev = imgJ, nil
		if external {
			rcfg.FSDev = imgF
		}
		rj, err := Open(rcfg)
		require.NoError(t, err, what)
		_, err = rj.Recover()
		require.NoError(t, err, what)
		buf := make([]byte, tBS)
		for w := range atkWorkers {
			base := uint64(tHome0 + w*atkBlocks)
			for b := base; b < base+atkBlocks; b++ {
				_, err := imgF.ReadAt(buf, int64(b)*tBS)
				require.NoError(t, err)
				if want[w] < 0 {
					continue
				}
				k := int(binary.BigEndian.Uint32(buf[8:]))
				require.Equal(t, uint32(w), binary.BigEndian.Uint32(buf[4:]), "%s: block %d: not worker %d's (synced round %d)", what, b, w, want[w])
				require.GreaterOrEqual(t, int64(k), want[w], "%s: block %d holds round %d, Sync returned nil for round %d", what, b, k, want[w])
				require.Equal(t, atkBlock(w, k, b), buf, "%s: block %d: torn or mixed contents", what, b)
			}
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for i := uint64(0); ; i++ {
		select {
		case <-done:
		case <-time.After(time.Millisecond):
			check(fmt.Sprintf("crash %d flushed only", i), 0, false, i)
			check(fmt.Sprintf("crash %d half kept", i), 0.5, i%2 == 0, i)
			continue
		}
		break
	}
	close(errs)
	for err := range errs {
		if !fail {
			require.NoError(t, err)
		}
		require.ErrorIs(t, err, ErrIO) // a checkpoint fault aborts the journal
	}
	st := j.Stats()
	// The attack covered what it means to: background checkpoints, the
	// log wrapping, and Syncs batching.
	require.NotZero(t, st.Checkpoints)
	require.NotZero(t, st.BatchWaits)
	if !fail {
		require.Greater(t, st.LogBlocks, uint64(4*tJLen))
	}
	cerr := j.Close()
	if !fail {
		require.NoError(t, cerr)
	}
	check("after Close, flushed only", 0, false, 99)
	if fail {
		require.True(t, toggle.Enabled())
	}
}

// sbStall holds the first journal superblock write made while armed until
// release is closed.
type sbStall struct {
	blockdev.Device
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (d *sbStall) WriteAt(p []byte, off int64) (int, error) {
	if off == tJOff*tBS && d.armed.CompareAndSwap(true, false) {
		close(d.entered)
		<-d.release
	}
	return d.Device.WriteAt(p, off)
}

// TestStartWaitsForCheckpointFreeingSpace starts a handle while a
// background checkpoint has taken every committed transaction off the
// checkpoint list but not yet written the new tail (so their log space
// still counts as used): Start waits for the checkpoint instead of
// failing with "do not fit an empty log".
func TestStartWaitsForCheckpointFreeingSpace(t *testing.T) {
	mem := memdev.NewBlockSize(tDevBlks*tBS, tBS)
	dev := &sbStall{Device: mem, entered: make(chan struct{}), release: make(chan struct{})}
	cfg := Config{Dev: dev, BlockSize: tBS, Blocks: tJLen, CommitInterval: -1, MaxBatchTime: -1,
		Map: func(j uint32) (uint64, error) { return uint64(j) + tJOff, nil }}
	j, err := Create(cfg, CreateOptions{UUID: [16]byte{7}})
	require.NoError(t, err)
	const credits = 28
	logTxn := func(k int) error {
		h, err := j.Start(credits)
		if err != nil {
			return err
		}
		for i := range credits {
			b := uint64(tHome0 + i)
			if err := h.GetWriteAccess(b); err != nil {
				return err
			}
			if err := h.Dirty(b, atkBlock(0, k, b)); err != nil {
				return err
			}
		}
		if err := h.Stop(); err != nil {
			return err
		}
		return j.Sync(context.Background())
	}
	// Hold checkpoints off (the background one, kicked once the log is
	// half full, waits for cpMu) while four transactions fill the log.
	j.cpMu.Lock()
	k := 0
	for ; k < 4; k++ {
		require.NoError(t, logTxn(k))
	}
	dev.armed.Store(true)
	j.cpMu.Unlock()
	select {
	case <-dev.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no background checkpoint began")
	}
	// The background checkpoint now waits in its tail update, holding
	// the transactions it wrote home.
	started := make(chan error, 1)
	go func() { started <- logTxn(k) }()
	select {
	case err := <-started:
		// Nothing to wait for only if the log had room.
		require.NoError(t, err)
	case <-time.After(100 * time.Millisecond):
	}
	close(dev.release)
	select {
	case err := <-started:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Start still waits after the checkpoint finished")
	}
	require.NoError(t, j.Close())
}
