package ext4io_test

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
