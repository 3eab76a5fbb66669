package ext4iotest_test

import (
	"bytes"
	"io"
	"os"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/stretchr/testify/require"
)

// TestCrashSweepSyncedFile sweeps the crash points of a workload that
// writes a file in two synced generations: at every point the volume
// opens (replaying its journal), the file holds a whole generation (or is
// absent or empty before the first sync), never a mix, and e2fsck accepts
// the image.
func TestCrashSweepSyncedFile(t *testing.T) {
	start := memdev.New(32 << 20)
	require.NoError(t, ext4io.Format(start, ext4io.FormatOptions{}))
	gen := func(b byte) []byte { return bytes.Repeat([]byte{b}, 64<<10) }
	workload := func(dev blockdev.Device) error {
		v, err := ext4io.Open(dev, ext4io.Options{Writable: true, WritebackAge: -1})
		if err != nil {
			return err
		}
		f, err := v.Create("gen")
		if err != nil {
			return err
		}
		for _, b := range []byte{'a', 'b'} {
			if _, err := f.WriteAt(gen(b), 0); err != nil {
				return err
			}
			if err := f.Sync(); err != nil {
				return err
			}
		}
		if err := f.Close(); err != nil {
			return err
		}
		return v.Close()
	}
	checked := ext4iotest.CrashSweep(t, start, workload, func(t *testing.T, dev *memdev.Device, rep errordev.CrashReport) {
		v, err := ext4io.Open(dev, ext4io.Options{Writable: true, WritebackAge: -1})
		require.NoError(t, err, "open after the crash")
		if f, err := v.OpenFile("gen", os.O_RDONLY, 0); err == nil {
			got, err := io.ReadAll(io.NewSectionReader(f, 0, f.Size()))
			require.NoError(t, err)
			if len(got) > 0 {
				require.True(t, bytes.Equal(got, gen('a')) || bytes.Equal(got, gen('b')),
					"file holds %d bytes mixing generations", len(got))
			}
			require.NoError(t, f.Close())
		}
		require.NoError(t, v.Close())
		ext4iotest.FsckDev(t, dev)
	}, ext4iotest.SweepOptions{CrashAt: errordev.CrashAtOptions{KeepProb: 0.5}})
	require.Greater(t, checked, 2, "distinct crash images")
}

// TestSweepPoints checks the points chosen around flushes and the spread
// of MaxPoints.
func TestSweepPoints(t *testing.T) {
	rec, err := errordev.NewRecorder(memdev.New(1 << 20))
	require.NoError(t, err)
	for i := range 3 {
		_, err := rec.WriteAt([]byte{1}, int64(i)*512)
		require.NoError(t, err)
		require.NoError(t, rec.Flush())
	}
	// Log: w0 f1 w2 f3 w4 f5.
	require.Equal(t, []int{-1, 0, 1, 2, 3, 4, 5}, ext4iotest.SweepPoints(rec, ext4iotest.SweepOptions{}))
	require.Equal(t, []int{-1, 2, 5}, ext4iotest.SweepPoints(rec, ext4iotest.SweepOptions{EveryOp: true, MaxPoints: 3}))
}
