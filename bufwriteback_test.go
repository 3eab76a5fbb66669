package ext4io_test

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// vecCountDev counts the vectored writes (blockdev.VectorWriter) going
// to an image file and the bytes they carry.
type vecCountDev struct {
	*blockdev.File
	writes, bytes atomic.Int64
}

func (d *vecCountDev) WriteVAt(bufs [][]byte, off int64) (int, error) {
	n, err := d.File.WriteVAt(bufs, off)
	d.writes.Add(1)
	d.bytes.Add(int64(n))
	return n, err
}

// TestBufferedWritebackVectored writes a file through a small page cache
// on an image file, mostly with sequential 4 KiB appends and with some
// unaligned writes and rewrites of pages already written back, so the
// writers write back the oldest dirty runs themselves. Write-back hands
// each run's pages to the device in one pwritev: the data comes back
// byte for byte after a reopen, the runs carry many pages each, appends
// keep one extent per contiguous run and e2fsck finds the image clean.
func TestBufferedWritebackVectored(t *testing.T) {
	const size = 6<<20 + 3000
	img := formatImage(t, 64<<20, ext4io.FormatOptions{NoDiscard: true})
	file, err := blockdev.OpenFile(img, false)
	require.NoError(t, err)
	dev := &vecCountDev{File: file}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, PageCacheBytes: 256 << 10, WritebackAge: -1, CommitInterval: -1})
	require.NoError(t, err)
	f, err := v.Create("/seq")
	require.NoError(t, err)
	model := make([]byte, size)
	r := rand.New(rand.NewPCG(1, 2))
	write := func(off int64, n int) {
		t.Helper()
		p := model[off : off+int64(n)]
		for i := range p {
			p[i] = byte(r.Uint32()) | 1
		}
		k, err := f.WriteAt(p, off)
		require.NoError(t, err)
		require.Equal(t, n, k)
	}
	for off := int64(0); off < size; off += 4096 {
		write(off, int(min(4096, size-off)))
		if off%(1<<20) == 512<<10 {
			// Rewrite parts of pages written back (and maybe evicted)
			// earlier, unaligned: read in, modified, written back again.
			write(off-300<<10+123, 5000)
		}
	}
	require.NoError(t, f.Sync())
	exts := requireRunsMerged(t, f)
	assert.Less(t, len(exts), 8, "a file written by appends: %d extents", len(exts))
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
	// 256 KiB of cache: write-back runs of up to 64 pages, one device
	// request each.
	require.Positive(t, dev.writes.Load(), "no vectored write-back")
	assert.GreaterOrEqual(t, dev.bytes.Load(), int64(size), "bytes written back with pwritev")
	assert.Greater(t, dev.bytes.Load()/dev.writes.Load(), int64(32<<10), "bytes per vectored write (%d writes)", dev.writes.Load())
	e2fs.Fsck(t, img)

	v, err = ext4io.OpenImage(img, ext4io.Options{})
	require.NoError(t, err)
	defer v.Close()
	g, err := v.Open("/seq")
	require.NoError(t, err)
	got := make([]byte, size+1)
	n, _ := g.ReadAt(got, 0)
	require.Equal(t, size, n)
	if i := firstDiff(got[:n], model); i >= 0 {
		t.Fatalf("byte %d (block %d) reads %#x, want %#x", i, i/4096, got[i], model[i])
	}
}

// TestBufferedWriteTimes: a buffered write stamps its file with the touch
// clock instead of reading the clock: Stat shows an mtime and ctime no
// earlier than the write's start and no later than the Stat, whether the
// write's epoch still runs or ended long before, and Sync writes them.
func TestBufferedWriteTimes(t *testing.T) {
	img := formatImage(t, 32<<20, ext4io.FormatOptions{})
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	f, err := v.Create("/f")
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	write := func(off int64) time.Time {
		t.Helper()
		time.Sleep(3 * time.Millisecond)
		start := time.Now()
		_, err := f.WriteAt([]byte("data"), off)
		require.NoError(t, err)
		return start
	}
	check := func(what string, start time.Time) {
		t.Helper()
		fi, err := v.Stat("/f")
		require.NoError(t, err)
		now := time.Now()
		for _, ts := range []time.Time{fi.Mtime, fi.Ctime} {
			assert.False(t, ts.Before(start), "%s: time %v before the write started at %v", what, ts, start)
			assert.False(t, ts.After(now), "%s: time %v after the Stat at %v", what, ts, now)
		}
	}
	check("at once", write(0))
	start := write(5000)
	time.Sleep(50 * time.Millisecond) // the write's epoch ends
	check("later", start)
	last := write(9000)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
	v, err = ext4io.OpenImage(img, ext4io.Options{})
	require.NoError(t, err)
	defer v.Close()
	fi, err := v.Stat("/f")
	require.NoError(t, err)
	assert.False(t, fi.Mtime.Before(last), "after Sync: mtime %v, write at %v", fi.Mtime, last)
}
