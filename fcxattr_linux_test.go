package ext4io_test

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestFastCommitAfterXattrBlockFreed: a file whose xattrs fill a block,
// committed, is removed (its inode and xattr block freed) and a new file
// is written and fast-committed; the crash image right after the fsync
// must replay clean. The free of the xattr block is in no fast-commit
// tag, so the fsync must fall back to a full commit.
func TestFastCommitAfterXattrBlockFreed(t *testing.T) {
	base := memdev.New(64 << 20)
	require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{FastCommit: true, NoDiscard: true}))
	crash, err := errordev.NewCrashable(base)
	require.NoError(t, err)
	v, err := ext4io.Open(crash, ext4io.Options{Writable: true, CommitInterval: -1})
	require.NoError(t, err)
	require.NoError(t, v.WriteFile("/a", bytes.Repeat([]byte{1}, 8192), 0o644))
	require.NoError(t, v.Setxattr("/a", "user.big", bytes.Repeat([]byte{2}, 3000), 0))
	require.NoError(t, v.Sync())

	require.NoError(t, v.Remove("/a"))
	data := bytes.Repeat([]byte{3}, 8192)
	f, err := v.Create("/b")
	require.NoError(t, err)
	_, err = f.Write(data)
	require.NoError(t, err)
	c0 := v.Counters()
	require.NoError(t, f.Sync())
	c1 := v.Counters()
	t.Logf("fast commits %d -> %d, fallbacks %d -> %d, journal commits %d -> %d", c0.FastCommits, c1.FastCommits, c0.FastCommitFallbacks, c1.FastCommitFallbacks, c0.JournalCommits, c1.JournalCommits)
	img, err := crash.Crash(errordev.CrashOptions{})
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())

	// e2fsck's replay (journal and fast commits) leaves no block or inode
	// allocated that nothing uses (the superblock's free counts, which
	// commits do not keep exact, it recomputes).
	dir := t.TempDir()
	crashImg := ext4iotest.ImageOf(t, img)
	oracle := filepath.Join(dir, "oracle.img")
	fcCopyFile(t, crashImg, oracle)
	out, err := exec.Command(e2fs.Tool(t, "e2fsck"), "-fy", oracle).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() > 1) {
		t.Fatalf("e2fsck -fy: %v\n%s", err, out)
	}
	assert.NotContains(t, string(out), "differences", "e2fsck's replay of the crash image:\n%s", out)
	assert.Equal(t, data, ext4iotest.Dump(t, oracle, "/b"))
	// So does ext4io's.
	w := filepath.Join(dir, "w.img")
	fcCopyFile(t, crashImg, w)
	wv, err := ext4io.OpenImage(w, ext4io.Options{Writable: true})
	require.NoError(t, err)
	require.NoError(t, wv.Close())
	e2fs.Fsck(t, w)
}
