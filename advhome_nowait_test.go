package ext4io_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io/iomap"
)

// TestHomeWriteNoWait: a NoWait direct read or write through the file's
// iomap ops, over a journalled page whose write in place (homewrite.go)
// is still in flight, fails with iomap.ErrWouldBlock instead of waiting
// for it; without NoWait the same request waits and sees the new data.
func TestHomeWriteNoWait(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		do   func(g *gateDev, ops iomap.Ops, flags iomap.Flags) error
	}{
		{"read", func(g *gateDev, ops iomap.Ops, flags iomap.Flags) error {
			_, err := iomap.DirectRead(g.Device, ops, make([]byte, 16<<10), 64<<10, &iomap.DioOptions{BlockSize: 4096, Flags: flags})
			return err
		}},
		{"write", func(g *gateDev, ops iomap.Ops, flags iomap.Flags) error {
			_, err := iomap.DirectWrite(g.Device, ops, make([]byte, 16<<10), 64<<10, &iomap.DioOptions{BlockSize: 4096, Flags: flags})
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, _, v, f, addr := homeVolume(t)
			g.arm(addr, 16<<10, nil)
			journalWrite(t, v, f, 9, 64<<10)
			select {
			case <-g.held:
			case <-time.After(10 * time.Second):
				t.Fatal("the write in place never came")
			}
			for _, ops := range []iomap.Ops{f.OverwriteOps(), f.NormalOps()} {
				done := make(chan error, 1)
				go func() { done <- c.do(g, ops, iomap.NoWait) }()
				select {
				case err := <-done:
					require.True(t, errors.Is(err, iomap.ErrWouldBlock), "NoWait over a pending write in place: %v", err)
				case <-time.After(3 * time.Second):
					close(g.release)
					<-done
					t.Fatal("a NoWait request waited for the write in place")
				}
			}
			close(g.release)
			require.NoError(t, c.do(g, f.OverwriteOps(), 0))
			require.NoError(t, f.Close())
			require.NoError(t, v.Close())
		})
	}
}
