package ext4io

import (
	"bytes"
	"io"
	"io/fs"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// stallDev holds the first write whose data starts with magic until
// release is closed, after closing entered.
type stallDev struct {
	blockdev.Device
	magic   []byte
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (d *stallDev) WriteAt(p []byte, off int64) (int, error) {
	if bytes.HasPrefix(p, d.magic) && d.armed.CompareAndSwap(true, false) {
		close(d.entered)
		<-d.release
	}
	return d.Device.WriteAt(p, off)
}

// TestCloseWaitsForOperationInFlight holds an allocating direct write in
// its data write, inside its operation, while Close begins: Close waits
// for it, and the closed image holds the write (data and size).
func TestCloseWaitsForOperationInFlight(t *testing.T) {
	t.Run("journal", func(t *testing.T) { closeWaitsForOperationInFlight(t, FormatOptions{}) })
	t.Run("nojournal", func(t *testing.T) {
		closeWaitsForOperationInFlight(t, FormatOptions{Features: "^has_journal"})
	})
}

func closeWaitsForOperationInFlight(t *testing.T, fopts FormatOptions) {
	mem := memdev.NewBlockSize(32<<20, 4096)
	require.NoError(t, Format(mem, fopts))
	magic := []byte("in-flight write!")
	dev := &stallDev{Device: mem, magic: magic, entered: make(chan struct{}), release: make(chan struct{})}
	v, err := Open(dev, Options{Writable: true, WritebackAge: -1, CommitInterval: -1, PageCacheBytes: -1})
	require.NoError(t, err)
	f, err := v.OpenFile("f", os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	require.NoError(t, f.Sync())

	data := bytes.Repeat([]byte{0xa5}, 3*4096)
	copy(data, magic)
	dev.armed.Store(true)
	wrote := make(chan error, 1)
	go func() { _, err := f.WriteAt(data, 0); wrote <- err }()
	<-dev.entered
	closed := make(chan error, 1)
	go func() { closed <- v.Close() }()
	// Close has begun once it set closed (a loaded machine can start its
	// goroutine late: a fixed wait would let the call below run first).
	for deadline := time.Now().Add(10 * time.Second); !v.closed.Load(); time.Sleep(time.Millisecond) {
		require.False(t, time.Now().After(deadline), "Close did not begin in 10 s")
	}
	select {
	case err := <-closed:
		t.Fatalf("Close returned %v while a write was in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	// Calls made now, with Close under way, fail with ErrClosed.
	_, err = v.Create("late")
	assert.ErrorIs(t, err, ErrClosed)
	close(dev.release)
	require.NoError(t, <-wrote)
	require.NoError(t, <-closed)

	checkImage(t, mem)
	ro, err := Open(mem, Options{})
	require.NoError(t, err)
	defer ro.Close()
	g, err := ro.Open("f")
	require.NoError(t, err)
	got, err := io.ReadAll(g)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got), "the in-flight write is not in the closed image: %d bytes", len(got))
	_, err = ro.Stat("late")
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

// TestOperationAfterClose runs the steps of calls that passed their
// checkOpen before Close but reach their operation after it: they fail
// with ErrClosed without changing anything, and commits after Close's
// last one log nothing.
func TestOperationAfterClose(t *testing.T) {
	mem, v := memVolume(t, 32<<20, 4096)
	require.NoError(t, v.Close())
	ran := false
	err := v.op(func() error { ran = true; return nil })
	assert.ErrorIs(t, err, ErrClosed)
	assert.ErrorIs(t, err, fs.ErrClosed)
	assert.False(t, ran, "an operation ran after Close")
	assert.ErrorIs(t, v.jm.commit(true), ErrClosed)
	assert.NoError(t, v.jm.commit(false))
	assert.NoError(t, v.failed(), "a commit after Close stopped the volume")
	assert.ErrorIs(t, v.beginInternalOp(), ErrClosed)
	_, err = v.beginOpAt(5)
	assert.ErrorIs(t, err, ErrClosed)
	checkImage(t, mem)
}
