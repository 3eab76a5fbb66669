package ext4io_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// heldDiscardDev holds its third discard until release is closed, and
// counts the discards that reach it once shut is set.
type heldDiscardDev struct {
	blockdev.Device
	held     chan struct{}
	release  chan struct{}
	shut     atomic.Bool
	late     atomic.Int64
	discards atomic.Int64
}

func (d *heldDiscardDev) Discard(off, n int64) error {
	if d.discards.Add(1) == 3 {
		close(d.held)
		<-d.release
	}
	if d.shut.Load() {
		d.late.Add(1)
	}
	return d.Device.Discard(off, n)
}

// TestTrimCloseRace: Volume.Close called while a Trim is discarding
// waits for it; the Trim stops before its next discard with ErrClosed,
// and no discard reaches the device after Close returned (when the
// caller may have handed the device to another writer).
func TestTrimCloseRace(t *testing.T) {
	base := memdev.New(256 << 20)
	require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{BlockSize: 1024, NoDiscard: true}))
	d := &heldDiscardDev{Device: base, held: make(chan struct{}), release: make(chan struct{})}
	v, err := ext4io.Open(d, ext4io.Options{Writable: true})
	require.NoError(t, err)
	var wg sync.WaitGroup
	var trimErr error
	wg.Go(func() {
		// minLen of one block: every free run of every group.
		_, trimErr = v.Trim(0, 256<<20, 0)
	})
	<-d.held
	closed := make(chan error, 1)
	go func() {
		err := v.Close()
		d.shut.Store(true)
		closed <- err
	}()
	time.Sleep(50 * time.Millisecond) // Close is under way
	close(d.release)
	require.NoError(t, <-closed)
	wg.Wait()
	require.Zero(t, d.late.Load(), "discards after Volume.Close returned (of %d)", d.discards.Load())
	require.ErrorIs(t, trimErr, ext4io.ErrClosed, "Trim cut short by Close (%d discards)", d.discards.Load())
}
