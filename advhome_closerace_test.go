package ext4io_test

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// lateDev slows writes of [off, end) (a file's blocks: the journalled
// pages' writes in place) and counts the writes that reach it once shut
// is set.
type lateDev struct {
	blockdev.Device
	off, end int64
	delay    time.Duration
	shut     atomic.Bool
	late     atomic.Int64
}

func (d *lateDev) WriteAt(p []byte, off int64) (int, error) {
	if off < d.end && d.off < off+int64(len(p)) {
		time.Sleep(d.delay)
	}
	if d.shut.Load() {
		d.late.Add(1)
	}
	return d.Device.WriteAt(p, off)
}

// TestHomeWriteCloseRace: a WriteAtomic racing with Volume.Close either
// fails or completes, and its write in place is over when Close returns:
// nothing reaches the device after Close, and the image is clean.
func TestHomeWriteCloseRace(t *testing.T) {
	t.Parallel()
	late := 0
	for i := 0; i < 40; i++ {
		base := memdev.New(32 << 20)
		require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{NoDiscard: true}))
		d := &lateDev{Device: base, delay: 2 * time.Millisecond}
		v, err := ext4io.Open(d, ext4io.Options{Writable: true, CommitInterval: -1})
		require.NoError(t, err)
		f := directFile(t, v, "db", 0, 256<<10)
		_, err = f.WriteAt(make([]byte, 256<<10), 0)
		require.NoError(t, err)
		require.NoError(t, f.Sync())
		phys := physOf(t, f)
		d.off, d.end = int64(phys[0])*4096, int64(phys[0]+64)*4096
		var wg sync.WaitGroup
		stop := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := bytes.Repeat([]byte{byte(i)}, 16<<10)
			for k := int64(0); ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := f.WriteAtomic(p, (k%16)*16<<10); err != nil {
					return
				}
				if err := f.Datasync(); err != nil {
					return
				}
			}
		}()
		time.Sleep(time.Duration(5+i%7) * time.Millisecond)
		if i == 0 {
			t.Logf("journalled %d", v.Counters().AtomicJournalled)
		}
		require.NoError(t, v.Close())
		d.shut.Store(true)
		close(stop)
		wg.Wait()
		time.Sleep(20 * time.Millisecond)
		if n := d.late.Load(); n > 0 {
			late++
			t.Logf("round %d: %d writes reached the device after Volume.Close returned", i, n)
		}
	}
	require.Zero(t, late, "rounds with writes after Close")
}
