package ext4io_test

import (
	"bytes"
	"errors"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
)

// TestFastCommitExtentTreeE2fsck: e2fsck 1.47.0 replays a fast commit's
// ranges by rebuilding the inode's whole extent tree when a tag of another
// inode comes. A tree too large for i_block gets a new leaf at the first
// block free in the bitmap as replayed so far, from the block before its
// first extent on (extent_node_split's goal), and there a block that a
// later ADD_RANGE maps is still free: e2fsck writes the leaf over that
// block's data (torture seed 51, round 193, where the later range was
// another file's). So the ranges of an inode whose tree is deeper than
// i_block are not logged: its fsync commits in full.
//
// The layout: a's block 5 at X and block 0 at X+1 (committed), then blocks
// 7, 9, 11, 13 in one fast commit (six extents: a leaf, whose goal X is
// taken, so e2fsck's first free block is X+3), then b's create (another
// inode's tag first) and a's blocks 8, 10, ... in the next, block 8 at X+3.
// With the ranges logged, e2fsck's replay leaves a's block 8 holding the
// leaf. A file whose extents fit in i_block stays a fast commit.
func TestFastCommitExtentTreeE2fsck(t *testing.T) {
	crash, _, v := fcHookVolume(t, memdev.New(64<<20), ext4io.FormatOptions{})
	require.NoError(t, v.Mkdir("/d", 0o755))
	const bs = 4096
	blk := func(c byte) []byte { return bytes.Repeat([]byte{c}, bs) }
	a, err := v.Create("/d/a")
	require.NoError(t, err)
	wantA := make([]byte, 17*bs)
	write := func(f *ext4io.File, want []byte, lblk int, c byte) {
		_, err := f.WriteAt(blk(c), int64(lblk*bs))
		require.NoError(t, err)
		copy(want[lblk*bs:], blk(c))
	}
	write(a, wantA, 5, 'F')
	require.NoError(t, a.Sync())
	write(a, wantA, 0, 'A')
	require.NoError(t, v.Sync()) // a's blocks 5 and 0 committed
	for _, l := range []int{7, 9, 11, 13} {
		write(a, wantA, l, byte('a'+l))
	}
	c0 := v.Counters()
	require.NoError(t, a.Sync())
	c1 := v.Counters()
	assert.Equal(t, c0.FastCommits, c1.FastCommits, "six extents: not a fast commit")
	assert.Equal(t, c0.FastCommitFallbacks+1, c1.FastCommitFallbacks)
	b, err := v.Create("/d/b")
	require.NoError(t, err)
	for _, l := range []int{8, 10, 12, 14, 15, 16} {
		write(a, wantA, l, byte('a'+l))
	}
	require.NoError(t, a.Sync())

	// c: three extents, which fit in i_block.
	c, err := v.Create("/d/c")
	require.NoError(t, err)
	wantC := make([]byte, 5*bs)
	for _, l := range []int{0, 2, 4} {
		write(c, wantC, l, byte('0'+l))
	}
	c2 := v.Counters()
	require.NoError(t, c.Sync())
	assert.Equal(t, c2.FastCommits+1, v.Counters().FastCommits, "three extents: a fast commit")

	img, err := crash.Crash(errordev.CrashOptions{})
	require.NoError(t, err)
	name := ext4iotest.ImageOf(t, img)
	out, err := exec.Command(ext4iotest.Tool(t, "e2fsck"), "-fy", name).CombinedOutput()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) && ee.ExitCode() <= 1 {
		err = nil
	}
	require.NoError(t, err, "%s", out)
	assert.NotContains(t, string(out), "ultiply-claimed", "e2fsck's replay mapped a block twice")
	ext4iotest.Fsck(t, name)
	want := map[string][]byte{"/d/a": wantA, "/d/b": {}, "/d/c": wantC}
	for f, w := range want {
		got := ext4iotest.Dump(t, name, f)
		assert.True(t, bytes.Equal(w, got), "e2fsck's replay: %s differs (%d bytes, want %d)", f, len(got), len(w))
	}
	rv, err := ext4io.Open(img, ext4io.Options{}) // ext4io's replay, in memory
	require.NoError(t, err)
	for f, w := range want {
		got, err := rv.ReadFile(f)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(w, got), "ext4io's replay: %s differs (%d bytes, want %d)", f, len(got), len(w))
	}
	require.NoError(t, rv.Close())
	for _, f := range []*ext4io.File{a, b, c} {
		require.NoError(t, f.Close())
	}
	require.NoError(t, v.Close())
}
