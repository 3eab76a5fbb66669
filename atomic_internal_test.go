package ext4io

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAtomicCreditsRefuse: a swap whose metadata would not fit one
// journal transaction (here: a journal too small for it) is refused with
// ErrUnsupported, nothing written; with the usual journal it goes on.
func TestAtomicCreditsRefuse(t *testing.T) {
	t.Parallel()
	_, v := memVolume(t, 64<<20, 4096)
	defer v.Close()
	f, err := v.Create("db")
	require.NoError(t, err)
	defer f.Close()
	old := bytes.Repeat([]byte{1}, 64<<10)
	_, err = f.WriteAt(old, 0)
	require.NoError(t, err)
	// Punch every other block: 8 pieces in the 16 blocks.
	for b := int64(1); b < 16; b += 2 {
		require.NoError(t, f.Fallocate(FallocPunchHole|FallocKeepSize, b*4096, 4096))
	}
	f.n.mu.Lock()
	whole, err := f.atomicCredits([]atomicRange{{lblk: 0, nblk: 16}})
	f.n.mu.Unlock()
	require.NoError(t, err)
	require.Positive(t, f.m.tree.Depth(), "8 pieces do not fit the root")
	require.GreaterOrEqual(t, whole, 2+1+2*2+2, "a group, a leaf, two splits' paths, the inode and superblock")
	require.GreaterOrEqual(t, atomicWorstCredits(16, 1, f.m.tree.Depth(), v.sb.GroupCount()), whole, "the bound small swaps use instead of the count")

	most := v.jm.maxChunk
	v.jm.maxChunk = whole - 1 // the limit of a smaller journal
	want := make([]byte, 64<<10)
	_, err = f.ReadAt(want, 0)
	require.NoError(t, err)
	_, err = f.WriteAtomic(bytes.Repeat([]byte{2}, 64<<10), 0)
	require.ErrorIs(t, err, ErrUnsupported)
	got := make([]byte, 64<<10)
	_, err = f.ReadAt(got, 0)
	require.NoError(t, err)
	require.Equal(t, want, got, "a refused atomic write changed the file")
	v.jm.maxChunk = most
	_, err = f.WriteAtomic(bytes.Repeat([]byte{2}, 64<<10), 0)
	require.NoError(t, err)
}
