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

// TestFastCommitReusedInodeXattrs: a file created in a freed inode whose
// in-inode xattrs are still on disk must not get them back from a replay
// of its fast commit. The INODE tag carries the first 128 + i_extra_isize
// bytes, and the replay keeps the rest of the on-disk inode, where the
// freed inode's xattrs lie (torture seed 51, round 2: a new file had a
// deleted file's user.a2). Such a create is not eligible: its fsync
// commits in full.
func TestFastCommitReusedInodeXattrs(t *testing.T) {
	crash, _, v := fcHookVolume(t, memdev.New(64<<20), ext4io.FormatOptions{})
	require.NoError(t, v.Mkdir("/d", 0o755))
	old, err := v.Create("/d/old")
	require.NoError(t, err)
	require.NoError(t, old.Close())
	require.NoError(t, v.Setxattr("/d/old", "user.secret", []byte("from the deleted file"), 0))
	oldInfo, err := v.Stat("/d/old")
	require.NoError(t, err)
	require.NoError(t, v.Remove("/d/old"))
	require.NoError(t, v.Sync()) // the free is committed; the inode keeps its xattr area on disk

	data := bytes.Repeat([]byte("new"), 3000)
	f, err := v.Create("/d/new")
	require.NoError(t, err)
	info, err := v.Stat("/d/new")
	require.NoError(t, err)
	require.Equal(t, oldInfo.Ino, info.Ino, "the new file must reuse the freed inode for the test to mean anything")
	_, err = f.WriteAt(data, 0)
	require.NoError(t, err)
	before := v.Counters()
	require.NoError(t, f.Sync())
	after := v.Counters()
	assert.Equal(t, before.FastCommitFallbacks+1, after.FastCommitFallbacks, "the create over the freed inode's xattrs must commit in full")
	// A create into a never used inode stays a fast commit.
	g, err := v.Create("/d/fresh")
	require.NoError(t, err)
	_, err = g.WriteAt(data[:100], 0)
	require.NoError(t, err)
	require.NoError(t, g.Sync())
	assert.Equal(t, after.FastCommits+1, v.Counters().FastCommits)
	require.NoError(t, g.Close())

	img, err := crash.Crash(errordev.CrashOptions{})
	require.NoError(t, err)
	for _, opts := range []ext4io.Options{{}, {Writable: true}} {
		dev, err := img.Clone()
		require.NoError(t, err)
		rv, err := ext4io.Open(dev, opts)
		require.NoError(t, err)
		got, err := rv.ReadFile("/d/new")
		require.NoError(t, err)
		assert.Equal(t, data, got)
		got, err = rv.ReadFile("/d/fresh")
		require.NoError(t, err)
		assert.Equal(t, data[:100], got)
		names, err := rv.Listxattr("/d/new")
		require.NoError(t, err)
		assert.Empty(t, names, "replay (writable %v) gave the new file the freed inode's xattrs", opts.Writable)
		require.NoError(t, rv.Close())
	}
	// e2fsck's replay of the same image.
	name := ext4iotest.ImageOf(t, img)
	out, err := exec.Command(ext4iotest.Tool(t, "e2fsck"), "-fy", name).CombinedOutput()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) && ee.ExitCode() <= 1 {
		err = nil
	}
	require.NoError(t, err, "%s", out)
	ext4iotest.Fsck(t, name)
	assert.Equal(t, data, ext4iotest.Dump(t, name, "/d/new"))
	assert.Equal(t, data[:100], ext4iotest.Dump(t, name, "/d/fresh"))
	assert.NotContains(t, ext4iotest.Debugfs(t, name, false, "ea_list /d/new"), "user.secret")
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
}
