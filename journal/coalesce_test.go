package journal

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// opDev records the writes and counts the flushes reaching a device.
type opDev struct {
	blockdev.Device
	mu      sync.Mutex
	writes  [][2]int64 // offset, length
	flushes int
}

func (d *opDev) WriteAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	d.writes = append(d.writes, [2]int64{off, int64(len(p))})
	d.mu.Unlock()
	return d.Device.WriteAt(p, off)
}

func (d *opDev) Flush() error {
	d.mu.Lock()
	d.flushes++
	d.mu.Unlock()
	return d.Device.Flush()
}

// reset returns the writes and flushes since the last reset.
func (d *opDev) reset() ([][2]int64, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	w, f := d.writes, d.flushes
	d.writes, d.flushes = nil, 0
	return w, f
}

// TestCommitCoalescesLogWrites: a commit writes each physically contiguous
// run of its log blocks with one device write, breaking at the log's wrap
// and where the BlockMap is not contiguous; the commit block is a write of
// its own after the preflush, on a journal that had async_commit too.
// Crash images of the last commit replay to the committed contents.
func TestCommitCoalescesLogWrites(t *testing.T) {
	const (
		split   = 40  // journal blocks from split on live elsewhere
		moved   = 300 // device block of journal block split
		devBlks = moved + tJLen
	)
	for _, tc := range []struct {
		name  string
		split bool
		async bool
		opts  CreateOptions
	}{
		{"contiguous", false, false, CreateOptions{CsumV3: true, Is64Bit: true}},
		{"split-map", true, false, CreateOptions{CsumV3: true, Is64Bit: true}},
		{"v1-checksum", true, false, CreateOptions{CsumV1: true}},
		{"no-checksum", false, false, CreateOptions{}},
		{"async-commit", true, true, CreateOptions{CsumV3: true, Is64Bit: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := newMemDev(devBlks * tBS)
			for b := uint64(tHome0); b < tHome0+tHomeN; b++ {
				_, err := mem.WriteAt(initialBlock(b), int64(b)*tBS)
				require.NoError(t, err)
			}
			require.NoError(t, mem.Flush())
			dev := &opDev{Device: mem}
			cfg := testConfig(mem)
			cfg.Dev = dev
			bmap := func(j uint32) (uint64, error) {
				if tc.split && j >= split {
					return uint64(j-split) + moved, nil
				}
				return uint64(j) + tJOff, nil
			}
			cfg.Map = bmap
			j, err := Create(cfg, tc.opts)
			require.NoError(t, err)
			if tc.async {
				j.sbMu.Lock()
				nsb := j.sb
				nsb.FeatureIncompat |= FeatureIncompatAsyncCommit
				require.NoError(t, j.writeSuperblockLocked(&nsb, true))
				j.sbMu.Unlock()
				j.f = nsb.format() // before any handle: no committer yet
			}
			// Log blocks written in runs before the commit block: the 14
			// before it, with async_commit too (the first commit clears
			// it).
			inRun := uint32(14)
			logDev := map[int64]uint32{} // device offset -> journal block
			for b := uint32(1); b < tJLen; b++ {
				db, _ := bmap(b)
				logDev[int64(db)*tBS] = b
			}
			want := map[uint64][]byte{}
			for round := range 24 {
				j.mu.Lock()
				start := j.mu.head
				j.mu.Unlock()
				h, err := j.Start(14)
				require.NoError(t, err)
				// One revoke block, a descriptor, 12 blocks (one needing
				// an escape), the commit block: 15 log blocks.
				rev := uint64(tHome0 + tHomeN - 1)
				require.NoError(t, h.Revoke(rev))
				want[rev] = nil
				for i := range 12 {
					b := uint64(tHome0 + (round*5+i)%(tHomeN-1))
					d := bytes.Repeat([]byte{byte(round), byte(i), 0x5A}, tBS/3+1)[:tBS]
					if i == 3 {
						be.PutUint32(d, Magic)
					}
					require.NoError(t, h.GetWriteAccess(b))
					require.NoError(t, h.Dirty(b, d))
					want[b] = d
				}
				dev.reset()
				require.NoError(t, h.Stop())
				require.NoError(t, j.Commit())
				writes, flushes := dev.reset()
				// Count the runs the log blocks of this commit form.
				var logWrites [][2]int64
				for _, w := range writes {
					if jb, ok := logDev[w[0]]; ok && jb >= j.first {
						logWrites = append(logWrites, w)
					}
				}
				nonCommit := []uint32{}
				for i := range inRun {
					nonCommit = append(nonCommit, j.wrap(start+i))
				}
				runs := 1
				for i := 1; i < len(nonCommit); i++ {
					a, _ := bmap(nonCommit[i-1])
					b, _ := bmap(nonCommit[i])
					if b != a+1 {
						runs++
					}
				}
				msg := fmt.Sprintf("round %d, log start %d: writes %v", round, start, logWrites)
				assert.Len(t, logWrites, runs+1, msg) // the runs, then the commit block
				var n int64
				for _, w := range logWrites {
					n += w[1]
				}
				assert.Equal(t, int64(15*tBS), n, msg)
				// Preflush and the commit's flush; a background
				// checkpoint may add its own.
				assert.GreaterOrEqual(t, flushes, 2, msg)
				assert.Zero(t, j.Superblock().FeatureIncompat&FeatureIncompatAsyncCommit, msg)
			}
			// A crash now keeps what the flushes made durable: recovery
			// replays the last commit.
			img := memDevFrom(mem.durableCopy())
			cfg.Dev = img
			rj, err := Open(cfg)
			require.NoError(t, err)
			if rj.NeedsRecovery() {
				_, err = rj.Recover()
				require.NoError(t, err)
			}
			for b, d := range want {
				if d == nil {
					continue
				}
				assert.Equal(t, d, img.cur[b*tBS:(b+1)*tBS], "home block %d", b)
			}
			require.NoError(t, j.Close())
		})
	}
}

// homeGate blocks writes at or past from until open is closed.
type homeGate struct {
	blockdev.Device
	from int64
	open chan struct{}
	hit  chan struct{} // closed at the first blocked write
	once sync.Once
}

func (d *homeGate) WriteAt(p []byte, off int64) (int, error) {
	if off >= d.from {
		d.once.Do(func() { close(d.hit) })
		<-d.open
	}
	return d.Device.WriteAt(p, off)
}

// TestCheckpointInBackground: once more than half the log is in use a
// checkpoint runs on its own goroutine, and commits (so fsyncs) go on
// while it writes blocks home.
func TestCheckpointInBackground(t *testing.T) {
	mem := newTestDev(t)
	dev := &homeGate{Device: mem, from: tHome0 * tBS, open: make(chan struct{}), hit: make(chan struct{})}
	cfg := testConfig(mem)
	cfg.Dev = dev
	j, err := Create(cfg, CreateOptions{CsumV3: true, Is64Bit: true})
	require.NoError(t, err)
	// Three log blocks a commit: 22 commits use more than half of the
	// 127-block log and wake the checkpoint, which blocks on its first
	// home write.
	for i := range 22 {
		commitBlock(t, j, uint64(tHome0+i%tHomeN), bytes.Repeat([]byte{byte(i)}, tBS))
	}
	select {
	case <-dev.hit:
	case <-time.After(10 * time.Second):
		t.Fatal("no checkpoint started with more than half the log in use")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 10 {
			commitBlock(t, j, uint64(tHome0+i), bytes.Repeat([]byte{0xC0 + byte(i)}, tBS))
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		close(dev.open)
		<-done
		t.Fatal("commits waited for the checkpoint")
	}
	assert.Zero(t, j.Stats().Checkpoints, "the checkpoint is still writing home")
	close(dev.open)
	require.NoError(t, j.Close())
	for i := range 10 {
		b := tHome0 + i
		assert.Equal(t, bytes.Repeat([]byte{0xC0 + byte(i)}, tBS), mem.cur[b*tBS:(b+1)*tBS], "home block %d", b)
	}
}
