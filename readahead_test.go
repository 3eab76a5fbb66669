package ext4io_test

import (
	"bytes"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// raVolume formats a counted memdev, writes size bytes of random data to
// "f" with direct writes and returns the volume, the device and the data.
// The file has no cached pages, so buffered reads go to the device.
func raVolume(t *testing.T, size int) (*ext4io.Volume, *readCounter, []byte) {
	t.Helper()
	dev := &readCounter{Device: memdev.NewBlockSize(64<<20, 4096)}
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{}))
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	require.NoError(t, err)
	t.Cleanup(func() { v.Close() })
	data := make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	w, err := v.OpenFile("f", os.O_RDWR|os.O_CREATE|ext4io.O_DIRECT, 0o644)
	require.NoError(t, err)
	_, err = w.WriteAt(data, 0)
	require.NoError(t, err)
	require.NoError(t, w.Sync())
	require.NoError(t, w.Close())
	return v, dev, data
}

// TestReadaheadSequential reads a 1 MiB file with 4 KiB buffered reads:
// the read-ahead window makes them one device read per 128 KiB, and a
// second pass from the start reads the same bytes.
func TestReadaheadSequential(t *testing.T) {
	v, dev, data := raVolume(t, 1<<20)
	f, err := v.Open("f")
	require.NoError(t, err)
	defer f.Close()
	buf := make([]byte, 4096)
	for pass := range 2 {
		before := dev.reads.Load()
		for off := 0; off < len(data); off += len(buf) {
			_, err := f.ReadAt(buf, int64(off))
			require.NoError(t, err)
			require.True(t, bytes.Equal(data[off:off+len(buf)], buf), "pass %d: bytes at %d", pass, off)
		}
		reads := dev.reads.Load() - before
		// The first read of a pass reads alone (it continues nothing),
		// then every 128 KiB one read of the window.
		assert.LessOrEqual(t, reads, int64(1+len(data)/(128<<10)+1), "pass %d: device reads for 256 sequential 4 KiB reads", pass)
	}
	// Random reads read what they ask for, one device read each.
	before := dev.reads.Load()
	// Outside the last window, [896 KiB, 1 MiB).
	for _, off := range []int{512 << 10, 64 << 10, 300 << 10} {
		_, err := f.ReadAt(buf, int64(off))
		require.NoError(t, err)
		require.True(t, bytes.Equal(data[off:off+len(buf)], buf), "random read at %d", off)
	}
	assert.Equal(t, int64(3), dev.reads.Load()-before, "device reads for 3 random reads")

	// Iomap ops handed out by any File of the inode write without the
	// File's paths: its Files stop reading ahead.
	d, err := v.OpenFile("f", os.O_RDWR|ext4io.O_DIRECT, 0)
	require.NoError(t, err)
	defer d.Close()
	_ = d.NormalOps()
	before = dev.reads.Load()
	for off := 0; off < 64<<10; off += len(buf) {
		_, err := f.ReadAt(buf, int64(off))
		require.NoError(t, err)
		require.True(t, bytes.Equal(data[off:off+len(buf)], buf), "after NormalOps: bytes at %d", off)
	}
	assert.Equal(t, int64(16), dev.reads.Load()-before, "device reads for 16 sequential reads after NormalOps")
}

// TestReadaheadSeesChanges changes the file through other Files between
// sequential reads that the read-ahead window covers: a direct write, a
// buffered write written back, a truncate and regrowth, a punched hole,
// a zeroed range and write-zeroes. Every read after a change sees it.
func TestReadaheadSeesChanges(t *testing.T) {
	v, _, data := raVolume(t, 1<<20)
	r, err := v.Open("f")
	require.NoError(t, err)
	defer r.Close()
	d, err := v.OpenFile("f", os.O_RDWR|ext4io.O_DIRECT, 0)
	require.NoError(t, err)
	defer d.Close()
	b, err := v.OpenFile("f", os.O_RDWR, 0)
	require.NoError(t, err)
	defer b.Close()

	want := bytes.Clone(data)
	next := int64(0)
	// read reads the next 4 KiB with r and checks them against want.
	read := func(what string) {
		t.Helper()
		buf := make([]byte, 4096)
		_, err := r.ReadAt(buf, next)
		require.NoError(t, err, what)
		require.True(t, bytes.Equal(want[next:next+4096], buf), "%s: bytes at %d", what, next)
		next += 4096
	}
	read("start")
	read("window filled") // [4 KiB, 132 KiB) is in the window now

	fill := func(n int, c byte) []byte { return bytes.Repeat([]byte{c}, n) }
	_, err = d.WriteAt(fill(4096, 1), next)
	require.NoError(t, err)
	copy(want[next:], fill(4096, 1))
	read("after a direct write")

	_, err = b.WriteAt(fill(4096, 2), next)
	require.NoError(t, err)
	require.NoError(t, b.Sync())
	copy(want[next:], fill(4096, 2))
	read("after a buffered write and sync")

	require.NoError(t, d.Fallocate(ext4io.FallocPunchHole, next, 4096))
	copy(want[next:], make([]byte, 4096))
	read("after a punched hole")

	require.NoError(t, d.Fallocate(ext4io.FallocZeroRange, next, 4096))
	copy(want[next:], make([]byte, 4096))
	read("after a zeroed range")

	require.NoError(t, d.Fallocate(ext4io.FallocWriteZeroes, next, 4096))
	copy(want[next:], make([]byte, 4096))
	read("after write-zeroes")

	require.NoError(t, d.Truncate(next))
	require.NoError(t, d.Truncate(int64(len(want))))
	clear(want[next:])
	read("after a truncate and regrowth")
	read("past the truncate")
}

// TestReadaheadConcurrent reads one File sequentially from two goroutines
// while a third rewrites the file's blocks with the same bytes through
// another File: the readers share the window (one of them reading the
// device when the other holds it) and always read the file's bytes. Run
// it with -race.
func TestReadaheadConcurrent(t *testing.T) {
	v, _, data := raVolume(t, 512<<10)
	r, err := v.Open("f")
	require.NoError(t, err)
	defer r.Close()
	d, err := v.OpenFile("f", os.O_RDWR|ext4io.O_DIRECT, 0)
	require.NoError(t, err)
	defer d.Close()
	stop := make(chan struct{})
	werr := make(chan error, 1)
	go func() {
		defer close(werr)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			off := (i * 4096) % len(data)
			if _, err := d.WriteAt(data[off:off+4096], int64(off)); err != nil {
				werr <- err
				return
			}
		}
	}()
	done := make(chan error, 2)
	for range 2 {
		go func() {
			buf := make([]byte, 4096)
			for range 4 {
				for off := 0; off < len(data); off += len(buf) {
					if _, err := r.ReadAt(buf, int64(off)); err != nil {
						done <- err
						return
					}
					if !bytes.Equal(data[off:off+len(buf)], buf) {
						done <- assert.AnError
						return
					}
				}
			}
			done <- nil
		}()
	}
	for range 2 {
		assert.NoError(t, <-done)
	}
	close(stop)
	require.NoError(t, <-werr)
}

// TestReadaheadAfterBufferedWrites reads sequentially a file of 1 MiB
// whose last 256 KiB of clean pages its buffered writes left in a cache
// of that size, as the bench's prepared file has: bytes not cached are
// read ahead, cached ones copied. Buffered writes not yet written back,
// ahead of the reader, are read from their dirty pages.
func TestReadaheadAfterBufferedWrites(t *testing.T) {
	dev := &readCounter{Device: memdev.NewBlockSize(64<<20, 4096)}
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{}))
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, WritebackAge: -1, PageCacheBytes: 256 << 10})
	require.NoError(t, err)
	defer v.Close()
	data := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	w, err := v.Create("f")
	require.NoError(t, err)
	defer w.Close()
	_, err = w.WriteAt(data, 0)
	require.NoError(t, err)
	require.NoError(t, w.Sync())

	r, err := v.Open("f")
	require.NoError(t, err)
	defer r.Close()
	buf := make([]byte, 4096)
	before := dev.reads.Load()
	for off := 0; off < 512<<10; off += len(buf) {
		_, err := r.ReadAt(buf, int64(off))
		require.NoError(t, err)
		require.True(t, bytes.Equal(data[off:off+len(buf)], buf), "bytes at %d", off)
	}
	assert.LessOrEqual(t, dev.reads.Load()-before, int64(6), "device reads for 128 sequential 4 KiB reads of uncached bytes")

	// A dirty page ahead of the reader, inside and past its window.
	for _, off := range []int{512<<10 + 8192, 700 << 10} {
		copy(data[off:], bytes.Repeat([]byte{7}, 4096))
		_, err = w.WriteAt(data[off:off+4096], int64(off))
		require.NoError(t, err)
	}
	for off := 512 << 10; off < len(data); off += len(buf) {
		_, err := r.ReadAt(buf, int64(off))
		require.NoError(t, err)
		require.True(t, bytes.Equal(data[off:off+len(buf)], buf), "bytes at %d after buffered writes", off)
	}
}
