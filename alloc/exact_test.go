package alloc

import (
	"testing"

	"github.com/ext4io/ext4io/internal/mkfs"
	"github.com/stretchr/testify/require"
)

// TestAllocExact takes runs at one place only: free blocks yes; used,
// busy (freed, not released) or cross-group runs no, changing nothing.
func TestAllocExact(t *testing.T) {
	m := newImage(t, 64<<20, mkfs.Options{}, nil)
	a := m.a
	s, n, err := a.Alloc(0, 16, 16)
	require.NoError(t, err)
	require.Equal(t, uint64(16), n)
	free0, avail0 := a.FreeBlocks(), a.Available(0)

	ok, err := a.AllocExact(s+4, 4, 0)
	require.NoError(t, err)
	require.False(t, ok, "used blocks")
	require.NoError(t, a.Free(s+4, 4))
	ok, err = a.AllocExact(s+3, 4, 0)
	require.NoError(t, err)
	require.False(t, ok, "a run starting on a used block")
	ok, err = a.AllocExact(s+4, 5, 0)
	require.NoError(t, err)
	require.False(t, ok, "a run ending on a used block")
	require.Equal(t, free0+4, a.FreeBlocks(), "a refused AllocExact changed the counts")
	ok, err = a.AllocExact(s+4, 4, 0)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, free0, a.FreeBlocks())
	require.Equal(t, avail0, a.Available(0))

	release, err := a.FreeDeferred(s+8, 2)
	require.NoError(t, err)
	ok, err = a.AllocExact(s+8, 2, 0)
	require.NoError(t, err)
	require.False(t, ok, "busy blocks")
	release()
	ok, err = a.AllocExact(s+8, 2, 0)
	require.NoError(t, err)
	require.True(t, ok, "released blocks")

	end := m.sb.GroupFirstBlock(1)
	ok, err = a.AllocExact(end-2, 4, 0)
	require.NoError(t, err)
	require.False(t, ok, "a run across a group boundary")
	require.NoError(t, a.Free(s, 16)) // all 16 are in use again
	require.Equal(t, free0+16, a.FreeBlocks())
	m.sync(t)
	fsck(t, m.path)
}
