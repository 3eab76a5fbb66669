package main

import (
	"bytes"
	"errors"
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
