package journal

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWriteFastCommitSuperseded: a fast commit built for a tid whose full
// commit became durable before its write (the file system lets operations
// and commits run while a fast commit is in flight) is not written, so no
// stale HEAD lands in the area after its zeroing (FW1, FW4); a fast commit
// of the next tid is. FlushFastCommit for a superseded tid flushes
// nothing.
func TestWriteFastCommitSuperseded(t *testing.T) {
	const blocks = 1024 + 256 + 16
	dev := newMemDev((blocks + 2) * tBS)
	cfg := Config{Dev: dev, BlockSize: tBS, Blocks: blocks, CommitInterval: -1,
		Map: func(j uint32) (uint64, error) { return uint64(j) + tJOff, nil }}
	j, err := Create(cfg, CreateOptions{CsumV3: true, Is64Bit: true})
	require.NoError(t, err)
	require.NoError(t, j.EnableFastCommit())
	area := func() []byte {
		off, err := j.devOffset(j.fcFirst)
		require.NoError(t, err)
		return dev.snapshot()[off : off+tBS] // under the device lock: a checkpoint may be writing
	}
	tid, err := j.FastCommitTid()
	require.NoError(t, err)

	// A full commit of tid after the fast commit was built.
	h, err := j.Start(1)
	require.NoError(t, err)
	h.GetWriteAccess(3)
	h.Dirty(3, bytes.Repeat([]byte{7}, tBS))
	require.NoError(t, h.Stop())
	require.NoError(t, j.Sync(context.Background()))

	fcBlock := bytes.Repeat([]byte{0xFC}, tBS)
	assert.ErrorIs(t, j.WriteFastCommit(tid, 0, fcBlock, true), ErrSuperseded)
	assert.ErrorIs(t, j.WriteFastCommitBlocks(tid, 0, fcBlock), ErrSuperseded)
	assert.ErrorIs(t, j.FlushFastCommit(tid), ErrSuperseded, "a flush for superseded fast commits is not needed")
	assert.Equal(t, make([]byte, tBS), area(), "a superseded fast commit leaves the area alone")

	next, err := j.FastCommitTid()
	require.NoError(t, err)
	assert.Equal(t, tid+1, next)
	require.NoError(t, j.WriteFastCommit(next, 0, fcBlock, true))
	assert.Equal(t, fcBlock, area())
	// The metadata of the fast commit stays in the running transaction,
	// which Close commits: that commit supersedes the fast commits of
	// next, and a later tid's flush finds the journal closed.
	h, err = j.Start(1)
	require.NoError(t, err)
	h.GetWriteAccess(4)
	h.Dirty(4, bytes.Repeat([]byte{8}, tBS))
	require.NoError(t, h.Stop())
	require.NoError(t, j.Close())
	assert.ErrorIs(t, j.WriteFastCommit(next, 1, fcBlock, true), ErrSuperseded)
	assert.ErrorIs(t, j.FlushFastCommit(next), ErrSuperseded)
	assert.ErrorIs(t, j.FlushFastCommit(next+1), ErrClosed)
	assert.ErrorIs(t, j.WriteFastCommitBlocks(next+1, 1, fcBlock), ErrClosed)
}
