package ext4io

import (
	"bytes"
	"testing"

	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOrphanStepsNumberReused runs, between two steps of one File.Close's
// orphanSteps, the rest of the orphan's freeing through another Close
// (its own orphanSteps, then releaseOrphans), and creates and unlinks,
// still open, a file that takes the freed inode number: the first
// orphanSteps must not take the new orphan for its own. Before the step
// checked its inode was not freed meanwhile, it wrote the freed inode
// over the new file's: a crash then left the new orphan's inode as the
// freed one (its size and generation) with the new file's blocks unowned.
func TestOrphanStepsNumberReused(t *testing.T) {
	t.Parallel()
	mem, _ := bigTreeImage(t)
	v, f := bigTreeFile(t, mem)
	ino := f.ino
	require.NoError(t, v.Remove("big"))
	data := bytes.Repeat([]byte{0x5a}, 300<<10)
	var g *File
	hooked := 0
	v.stepHook = func(bool) {
		if hooked++; hooked != 2 {
			return
		}
		// Another Close frees the orphan meanwhile.
		require.NoError(t, v.stepOrphans(false))
		require.NoError(t, v.beginInternalOp())
		require.NoError(t, v.endOpErr(v.releaseOrphans(false)))
		var err error
		g, err = v.Create("new")
		require.NoError(t, err)
		require.Equal(t, ino, g.ino, "the number is reused")
		_, err = g.WriteAt(data, 0)
		require.NoError(t, err)
		require.NoError(t, v.Remove("new"))
	}
	require.NoError(t, f.Close())
	require.Greater(t, hooked, 2)
	v.stepHook = nil
	require.NotNil(t, g)
	got := make([]byte, len(data))
	_, err := g.ReadAt(got, 0)
	require.NoError(t, err)
	assert.Equal(t, data, got, "the new orphan keeps its data while open")
	require.NoError(t, v.Sync())
	in, err := v.readInode(ino)
	require.NoError(t, err)
	assert.Equal(t, uint64(len(data)), in.Size, "the new orphan's inode on disk is its own")
	assert.Equal(t, g.in.Generation, in.Generation)
	require.NoError(t, g.Close())
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, mem)
}

// TestOrphanListedThenFreed: a Close lists the in-memory orphans, another
// Close frees one of them, then the first looks at it. It must not read
// the freed inode back into the inode cache, where the inode allocator
// would find it live when it hands its number out again ("inode marked
// free but in use", seen in the torture harness with two goroutines).
func TestOrphanListedThenFreed(t *testing.T) {
	mem := memdev.New(16 << 20)
	require.NoError(t, Format(mem, FormatOptions{}))
	v, err := Open(mem, Options{Writable: true})
	require.NoError(t, err)
	f, err := v.Create("a")
	require.NoError(t, err)
	ino := f.ino
	require.NoError(t, v.Remove("a"))
	require.True(t, v.isOrphan(ino))
	require.NoError(t, f.Close()) // frees the orphan
	require.Nil(t, v.cachedInode(ino))

	// The first Close, which listed ino before it was freed, goes on.
	big, err := v.orphanNeedsSteps(ino)
	require.NoError(t, err)
	assert.False(t, big)
	require.NoError(t, v.orphanSteps(ino, true))
	assert.Nil(t, v.cachedInode(ino), "a freed inode was cached again")

	requireNumberReused(t, v, mem, ino)
}
