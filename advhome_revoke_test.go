package ext4io_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/errordev"
)

// TestHomeWriteRevokeThenReuse: while a journalled page's write in place
// is held, the file punches the page, or is truncated and its blocks go to
// a new file (the freeing transaction revokes the logged copies); after a
// crash keeping only flushed writes, the punched range reads as zeroes and
// the new file as written: the revoke never became durable before the
// write in place, and no replay wrote the old page over reused blocks.
func TestHomeWriteRevokeThenReuse(t *testing.T) {
	t.Parallel()
	for _, reuse := range []bool{false, true} {
		g, cdev, v, f, addr := homeVolumeNoReserve(t)
		heldWrite(t, g, v, f, addr, 7, 100*time.Millisecond)
		if !reuse {
			require.NoError(t, f.Fallocate(ext4io.FallocPunchHole, 64<<10, 16<<10))
			require.NoError(t, f.Sync())
			require.Equal(t, make([]byte, 16<<10), crashRead(t, cdev, "db", 64<<10, 16<<10), "the punched page after a crash")
		} else {
			require.NoError(t, f.Truncate(0))
			require.NoError(t, f.Sync())
			// The new file takes all the space it can get, so the freed
			// blocks too.
			o := directFile(t, v, "other", 0, 4096)
			size := int64(4096)
			for _, step := range []int64{1 << 20, 4096} {
				for o.Fallocate(0, size, step) == nil {
					size += step
				}
			}
			data := bytes.Repeat([]byte{0x42}, int(size))
			_, err := o.WriteAt(data, 0)
			require.NoError(t, err)
			require.NoError(t, o.Sync())
			hit := false
			for _, p := range physOf(t, o) {
				if int64(p)*4096 == addr {
					hit = true
				}
			}
			require.True(t, hit, "the new file did not reuse block %d", addr/4096)
			require.NoError(t, o.Close())
			require.Equal(t, data, crashRead(t, cdev, "other", 0, len(data)), "the new file after a crash")
		}
		require.NoError(t, f.Close())
		require.NoError(t, v.Close())
	}
}

// homeVolumeNoReserve is homeVolume on a volume without root-reserved
// blocks, so that a file can take all the free space.
func homeVolumeNoReserve(t *testing.T) (*gateDev, *errordev.Crashable, *ext4io.Volume, *ext4io.File, int64) {
	t.Helper()
	return homeVolumeFormat(t, ext4io.FormatOptions{NoDiscard: true, ReservedPercent: -1})
}
