package ext4io

import (
	"testing"

	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/stretchr/testify/require"
)

// fullVolume returns a journaled 16 MiB volume with 4 KiB blocks whose
// free space a file "fill" takes but for about free blocks, committed.
func fullVolume(t *testing.T, free int64) (*memdev.Device, *Volume) {
	t.Helper()
	dev, v := memVolume(t, 16<<20, 4096)
	fill, err := v.Create("/fill")
	require.NoError(t, err)
	chunk := make([]byte, 4096)
	var size int64
	for {
		if _, err := fill.WriteAt(chunk, size); err != nil {
			require.ErrorIs(t, err, ErrNoSpace)
			break
		}
		size += int64(len(chunk))
	}
	require.NoError(t, fill.Truncate(size-free*4096))
	require.NoError(t, fill.Close())
	require.NoError(t, v.Sync()) // the truncate's blocks are allocatable now
	return dev, v
}

// crashChecked recovers a copy of dev as it is now (a crash right after a
// Sync) with ext4io, checks it with e2fsck -fn and returns the extents
// file name has there.
func crashChecked(t *testing.T, dev *memdev.Device, name string) []FileExtent {
	t.Helper()
	img, err := dev.Clone()
	require.NoError(t, err)
	rv, err := Open(img, Options{Writable: true})
	require.NoError(t, err)
	require.NoError(t, rv.Close())
	checkImage(t, img)
	ro, err := Open(img, Options{})
	require.NoError(t, err)
	defer ro.Close()
	f, err := ro.Open(name)
	require.NoError(t, err)
	defer f.Close()
	ext, err := f.Extents()
	require.NoError(t, err)
	return ext
}

// TestFallocateNoSpaceCommitsInode: a Fallocate that fails for space
// half-way keeps the runs it allocated (and zero-range the range it
// punched), and the inode's new extent root and i_blocks commit with the
// bitmap changes. The torture (16 MiB, 8 goroutines) found both: a crash
// image after a Sync held blocks marked used that no inode mapped, and
// blocks freed in the bitmap that the inode still mapped.
func TestFallocateNoSpaceCommitsInode(t *testing.T) {
	t.Parallel()
	t.Run("allocate", func(t *testing.T) {
		t.Parallel()
		dev, v := fullVolume(t, 24)
		defer v.Close()
		f, err := v.Create("/f")
		require.NoError(t, err)
		defer f.Close()
		err = f.Fallocate(FallocAllocate, 0, 256<<10)
		require.ErrorIs(t, err, ErrNoSpace)
		want, err := f.Extents()
		require.NoError(t, err)
		require.NotEmpty(t, want, "nothing allocated before the failure")
		require.NoError(t, v.Sync())
		require.Equal(t, want, crashChecked(t, dev, "/f"))
	})
	t.Run("write-zeroes", func(t *testing.T) {
		// Written blocks past i_size are invalid (e2fsck clears them):
		// i_size covers what was zeroed.
		t.Parallel()
		dev, v := fullVolume(t, 24)
		defer v.Close()
		f, err := v.Create("/f")
		require.NoError(t, err)
		defer f.Close()
		err = f.Fallocate(FallocWriteZeroes, 0, 256<<10)
		require.ErrorIs(t, err, ErrNoSpace)
		want, err := f.Extents()
		require.NoError(t, err)
		require.NotEmpty(t, want, "nothing allocated before the failure")
		last := want[len(want)-1]
		require.Equal(t, int64(last.Logical+last.Length)*4096, f.Size())
		require.NoError(t, v.Sync())
		require.Equal(t, want, crashChecked(t, dev, "/f"))
	})
	t.Run("zero-range", func(t *testing.T) {
		t.Parallel()
		dev, v := fullVolume(t, 40)
		defer v.Close()
		f, err := v.Create("/f")
		require.NoError(t, err)
		defer f.Close()
		_, err = f.WriteAt(make([]byte, 64<<10), 0)
		require.NoError(t, err)
		require.NoError(t, v.Sync())
		before, err := f.Extents()
		require.NoError(t, err)
		err = f.Fallocate(FallocZeroRange, 8<<10, 1<<20)
		require.ErrorIs(t, err, ErrNoSpace)
		want, err := f.Extents()
		require.NoError(t, err)
		require.NotEqual(t, before, want, "the failed zero-range changed nothing")
		require.NoError(t, v.Sync())
		require.Equal(t, want, crashChecked(t, dev, "/f"))
	})
}
