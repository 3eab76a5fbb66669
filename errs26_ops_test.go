package ext4io_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/iomap"
)

// TestOpsAfterCloseWriteNothing: a direct write through the iomap ops of
// a File closed since (its file unlinked, so Close freed its blocks and
// another file took them) fails with ErrClosed and leaves the other
// file's data alone; the same with the Volume closed.
func TestOpsAfterCloseWriteNothing(t *testing.T) {
	for _, closeVolume := range []bool{false, true} {
		dev := memdev.New(32 << 20)
		require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{NoDiscard: true}))
		v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
		require.NoError(t, err)
		f := directFile(t, v, "f", 0, 64<<10)
		_, err = f.WriteAt(make([]byte, 64<<10), 0)
		require.NoError(t, err)
		require.NoError(t, f.Sync())
		addr := int64(physOf(t, f)[0]) * 4096
		kinds := map[string]iomap.Ops{"normal": f.NormalOps(), "overwrite": f.OverwriteOps()}
		require.NoError(t, v.Unlink("f"))
		require.NoError(t, f.Close())
		g, err := v.OpenFile("g", os.O_RDWR|os.O_CREATE|ext4io.O_DIRECT, 0o644)
		require.NoError(t, err)
		keep := bytes.Repeat([]byte{0x5A}, 64<<10)
		_, err = g.WriteAt(keep, 0)
		require.NoError(t, err)
		require.NoError(t, g.Sync())
		if closeVolume {
			require.NoError(t, g.Close())
			require.NoError(t, v.Close())
		}
		for name, ops := range kinds {
			_, err := iomap.DirectWrite(dev, ops, bytes.Repeat([]byte{0xBD}, 64<<10), 0, &iomap.DioOptions{BlockSize: 4096})
			require.ErrorIs(t, err, ext4io.ErrClosed, "%s ops of a closed file (volume closed %v)", name, closeVolume)
		}
		got := make([]byte, 64<<10)
		_, err = dev.ReadAt(got, addr)
		require.NoError(t, err)
		require.True(t, bytes.Equal(got, make([]byte, 64<<10)) || bytes.Equal(got, keep),
			"the closed file's old blocks were written through its ops (volume closed %v)", closeVolume)
		if !closeVolume {
			got := make([]byte, 64<<10)
			_, err = g.ReadAt(got, 0)
			require.NoError(t, err)
			require.Equal(t, keep, got, "the file that took the blocks")
			require.NoError(t, g.Close())
			require.NoError(t, v.Close())
		}
	}
}
