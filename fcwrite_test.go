package ext4io_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
)

// countDev counts the writes and flushes that reach a device.
type countDev struct {
	blockdev.Device
	writes, flushes atomic.Int64
}

func (c *countDev) WriteAt(p []byte, off int64) (int, error) {
	c.writes.Add(1)
	return c.Device.WriteAt(p, off)
}

func (c *countDev) Flush() error {
	c.flushes.Add(1)
	return c.Device.Flush()
}

// fsyncSmallFiles creates n files of size bytes in dir, each written and
// fsynced, and returns the device writes and flushes per file.
func fsyncSmallFiles(t *testing.T, v *ext4io.Volume, dev *countDev, dir string, n, size int) (writes, flushes float64) {
	t.Helper()
	data := make([]byte, size)
	w0, f0 := dev.writes.Load(), dev.flushes.Load()
	for i := range n {
		f, err := v.Create(fmt.Sprintf("%s/f%d", dir, i))
		require.NoError(t, err)
		_, err = f.WriteAt(data, 0)
		require.NoError(t, err)
		require.NoError(t, f.Sync())
		require.NoError(t, f.Close())
	}
	return float64(dev.writes.Load()-w0) / float64(n), float64(dev.flushes.Load()-f0) / float64(n)
}

// TestFastCommitCounters: an fsynced small file costs at most 2 device
// writes (data, fast-commit block) and 1 flush with fast commits; a full
// commit costs more (the same workload without them is the reference).
func TestFastCommitCounters(t *testing.T) {
	for _, fc := range []bool{true, false} {
		t.Run(fmt.Sprintf("fastcommit=%v", fc), func(t *testing.T) {
			base := memdev.New(256 << 20)
			// A 16384-block log: a 256-block fast-commit area holds the
			// 101 fast commits (each ends its block).
			require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{FastCommit: fc, NoDiscard: true, JournalBlocks: 16384}))
			dev := &countDev{Device: base}
			v, err := ext4io.Open(dev, ext4io.Options{Writable: true, WritebackAge: -1})
			require.NoError(t, err)
			require.NoError(t, v.Mkdir("d", 0o755))
			require.NoError(t, v.Mkdir("e", 0o755))
			// Warm up: the mkdir makes the first Sync a full commit, and the
			// first fast commit after it checkpoints the log.
			fsyncSmallFiles(t, v, dev, "d", 2, 4096)
			writes, flushes := fsyncSmallFiles(t, v, dev, "e", 100, 4096)
			c := v.Counters()
			t.Logf("fast commits %v: %.2f device writes, %.2f flushes per fsynced 4 KiB file (fast commits %d, fallbacks %d)",
				fc, writes, flushes, c.FastCommits, c.FastCommitFallbacks)
			if fc {
				assert.LessOrEqual(t, writes, 2.0)
				assert.LessOrEqual(t, flushes, 1.0)
				assert.EqualValues(t, 101, c.FastCommits)
				assert.EqualValues(t, 1, c.FastCommitFallbacks)
			} else {
				assert.Greater(t, writes, 2.0)
				assert.Zero(t, c.FastCommits)
			}
			require.NoError(t, v.Close())
			ext4iotest.FsckDev(t, base)
		})
	}
}
