package ext4io_test

import (
	"errors"
	"fmt"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
)

// TestFastCommitFirstBlockLast: the first fast commit after a full commit
// starts the area, and its first block holds the HEAD. A crash that keeps
// that block without a later block of the same fast commit (before its
// first TAIL) makes the kernel's and e2fsck 1.47.0's scans fail the whole
// recovery (-ECANCELED at a zero tag, -EFSBADCRC at a bad TAIL: "Operation
// canceled while recovering journal"), and e2fsck then drops the log:
// torture seed 61 (1 KiB blocks), round 264. So the other blocks of such a
// fast commit are written and flushed before its first block. Every crash
// image of a multi-block first fast commit, torn anywhere, must recover
// under e2fsck without a journal error, and under ext4io.
func TestFastCommitFirstBlockLast(t *testing.T) {
	t.Parallel()
	dev := memdev.NewBlockSize(64<<20, 4096)
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{FastCommit: true, NoDiscard: true}))
	rec, err := errordev.NewRecorder(dev)
	require.NoError(t, err)
	// No background committer: a commit of the creates before the Sync
	// would leave it no fast commit to make.
	v, err := ext4io.Open(rec, ext4io.Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
	require.NoError(t, err)
	require.NoError(t, v.Mkdir("/d", 0o755))
	require.NoError(t, v.Sync())
	from := rec.Len()
	var last *ext4io.File
	for i := 0; i < 60; i++ { // about 2 blocks of tags
		f, err := v.Create(fmt.Sprintf("/d/file-with-a-long-name-%03d", i))
		require.NoError(t, err)
		if last != nil {
			require.NoError(t, last.Close())
		}
		last = f
	}
	before := v.Counters()
	require.NoError(t, last.Sync())
	require.Equal(t, before.FastCommits+1, v.Counters().FastCommits)
	require.NoError(t, last.Close())
	to := rec.Len()
	images := 0
	for p := from; p < to; p++ {
		if kind, _, _ := rec.Entry(p); kind != errordev.Write {
			continue
		}
		for seed := uint64(0); seed < 6; seed++ {
			img, _, err := rec.CrashAt(p, errordev.CrashAtOptions{Seed: seed, KeepProb: 1, Tear: true, TearUnit: 4096})
			require.NoError(t, err)
			images++
			name := ext4iotest.ImageOf(t, img)
			out, err := exec.Command(ext4iotest.Tool(t, "e2fsck"), "-fy", name).CombinedOutput()
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) && ee.ExitCode() <= 1 {
				err = nil
			}
			require.NoError(t, err, "%s", out)
			assert.NotContains(t, string(out), "while recovering journal", "crash at %d (seed %d)", p, seed)
			rv, err := ext4io.Open(img, ext4io.Options{})
			if assert.NoError(t, err, "ext4io's replay, crash at %d (seed %d)", p, seed) {
				rv.Close()
			}
		}
	}
	t.Logf("%d crash images of log entries %d..%d", images, from, to)
	require.NoError(t, v.Close())
}
