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
// ranges by rebuilding the inode's whole extent tree, and takes the blocks
// of a tree too large for i_block from the block bitmap as replayed so
// far, where a block a later ADD_RANGE of the area maps is still free.
// Torture seed 51, round 193: e2fsck wrote a file's new leaf block over
// another file's fsynced data and left the block claimed twice. So the
// ranges of an inode whose tree is deeper than i_block are not logged: its
// fsync commits in full. A file whose extents fit in i_block stays a fast
// commit, and the crash image replays the same under e2fsck and ext4io.
func TestFastCommitExtentTreeE2fsck(t *testing.T) {
	crash, _, v := fcHookVolume(t, memdev.New(64<<20), ext4io.FormatOptions{})
	require.NoError(t, v.Mkdir("/d", 0o755))
	require.NoError(t, v.Sync())
	const bs = 4096
	blk := func(c byte) []byte { return bytes.Repeat([]byte{c}, bs) }
	// sparse writes n one-block extents (every other block) to a new file.
	sparse := func(name string, n int) (*ext4io.File, []byte) {
		f, err := v.Create(name)
		require.NoError(t, err)
		want := make([]byte, (2*n-1)*bs)
		for i := 0; i < n; i++ {
			_, err = f.WriteAt(blk(byte('a'+i)), int64(2*i*bs))
			require.NoError(t, err)
			copy(want[2*i*bs:], blk(byte('a'+i)))
		}
		return f, want
	}

	c, wantC := sparse("/d/c", 3) // fits in i_block
	c0 := v.Counters()
	require.NoError(t, c.Sync())
	c1 := v.Counters()
	assert.Equal(t, c0.FastCommits+1, c1.FastCommits, "three extents: a fast commit")
	assert.Equal(t, c0.FastCommitFallbacks, c1.FastCommitFallbacks)

	a, wantA := sparse("/d/a", 6) // a leaf block
	require.NoError(t, a.Sync())
	a1 := v.Counters()
	assert.Equal(t, c1.FastCommits, a1.FastCommits, "six extents: not a fast commit")
	assert.Equal(t, c1.FastCommitFallbacks+1, a1.FastCommitFallbacks)

	// Then a fast commit again: B, and a block more of C.
	b, err := v.Create("/d/b")
	require.NoError(t, err)
	wantB := bytes.Repeat([]byte("B's fsynced data"), 8*bs/16)
	_, err = b.WriteAt(wantB, 0)
	require.NoError(t, err)
	_, err = c.WriteAt(blk('z'), int64(len(wantC)+bs))
	require.NoError(t, err)
	wantC = append(wantC, append(make([]byte, bs), blk('z')...)...)
	require.NoError(t, b.Sync())
	require.NoError(t, c.Sync())
	assert.Equal(t, a1.FastCommits+2, v.Counters().FastCommits)

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
	want := map[string][]byte{"/d/a": wantA, "/d/b": wantB, "/d/c": wantC}
	for f, w := range want {
		assert.Equal(t, w, ext4iotest.Dump(t, name, f), "e2fsck's replay: %s", f)
	}
	rv, err := ext4io.Open(img, ext4io.Options{}) // ext4io's replay, in memory
	require.NoError(t, err)
	for f, w := range want {
		got, err := rv.ReadFile(f)
		require.NoError(t, err)
		assert.Equal(t, w, got, "ext4io's replay: %s", f)
	}
	require.NoError(t, rv.Close())
	for _, f := range []*ext4io.File{a, b, c} {
		require.NoError(t, f.Close())
	}
	require.NoError(t, v.Close())
}
