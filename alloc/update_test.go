package alloc

import (
	"testing"

	"github.com/ext4io/ext4io/internal/mkfs"
	"github.com/stretchr/testify/require"
)

// updaterIO is a MetaIO with MetaUpdater over DirectIO that counts how
// the allocator writes blocks.
type updaterIO struct {
	*DirectIO
	getWrites, updates int
}

func (u *updaterIO) GetWrite(blk uint64) ([]byte, error) {
	u.getWrites++
	return u.DirectIO.GetWrite(blk)
}

func (u *updaterIO) Update(blk uint64, fn func(b []byte)) error {
	u.updates++
	b, err := u.DirectIO.GetWrite(blk)
	if err != nil {
		return err
	}
	fn(b)
	return u.DirectIO.Dirty(blk, b)
}

// TestMetaUpdater: with a MetaUpdater the allocator writes block bitmaps
// and group descriptors through Update only, and what it writes is
// right: an allocator opened on the device afterwards finds the same
// blocks in use and the same free counts, and once they are freed again
// e2fsck finds the bitmaps and counts clean.
func TestMetaUpdater(t *testing.T) {
	m := newImage(t, 64<<20, mkfs.Options{}, nil)
	u := &updaterIO{DirectIO: NewDirectIO(m.dev, m.sb.BlockSize())}
	a, err := New(m.sb, u, Options{})
	require.NoError(t, err)
	m.a = a
	var runs [][2]uint64
	for g := range uint64(4) {
		s, n, err := a.Alloc(m.sb.GroupFirstBlock(g), 8, 32)
		require.NoError(t, err)
		runs = append(runs, [2]uint64{s, n})
	}
	require.NoError(t, a.Free(runs[0][0], 4))
	ok, err := a.AllocExact(runs[0][0], 4, 0)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, a.Free(runs[1][0], runs[1][1]))
	release, err := a.FreeDeferred(runs[2][0], 3)
	require.NoError(t, err)
	release()
	require.Zero(t, u.getWrites, "a block bitmap or descriptor written with GetWrite and Dirty")
	require.GreaterOrEqual(t, u.updates, 2*8, "a bitmap and a descriptor update per change")

	// What reached the device: an allocator opened on it sees the same.
	free := a.FreeBlocks()
	m.reopen(t, Options{})
	require.Equal(t, free, m.a.FreeBlocks(), "the descriptors' free counts")
	for _, r := range [][2]uint64{runs[0], {runs[2][0] + 3, runs[2][1] - 3}, runs[3]} {
		ok, err := m.a.AllocExact(r[0], r[1], 0)
		require.NoError(t, err)
		require.False(t, ok, "blocks allocated through Update are free in the bitmap on the device")
		require.NoError(t, m.a.Free(r[0], r[1]))
	}
	m.sync(t)
	fsck(t, m.path)
}
