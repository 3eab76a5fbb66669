package journal

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDirtyOwned: the journal keeps a DirtyOwned buffer itself and never
// writes into it: dirtying the block again in the same transaction (with
// Dirty or DirtyOwned) leaves the first buffer as it was, since its owner
// shares it with readers. The newest contents are what Lookup returns and
// what the checkpoint writes home.
func TestDirtyOwned(t *testing.T) {
	dev := newTestDev(t)
	j, err := Create(testConfig(dev), CreateOptions{CsumV3: true, Is64Bit: true})
	require.NoError(t, err)
	defer j.Close()
	blk := uint64(tHome0)
	dirty := func(data []byte, own bool) {
		h, err := j.Start(1)
		require.NoError(t, err)
		require.NoError(t, h.GetWriteAccess(blk))
		if own {
			require.NoError(t, h.DirtyOwned(blk, data))
		} else {
			require.NoError(t, h.Dirty(blk, data))
		}
		require.NoError(t, h.Stop())
	}
	first := bytes.Repeat([]byte{0x11}, tBS)
	dirty(first, true)
	dirty(bytes.Repeat([]byte{0x22}, tBS), false)
	require.Equal(t, bytes.Repeat([]byte{0x11}, tBS), first, "the owned buffer was changed by a later Dirty")
	buf := make([]byte, tBS)
	require.True(t, j.Lookup(blk, buf))
	require.Equal(t, byte(0x22), buf[0])
	third := bytes.Repeat([]byte{0x33}, tBS)
	dirty(third, true)
	require.NoError(t, j.Commit())
	require.NoError(t, j.Checkpoint())
	_, err = dev.ReadAt(buf, int64(blk)*tBS)
	require.NoError(t, err)
	require.Equal(t, third, buf)
	require.Equal(t, bytes.Repeat([]byte{0x33}, tBS), third, "the journal wrote into an owned buffer")
}
