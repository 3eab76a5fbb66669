package ext4io

import (
	"bytes"
	"io"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestCloseWaitsForOverwriteInFlight holds a direct overwrite of written
// blocks (directOverwrite, the path that runs under the shared inode lock
// alone) in its data write while Close begins: Close waits for it, as it
// waits for every write in flight, and the closed image holds its data.
func TestCloseWaitsForOverwriteInFlight(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fopts FormatOptions
	}{{"journal", FormatOptions{}}, {"nojournal", FormatOptions{Features: "^has_journal"}}} {
		t.Run(tc.name, func(t *testing.T) {
			mem := memdev.NewBlockSize(32<<20, 4096)
			require.NoError(t, Format(mem, tc.fopts))
			magic := []byte("in-flight overwrite!")
			dev := &stallDev{Device: mem, magic: magic, entered: make(chan struct{}), release: make(chan struct{})}
			v, err := Open(dev, Options{Writable: true, WritebackAge: -1, CommitInterval: -1, PageCacheBytes: -1})
			require.NoError(t, err)
			f, err := v.OpenFile("f", os.O_RDWR|os.O_CREATE, 0o644)
			require.NoError(t, err)
			_, err = f.WriteAt(make([]byte, 2*4096), 0)
			require.NoError(t, err)
			require.NoError(t, f.Sync())

			data := bytes.Repeat([]byte{0x5a}, 4096)
			copy(data, magic)
			overwrites := v.stats.shared.Load()
			dev.armed.Store(true)
			closeWhileStalled(t, v, dev.entered, dev.release, "an overwrite", func() error {
				_, err := f.WriteAt(data, 4096)
				return err
			})
			assert.Equal(t, overwrites+1, v.stats.shared.Load(), "the write was not an overwrite on the shared path")

			checkImage(t, mem)
			ro, err := Open(mem, Options{})
			require.NoError(t, err)
			defer ro.Close()
			g, err := ro.Open("f")
			require.NoError(t, err)
			got, err := io.ReadAll(g)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(data, got[4096:]), "the in-flight overwrite is not in the closed image")
		})
	}
}

// TestInternalOpAfterCloseNoJournal is TestOperationAfterClose's check of
// beginInternalOp on a volume without a journal: the internal operations
// that a call which passed its checkOpen before Close may still start
// (File.Sync's inode write, File.Close's orphan release, write-back) fail
// with ErrClosed once Close ran its own, instead of changing metadata
// after the superblock took the allocator's counts and the device was
// flushed for the last time.
func TestInternalOpAfterCloseNoJournal(t *testing.T) {
	dev := memdev.NewBlockSize(32<<20, 4096)
	require.NoError(t, Format(dev, FormatOptions{Features: "^has_journal"}))
	v, err := Open(dev, Options{Writable: true, WritebackAge: -1})
	require.NoError(t, err)
	require.Nil(t, v.jm)
	require.NoError(t, v.Close())
	assert.ErrorIs(t, v.beginInternalOp(), ErrClosed)
	checkImage(t, dev)
}

// untornStallDev is a stallDev that keeps writes of up to 64 KiB untorn,
// so WriteAtomic writes in place.
type untornStallDev struct{ *stallDev }

func (untornStallDev) AtomicWriteUnitMax() int64 { return 64 << 10 }

// TestCloseWaitsForAtomicInPlace is TestCloseWaitsForOverwriteInFlight
// for WriteAtomic's in-place path (atomicInPlace), which also runs
// outside any operation.
func TestCloseWaitsForAtomicInPlace(t *testing.T) {
	mem := memdev.NewBlockSize(32<<20, 4096)
	require.NoError(t, Format(mem, FormatOptions{}))
	magic := []byte("in-flight atomic write!")
	sd := &stallDev{Device: mem, magic: magic, entered: make(chan struct{}), release: make(chan struct{})}
	v, err := Open(untornStallDev{sd}, Options{Writable: true, WritebackAge: -1, CommitInterval: -1, PageCacheBytes: -1})
	require.NoError(t, err)
	f, err := v.OpenFile("f", os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	_, err = f.WriteAt(make([]byte, 4*4096), 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.Positive(t, f.AtomicWriteInfo().AtomicWriteUnitInPlace)

	data := bytes.Repeat([]byte{0x3c}, 4096)
	copy(data, magic)
	inPlace := v.stats.shared.Load()
	sd.armed.Store(true)
	closeWhileStalled(t, v, sd.entered, sd.release, "an atomic write", func() error {
		_, err := f.WriteAtomic(data, 2*4096)
		return err
	})
	assert.Equal(t, inPlace+1, v.stats.shared.Load(), "the atomic write did not go in place")

	checkImage(t, mem)
	ro, err := Open(mem, Options{})
	require.NoError(t, err)
	defer ro.Close()
	got, err := ro.ReadFile("f")
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got[2*4096:3*4096]), "the in-flight atomic write is not in the closed image")
}

// stallReadDev holds the first read at off until release is closed, after
// closing entered.
type stallReadDev struct {
	blockdev.Device
	off     int64
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (d *stallReadDev) ReadAt(p []byte, off int64) (int, error) {
	if off == d.off && d.armed.CompareAndSwap(true, false) {
		close(d.entered)
		<-d.release
	}
	return d.Device.ReadAt(p, off)
}

// TestCloseWaitsForBufferedWrite holds a buffered write of part of a
// written block in its page's read-in while Close begins: the write
// either fails with ErrClosed or is in the closed image, never returns
// nil and is lost with the page cache.
func TestCloseWaitsForBufferedWrite(t *testing.T) {
	mem := memdev.NewBlockSize(32<<20, 4096)
	require.NoError(t, Format(mem, FormatOptions{}))
	dev := &stallReadDev{Device: mem, entered: make(chan struct{}), release: make(chan struct{})}
	v, err := Open(dev, Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
	require.NoError(t, err)
	f, err := v.OpenFile("f", os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	_, err = f.WriteAt(bytes.Repeat([]byte{1}, 4*4096), 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	exts, err := f.Extents()
	require.NoError(t, err)
	require.NotEmpty(t, exts)
	v.pc.Invalidate(f.n.bops.key(), 0, 1<<30) // the write reads its page in
	dev.off = int64(exts[0].Physical)*4096 + 4096
	dev.armed.Store(true)

	data := []byte("buffered write in flight")
	wrote := make(chan error, 1)
	go func() { _, err := f.WriteAt(data, 4096+100); wrote <- err }()
	<-dev.entered
	closed := make(chan error, 1)
	go func() { closed <- v.Close() }()
	select {
	case <-closed:
	case <-time.After(200 * time.Millisecond):
	}
	close(dev.release)
	werr := <-wrote
	require.NoError(t, <-closed)
	checkImage(t, mem)
	if werr != nil {
		assert.ErrorIs(t, werr, ErrClosed)
		return
	}
	ro, err := Open(mem, Options{})
	require.NoError(t, err)
	defer ro.Close()
	got, err := ro.ReadFile("f")
	require.NoError(t, err)
	assert.Equal(t, data, got[4096+100:4096+100+len(data)], "WriteAt returned nil but its bytes are not in the closed image")
}

// TestCloseWaitsForBufferedIOLock: Close waits for a holder of
// LockIO(IomapBuffered) (a caller writing into the page cache through
// File.BufferedOps), and a LockIO after Close fails with ErrClosed.
func TestCloseWaitsForBufferedIOLock(t *testing.T) {
	mem := memdev.NewBlockSize(32<<20, 4096)
	require.NoError(t, Format(mem, FormatOptions{}))
	v, err := Open(mem, Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
	require.NoError(t, err)
	f, err := v.OpenFile("f", os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	l, err := f.LockIO(IomapBuffered, 0, 4096)
	require.NoError(t, err)
	closed := make(chan error, 1)
	go func() { closed <- v.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned %v while a buffered I/O lock was held", err)
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, l.Unlock(0, 0, nil))
	require.NoError(t, <-closed)
	_, err = f.LockIO(IomapBuffered, 0, 4096)
	require.ErrorIs(t, err, ErrClosed)
	checkImage(t, mem)
}

// TestBufferedIOLockSeesCloseUnderLock: a LockIO(IomapBuffered) that
// passed its checks before Close and got the inode lock only after
// Close's drain fails with ErrClosed instead of writing into a cache Close
// has already written back.
func TestBufferedIOLockSeesCloseUnderLock(t *testing.T) {
	mem := memdev.NewBlockSize(32<<20, 4096)
	require.NoError(t, Format(mem, FormatOptions{}))
	v, err := Open(mem, Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
	require.NoError(t, err)
	f, err := v.OpenFile("f", os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	f.n.mu.Lock() // as Close's drain holds it
	locked := make(chan error, 1)
	go func() {
		l, err := f.LockIO(IomapBuffered, 0, 4096)
		if err == nil {
			err = l.Unlock(0, 0, nil)
		}
		locked <- err
	}()
	time.Sleep(50 * time.Millisecond) // LockIO waits for the inode lock
	v.closed.Store(true)              // Close has begun
	f.n.mu.Unlock()
	require.ErrorIs(t, <-locked, ErrClosed)
	v.closed.Store(false)
	require.NoError(t, v.Close())
}

// closeWhileStalled runs write until the device stalls it (entered), then
// Close: Close must not return while the write is held, and both must
// return nil once release lets the write go on.
func closeWhileStalled(t *testing.T, v *Volume, entered, release chan struct{}, what string, write func() error) {
	t.Helper()
	wrote := make(chan error, 1)
	go func() { wrote <- write() }()
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- v.Close() }()
	select {
	case err := <-closed:
		close(release)
		<-wrote
		t.Fatalf("Close returned %v while %s was in flight", err, what)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-wrote)
	require.NoError(t, <-closed)
}
