package ext4io_test

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
)

// TestFastCommitSurvivesStoppedVolume: an fsync acknowledged by a fast
// commit stays durable when a later I/O error stops the volume. The fast
// commit is the only record of the file's creation until a full commit,
// so the Close of the stopped volume must leave the journal for recovery
// (s_start set) instead of marking it empty, which would make every
// replay skip the fast-commit area. The torture harness found it:
// "synced file: open /r402g2/f0: no such file or directory".
func TestFastCommitSurvivesStoppedVolume(t *testing.T) {
	t.Parallel()
	base := memdev.New(64 << 20)
	require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{FastCommit: true, NoDiscard: true}))
	fail := errordev.NewToggle(errordev.Kinds(errordev.Always(), errordev.Write))
	v, err := ext4io.Open(errordev.New(base, fail), ext4io.Options{Writable: true, CommitInterval: -1})
	require.NoError(t, err)
	other, err := v.Create("other")
	require.NoError(t, err)
	_, err = other.WriteAt(make([]byte, 64<<10), 0)
	require.NoError(t, err)
	require.NoError(t, v.Sync())

	data := bytes.Repeat([]byte("fsynced "), 512)
	f, err := v.Create("a")
	require.NoError(t, err)
	_, err = f.WriteAt(data, 0)
	require.NoError(t, err)
	before := v.Counters().FastCommits
	require.NoError(t, f.Sync())
	require.Equal(t, before+1, v.Counters().FastCommits, "the fsync must be a fast commit")

	// An atomic write whose data write fails stops the volume.
	fail.Enable()
	_, err = other.WriteAtomic(bytes.Repeat([]byte{7}, 16<<10), 16<<10)
	require.ErrorIs(t, err, ext4io.ErrIO)
	fail.Disable()
	_, err = v.Create("b")
	require.Error(t, err, "the volume should have stopped")
	f.Close()
	other.Close()
	require.Error(t, v.Close(), "Close of a stopped volume reports the error")

	for _, writable := range []bool{false, true} {
		rv, err := ext4io.Open(base, ext4io.Options{Writable: writable})
		require.NoError(t, err)
		g, err := rv.Open("a")
		require.NoError(t, err, "writable %v: the fsynced file is gone", writable)
		got, err := io.ReadAll(io.NewSectionReader(g, 0, g.Size()))
		require.NoError(t, err)
		require.Equal(t, data, got)
		require.NoError(t, g.Close())
		require.NoError(t, rv.Close())
	}
	ext4iotest.FsckDev(t, base)
}
