package ext4io

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
)

// adv22bFlushes counts the flushes reaching a device.
type adv22bFlushes struct {
	blockdev.Device
	flushes atomic.Int64
}

func (d *adv22bFlushes) Flush() error {
	d.flushes.Add(1)
	return d.Device.Flush()
}

// TestAdv22bTooManyLinksNoCommit: ErrTooManyLinks (EMLINK) also matches
// ErrNoSpace, for callers testing for a full directory; op's retry after
// a commit is for running out of space only (Linux's ext4_link and
// ext4_mkdir retry on ENOSPC, never on EMLINK). A Link refused for the
// links count must not force a journal commit and its flushes, however
// many freed blocks wait for one.
func TestAdv22bTooManyLinksNoCommit(t *testing.T) {
	mem := memdev.NewBlockSize(32<<20, 4096)
	require.NoError(t, Format(mem, FormatOptions{}))
	dev := &adv22bFlushes{Device: mem}
	v, err := Open(dev, Options{Writable: true, CommitInterval: -1, WritebackAge: -1})
	require.NoError(t, err)
	require.NoError(t, v.WriteFile("f", []byte("f"), 0o644))
	f, err := v.Open("f")
	require.NoError(t, err)
	n := f.n
	require.NoError(t, f.Close())
	n.mu.Lock()
	n.in.LinksCount = linkMax // in memory only: restored below
	n.mu.Unlock()
	for i := range 5 {
		// Blocks freed by an uncommitted operation wait for a commit.
		require.NoError(t, v.WriteFile("junk", make([]byte, 1<<20), 0o644))
		require.NoError(t, v.Sync())
		require.NoError(t, v.Remove("junk"))
		require.Positive(t, v.jm.busyBlocks.Load())
		before := dev.flushes.Load()
		err := v.Link("f", "g")
		require.ErrorIs(t, err, ErrTooManyLinks, "round %d", i)
		assert.Zero(t, dev.flushes.Load()-before, "round %d: flushes for a Link refused with EMLINK", i)
		assert.Positive(t, v.jm.busyBlocks.Load(), "round %d: a commit ran for EMLINK", i)
	}
	n.mu.Lock()
	n.in.LinksCount = 1
	n.mu.Unlock()
	require.NoError(t, v.Chmod("f", 0o600)) // writes the restored count
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, mem)
}
