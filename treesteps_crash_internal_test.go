package ext4io

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"testing"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTruncateStepsConcurrentWriters truncates a file in steps (its tree
// needs them) through one of its two Files while both Files and two of
// another file in the same groups write, direct and atomic, under -race:
// every tree checks and e2fsck accepts the image.
func TestTruncateStepsConcurrentWriters(t *testing.T) {
	t.Parallel()
	mem := memdev.NewBlockSize(256<<20, 1024)
	require.NoError(t, Format(mem, FormatOptions{BlockSize: 1024, JournalBlocks: 1024}))
	v, err := Open(mem, Options{Writable: true, PageCacheBytes: -1})
	require.NoError(t, err)
	a1, err := v.Create("a")
	require.NoError(t, err)
	a2, err := v.OpenFile("a", os.O_RDWR, 0)
	require.NoError(t, err)
	bf, err := v.Create("b")
	require.NoError(t, err)
	const nblk = 2 * 84 * 300
	require.NoError(t, a1.Fallocate(FallocAllocate, 0, nblk*1024))
	buf := make([]byte, 1024)
	for i := int64(0); i < nblk; i += 2 {
		_, err := a1.WriteAt(buf, i*1024)
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	for g, f := range []*File{a1, a2, bf, bf} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := make([]byte, 4096)
			for i := 0; i < 300; i++ {
				off := int64((i*7919+g*131)%(nblk/4)) * 4096
				_, err := f.WriteAt(p, off)
				if err != nil {
					t.Errorf("write: %v", err)
					return
				}
				if i%50 == 0 {
					_, _ = f.WriteAtomic(p, off)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, sz := range []int64{nblk * 1024 / 2, 10000, 0} {
			if err := a2.Truncate(sz); err != nil {
				t.Errorf("truncate: %v", err)
			}
		}
	}()
	wg.Wait()
	for _, f := range []*File{a1, a2, bf} {
		require.NoError(t, f.CheckTree())
		require.NoError(t, f.Close())
	}
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, mem)
}

// TestTruncateStepsCrash crashes around every flush of a stepped truncate
// (made durable with Datasync, a fast commit when the volume has them) and
// the stepped unlink after it: every image opens writable (finishing
// the orphan), e2fsck accepts it, the file's size is the old or the new
// one, or the file is gone, and its first block keeps its data.
func TestTruncateStepsCrash(t *testing.T) {
	t.Parallel()
	for _, fc := range []bool{false, true} {
		t.Run(fmt.Sprintf("fastcommit=%v", fc), func(t *testing.T) { testTruncateStepsCrash(t, fc) })
	}
}

func testTruncateStepsCrash(t *testing.T, fc bool) {
	const nblk = 2 * 84 * 300
	start := memdev.NewBlockSize(96<<20, 1024)
	require.NoError(t, Format(start, FormatOptions{BlockSize: 1024, JournalBlocks: 1024, FastCommit: fc}))
	v, err := Open(start, Options{Writable: true, PageCacheBytes: -1})
	require.NoError(t, err)
	f, err := v.Create("big")
	require.NoError(t, err)
	require.NoError(t, f.Fallocate(FallocAllocate, 0, nblk*1024))
	mark := bytes.Repeat([]byte{0xA5}, 1024)
	for i := int64(0); i < nblk; i += 2 {
		_, err := f.WriteAt(mark, i*1024)
		require.NoError(t, err)
	}
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
	const half = nblk * 1024 / 2
	ext4iotest.CrashSweep(t, start, func(dev blockdev.Device) error {
		v, err := Open(dev, Options{Writable: true, PageCacheBytes: -1})
		if err != nil {
			return err
		}
		f, err := v.OpenFile("big", os.O_RDWR, 0)
		if err != nil {
			return err
		}
		if err := f.Truncate(half); err != nil {
			return err
		}
		if err := f.Datasync(); err != nil { // a fast commit when fc
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		if err := v.Remove("big"); err != nil {
			return err
		}
		return v.Close()
	}, func(t *testing.T, crashed *memdev.Device, _ errordev.CrashReport) {
		v, err := Open(crashed, Options{Writable: true, PageCacheBytes: -1})
		require.NoError(t, err)
		if f, err := v.Open("big"); err == nil {
			assert.Contains(t, []int64{nblk * 1024, half}, f.Size())
			got := make([]byte, 1024)
			_, err := f.ReadAt(got, 0)
			require.NoError(t, err)
			assert.Equal(t, mark, got)
			require.NoError(t, f.Close())
		} else {
			require.ErrorIs(t, err, fs.ErrNotExist)
		}
		require.NoError(t, v.Close())
		ext4iotest.FsckDev(t, crashed)
	}, ext4iotest.SweepOptions{MaxPoints: 16})
}
