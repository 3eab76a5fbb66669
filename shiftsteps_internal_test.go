package ext4io

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestShiftTreeLargerThanLog collapses and inserts a block at the start
// of a file whose extent tree after it is larger than one transaction
// takes. The shift ran in one operation that the log refused
// (ErrNoSpace), which stopped the volume: every later write failed with
// ErrReadOnly and the shift was lost. It is refused up front now, with
// an *fs.PathError matching ErrNoSpace, the file unchanged and the
// volume writable; a shift of a smaller tree still works.
func TestShiftTreeLargerThanLog(t *testing.T) {
	t.Parallel()
	for _, mode := range []FallocMode{FallocCollapseRange, FallocInsertRange} {
		t.Run(mode.String(), func(t *testing.T) {
			mem, _ := bigTreeImage(t)
			v, f := bigTreeFile(t, mem)
			mark := bytes.Repeat([]byte{0x5A}, 1024)
			_, err := f.WriteAt(mark, 2*1024)
			require.NoError(t, err)
			size := f.Size()
			err = f.Fallocate(mode, 1024, 1024)
			t.Log(err)
			var pe *fs.PathError
			require.True(t, errors.As(err, &pe), "%v", err)
			require.ErrorIs(t, err, ErrNoSpace)
			assert.Equal(t, size, f.Size(), "the file is unchanged")
			got := make([]byte, 1024)
			_, err = f.ReadAt(got, 2*1024)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(mark, got), "the block after the range keeps its data")

			// The volume still commits: a shift of a small tree, and
			// writes, work and survive a reopen.
			g, err := v.Create("small")
			require.NoError(t, err)
			_, err = g.WriteAt(bytes.Repeat(mark, 8), 0)
			require.NoError(t, err)
			require.NoError(t, g.Fallocate(mode, 1024, 1024))
			require.NoError(t, g.Close())
			require.NoError(t, f.Close())
			require.NoError(t, v.Close())
			v, err = Open(mem, Options{})
			require.NoError(t, err)
			g, err = v.Open("small")
			require.NoError(t, err)
			want := int64(7 * 1024)
			if mode == FallocInsertRange {
				want = 9 * 1024
			}
			assert.Equal(t, want, g.Size())
			require.NoError(t, g.Close())
			require.NoError(t, v.Close())
			ext4iotest.FsckDev(t, mem)
		})
	}
}

// TestShiftTreeFitsLog collapses and inserts at the start of a file whose
// tree past the offset has some 400 leaves (half full) on the smallest journal: under
// the limit (shiftFitsLocked), the shift runs in one operation, commits
// and moves the data; e2fsck accepts the image after a reopen.
func TestShiftTreeFitsLog(t *testing.T) {
	t.Parallel()
	for _, mode := range []FallocMode{FallocCollapseRange, FallocInsertRange} {
		t.Run(mode.String(), func(t *testing.T) {
			const n = 2 * 84 * 190
			mem := memdev.NewBlockSize(128<<20, 1024)
			v, f := smallLogFile(t, mem, n)
			w, err := f.m.tree.ShiftBlocks(2)
			require.NoError(t, err)
			require.Greater(t, w, v.jm.commitAt*4, "a shift much larger than a step")
			mark := bytes.Repeat([]byte{0x5A}, 1024)
			const at = 2 * 84 * 150 * 1024 // a written block far into the file
			_, err = f.WriteAt(mark, at)
			require.NoError(t, err)
			size := f.Size()
			// The pending set the shift leaves (no commit at the end of
			// its operation) stays within what shiftFitsLocked counted.
			require.NoError(t, v.Sync())
			est := w + shiftSlack + 2*3 // a collapse's one-block removal: leaf, bitmap, descriptor
			commitAt := v.jm.commitAt
			v.jm.commitAt = math.MaxInt
			require.NoError(t, f.Fallocate(mode, 1024, 1024))
			changed := v.jm.pendingLen()
			v.jm.commitAt = commitAt
			t.Logf("counted %d, changed %d metadata blocks", est, changed)
			assert.LessOrEqual(t, changed, est)
			want, wantAt := size-1024, int64(at-1024)
			if mode == FallocInsertRange {
				want, wantAt = size+1024, at+1024
			}
			assert.Equal(t, want, f.Size())
			require.NoError(t, f.CheckTree())
			require.NoError(t, f.Close())
			require.NoError(t, v.Close())
			ext4iotest.FsckDev(t, mem)
			v, err = Open(mem, Options{})
			require.NoError(t, err)
			f, err = v.Open("f")
			require.NoError(t, err)
			assert.Equal(t, want, f.Size())
			got := make([]byte, 1024)
			_, err = f.ReadAt(got, wantAt)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(mark, got), "the marked block moved with the shift")
			require.NoError(t, f.Close())
			require.NoError(t, v.Close())
		})
	}
}

// TestShiftLargeCrash crashes around every flush of a collapse, then an
// insert, of a file whose tree past the offset has some 400 leaves (one
// large transaction each): every image opens, e2fsck accepts it, and the
// file is as before, after the collapse, or after both, its marked block
// where that size says.
func TestShiftLargeCrash(t *testing.T) {
	t.Parallel()
	const n = 2 * 84 * 190
	const at = 2 * 84 * 150 * 1024
	start := memdev.NewBlockSize(128<<20, 1024)
	v, f := smallLogFile(t, start, n)
	mark := bytes.Repeat([]byte{0x5A}, 1024)
	_, err := f.WriteAt(mark, at)
	require.NoError(t, err)
	size := f.Size()
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
	ext4iotest.CrashSweep(t, start, func(dev blockdev.Device) error {
		v, err := Open(dev, Options{Writable: true, PageCacheBytes: -1})
		if err != nil {
			return err
		}
		f, err := v.OpenFile("f", os.O_RDWR, 0)
		if err != nil {
			return err
		}
		if err := f.Fallocate(FallocCollapseRange, 1024, 2048); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		if err := f.Fallocate(FallocInsertRange, 0, 1024); err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		return v.Close()
	}, func(t *testing.T, crashed *memdev.Device, _ errordev.CrashReport) {
		v, err := Open(crashed, Options{Writable: true, PageCacheBytes: -1})
		require.NoError(t, err)
		f, err := v.Open("f")
		require.NoError(t, err)
		where := map[int64]int64{size: at, size - 2048: at - 2048, size - 1024: at - 1024}
		want, ok := where[f.Size()]
		require.True(t, ok, "size %d is the old size or one after a shift", f.Size())
		got := make([]byte, 1024)
		_, err = f.ReadAt(got, want)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(mark, got), "the marked block is at %d", want)
		require.NoError(t, f.CheckTree())
		require.NoError(t, f.Close())
		require.NoError(t, v.Close())
		ext4iotest.FsckDev(t, crashed)
	}, ext4iotest.SweepOptions{MaxPoints: 16})
}

// TestShiftConcurrentReaders collapses a block at the start of a file of
// some 200 tree leaves five times while two goroutines read its blocks,
// under -race: every read sees the file before or after a collapse (each
// written block names its original block; after j collapses block p holds
// block p+j), never a block from elsewhere.
func TestShiftConcurrentReaders(t *testing.T) {
	const n = 2 * 84 * 100
	mem := memdev.NewBlockSize(64<<20, 1024)
	v, f := smallLogFile(t, mem, n)
	blk := make([]byte, 1024)
	for i := int64(0); i < n; i += 2 {
		binary.LittleEndian.PutUint64(blk, uint64(i)+1)
		_, err := f.WriteAt(blk, i*1024)
		require.NoError(t, err)
	}
	const collapses = 5
	var (
		wg   sync.WaitGroup
		stop atomic.Bool
		done atomic.Int64 // collapses finished
	)
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := make([]byte, 1024)
			for i := 0; !stop.Load(); i++ {
				p := int64(1 + (i*7919+g*104729)%(n-2*collapses))
				before := done.Load()
				_, err := f.ReadAt(got, p*1024)
				after := done.Load()
				if !assert.NoError(t, err) {
					return
				}
				q := int64(binary.LittleEndian.Uint64(got)) - 1
				if q < 0 {
					continue // an unwritten block
				}
				if !assert.True(t, q-p >= before && q-p <= after+1,
					"block %d holds block %d between collapses %d and %d", p, q, before, after) {
					return
				}
			}
		}()
	}
	for range collapses {
		require.NoError(t, f.Fallocate(FallocCollapseRange, 1024, 1024))
		done.Add(1)
	}
	stop.Store(true)
	wg.Wait()
	require.NoError(t, f.CheckTree())
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, mem)
}
