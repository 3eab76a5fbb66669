package ext4io_test

import (
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestAdvSetattrDuringWriteback: attribute changes (Setxattr, Chmod) of a
// file whose buffered writes are being written back. Write-back allocates
// the blocks and sets i_blocks (and with it i_flags' huge_file bit) under
// the shared inode lock and dataMu; the check that the inode is not the
// filesystem's own (systemInode reads i_flags) must take dataMu too. Under
// -race it reports the race without that.
func TestAdvSetattrDuringWriteback(t *testing.T) {
	t.Parallel()
	dev := memdev.New(64 << 20)
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{NoDiscard: true}))
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, CommitInterval: -1})
	require.NoError(t, err)
	f, err := v.OpenFile("f", os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p := make([]byte, 4096)
		for off := int64(0); !stop.Load() && off < 32<<20; off += 8192 {
			if _, err := f.WriteAt(p, off); err != nil {
				t.Error(err)
				return
			}
			if err := f.Datasync(); err != nil { // write-back allocates
				t.Error(err)
				return
			}
		}
	}()
	deadline := time.Now().Add(300 * time.Millisecond)
	for i := 0; time.Now().Before(deadline); i++ {
		require.NoError(t, f.Setxattr("user.k", []byte{byte(i)}, 0))
		require.NoError(t, f.Chmod(os.FileMode(0o600+i%2)))
	}
	stop.Store(true)
	wg.Wait()
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
}
