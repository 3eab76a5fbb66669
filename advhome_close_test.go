package ext4io_test

import (
	"bytes"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestHomeWriteCloseWaits: Volume.Close while a journalled page's write in
// place is held (the file left open) waits for it, and leaves no
// goroutine behind; the page is in place after Close and after a crash.
func TestHomeWriteCloseWaits(t *testing.T) {
	g, cdev, v, f, addr := homeVolume(t)
	time.Sleep(50 * time.Millisecond)
	base := runtime.NumGoroutine()
	g.arm(addr, 16<<10, nil)
	p := journalWrite(t, v, f, 5, 64<<10)
	select {
	case <-g.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the write in place never came")
	}
	var released atomic.Bool
	time.AfterFunc(200*time.Millisecond, func() { released.Store(true); close(g.release) })
	closed := make(chan error, 1)
	go func() { closed <- v.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Volume.Close hung with a write in place held")
	}
	require.True(t, released.Load(), "Volume.Close returned before the write in place completed")
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), base, "goroutines left after Close")
	got := make([]byte, 16<<10)
	_, err := cdev.ReadAt(got, addr)
	require.NoError(t, err)
	require.Equal(t, p, got)
	require.Equal(t, p, crashRead(t, cdev, "db", 64<<10, 16<<10), "the page after a crash")
}

// TestHomeDevOnlyWithJournalledWrites: without journalled atomic writes
// (Tuning.AtomicJournalMax < 0) the volume's requests go to the device
// directly, not through the wrapper that orders them after writes in
// place; with them (the default) they do; and atomic writes still work.
func TestHomeDevOnlyWithJournalledWrites(t *testing.T) {
	for _, c := range []struct {
		max  int64
		want bool
	}{{-1, false}, {0, true}} {
		dev := memdev.New(32 << 20)
		require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{NoDiscard: true}))
		v, err := ext4io.Open(dev, ext4io.Options{Writable: true, Tuning: ext4io.Tuning{AtomicJournalMax: c.max}})
		require.NoError(t, err)
		require.Equal(t, c.want, ext4io.DeviceWrapped(v), "AtomicJournalMax %d", c.max)
		f := directFile(t, v, "db", 0, 64<<10)
		_, err = f.WriteAt(make([]byte, 64<<10), 0)
		require.NoError(t, err)
		require.NoError(t, f.Sync())
		_, err = f.WriteAtomic(bytes.Repeat([]byte{3}, 4096), 4096)
		require.NoError(t, err)
		require.NoError(t, f.Sync())
		require.NoError(t, f.Close())
		require.NoError(t, v.Close())
	}
}
