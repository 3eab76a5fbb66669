package extent

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRootAfterFailedCommit checks Root on a tree whose commit failed
// part way: the insert that split the full root wrote no leaf (the device
// failed), so the root stayed changed in memory but unencoded, and Root
// encodes it on the spot. It must give what the same insert's successful
// commit gives on an identical tree, not the root from before the insert.
func TestRootAfterFailedCommit(t *testing.T) {
	open := func() (*Tree, *memIO) {
		io := newMemIO(1024)
		root := EmptyRoot()
		tr, err := Open(&root, Config{BlockSize: 1024, Ino: 12, FirstDataBlock: 1, BlocksCount: 1 << 24, IO: io, Alloc: newMemAlloc(treeBase)})
		require.NoError(t, err)
		return tr, io
	}
	failing, fio := open()
	good, _ := open()
	for i := range uint32(RootMax) {
		e := Extent{Lblk: 10 * i, Len: 2, Pblk: 5000 + 10*uint64(i)}
		require.NoError(t, failing.Insert(e))
		require.NoError(t, good.Insert(e))
	}
	before := failing.Root()
	require.Equal(t, before, good.Root())

	split := Extent{Lblk: 10 * RootMax, Len: 2, Pblk: 5000 + 10*RootMax}
	fio.failW = true
	require.ErrorIs(t, failing.Insert(split), ErrIO)
	require.NoError(t, good.Insert(split))
	got := failing.Root()
	assert.NotEqual(t, before, got, "the failed insert changed the root in memory")
	assert.Equal(t, good.Root(), got)
}
