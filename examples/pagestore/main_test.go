package main

import (
	"bytes"
	"errors"
	"sync"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/stretchr/testify/require"
)

func TestRun(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out, 20))
	require.Contains(t, out.String(), "atomic write units: 4096 to 1048576 bytes")
	require.Contains(t, out.String(), "all checksums good")
}

// vecDev is a memdev that takes vectored writes (blockdev.VectorWriter)
// and records the most buffers one of them held.
type vecDev struct {
	*memdev.Device
	mu      sync.Mutex
	maxBufs int
}

func (d *vecDev) WriteVAt(bufs [][]byte, off int64) (int, error) {
	d.mu.Lock()
	d.maxBufs = max(d.maxBufs, len(bufs))
	d.mu.Unlock()
	return blockdev.WriteVAt(d.Device, bufs, off)
}

// TestWritePagesBatch: WritePages hands a batch of pages to the volume in
// one WriteAtomicBatch, whose pages reach the device in one vectored
// write of a buffer per page; a batch of one page is a single write.
func TestWritePagesBatch(t *testing.T) {
	dev := &vecDev{Device: memdev.NewBlockSize(32<<20, 4096)}
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{}))
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	require.NoError(t, err)
	c, err := Create(v, "pages", 64)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	s, err := Open(v, "pages")
	require.NoError(t, err)

	require.NoError(t, workload(s, 1, 1, 5))
	require.Equal(t, 1, dev.maxBufs, "a batch of one page")
	require.NoError(t, workload(s, 3, 16, 5))
	require.Equal(t, 16, dev.maxBufs, "the 16 pages of a batch in one vectored write")
	page := make([]byte, pageSize)
	written := 0
	for no := range uint32(s.Pages()) {
		_, ok, err := s.ReadPage(no, page)
		require.NoError(t, err)
		if ok {
			written++
		}
	}
	require.Greater(t, written, 16)
	require.NoError(t, s.Close())
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, dev.Device)
}

// crashSweep runs the page workload (plain or atomic page writes) and
// crashes it at every device write and flush, tearing the last write at
// 4 KiB; it returns how many crash images hold a torn page, and checks
// that every image recovers and passes e2fsck.
func crashSweep(t *testing.T, plain bool) (torn int) {
	start := memdev.NewBlockSize(32<<20, 4096)
	require.NoError(t, ext4io.Format(start, ext4io.FormatOptions{NoDiscard: true}))
	v, err := ext4io.Open(start, ext4io.Options{Writable: true})
	require.NoError(t, err)
	s, err := Create(v, "pages", 32)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, v.Close())
	work := func(dev blockdev.Device) error {
		v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
		if err != nil {
			return err
		}
		s, err := Open(v, "pages")
		if err != nil {
			return err
		}
		s.Plain = plain
		// Full pages of every page first, then random rewrites.
		err = workload(s, 12, 4, 3)
		return errors.Join(err, s.Close(), v.Close())
	}
	ext4iotest.CrashSweep(t, start, work, func(t *testing.T, dev *memdev.Device, rep errordev.CrashReport) {
		v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
		require.NoError(t, err)
		s, err := Open(v, "pages")
		require.NoError(t, err)
		page := make([]byte, pageSize)
		for no := range uint32(s.Pages()) {
			_, _, err := s.ReadPage(no, page)
			if errors.Is(err, ErrTorn) {
				torn++
				break
			}
			require.NoError(t, err)
		}
		require.NoError(t, s.Close())
		require.NoError(t, v.Close())
		ext4iotest.FsckDev(t, dev)
	}, ext4iotest.SweepOptions{EveryOp: true, MaxPoints: 40,
		CrashAt: errordev.CrashAtOptions{KeepProb: 0.5, Tear: true, TearUnit: 4096}})
	return torn
}

// TestAtomicPagesNeverTear: with WriteAtomic no crash image holds a torn
// page, so the engine needs no doublewrite buffer.
func TestAtomicPagesNeverTear(t *testing.T) {
	require.Zero(t, crashSweep(t, false), "crash images with a torn page")
}

// TestPlainPagesTear is the control: the same workload with WriteAt
// leaves torn pages in some crash images, which is what the doublewrite
// buffer exists for.
func TestPlainPagesTear(t *testing.T) {
	if testing.Short() {
		t.Skip("the control sweep is skipped in -short mode")
	}
	torn := crashSweep(t, true)
	require.Positive(t, torn, "plain page writes never tore: the sweep cannot tell atomic writes from plain ones")
	t.Logf("%d crash images hold a torn page", torn)
}
