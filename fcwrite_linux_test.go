package ext4io_test

// Fast commits written by ext4io: a volume formatted with FastCommit
// fsyncs files (creates, writes, truncates, links, unlinks in two
// directories), then crashes with the fast commits pending (the durable
// state of an errordev.Crashable: only what the flushes covered). e2fsck
// replays the crash image clean, ext4io's own replay (read-only and
// writable) gives the same tree, debugfs dumps every fsynced file as
// written, and Linux (root, mount -o loop) replays it to the same tree.

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// fcWorkload runs the fsync workload on v and returns what every fsynced
// file must hold after a crash (unlinked names absent).
func fcWorkload(t *testing.T, v *ext4io.Volume, rng *rand.Rand) map[string][]byte {
	t.Helper()
	want := map[string][]byte{}
	require.NoError(t, v.Mkdir("a", 0o755))
	require.NoError(t, v.Mkdir("b", 0o755))
	require.NoError(t, v.Sync()) // mkdir is not fast-commit eligible: commit it in full
	put := func(name string, data []byte, sync bool) {
		f, err := v.Create(name)
		require.NoError(t, err)
		_, err = f.WriteAt(data, 0)
		require.NoError(t, err)
		if sync {
			require.NoError(t, f.Sync())
			want[name] = data
		}
		require.NoError(t, f.Close())
	}
	rnd := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return b
	}
	for i := range 12 {
		put(fmt.Sprintf("a/f%d", i), rnd(1+rng.IntN(20000)), true)
		put(fmt.Sprintf("b/g%d", i), rnd(1+rng.IntN(3000)), true)
	}
	// Truncate down and up, append, overwrite.
	f, err := v.OpenFile("a/f1", os.O_RDWR, 0)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(100))
	require.NoError(t, f.Sync())
	want["a/f1"] = want["a/f1"][:min(100, len(want["a/f1"]))]
	require.NoError(t, f.Close())
	f, err = v.OpenFile("a/f2", os.O_RDWR, 0)
	require.NoError(t, err)
	extra := rnd(9000)
	_, err = f.WriteAt(extra, int64(len(want["a/f2"])))
	require.NoError(t, err)
	require.NoError(t, f.Datasync())
	want["a/f2"] = append(append([]byte(nil), want["a/f2"]...), extra...)
	require.NoError(t, f.Close())
	// Links and unlinks, made durable by a later fsync.
	require.NoError(t, v.Link("a/f3", "b/f3link"))
	require.NoError(t, v.Unlink("a/f4"))
	require.NoError(t, v.Unlink("b/g5"))
	delete(want, "a/f4")
	delete(want, "b/g5")
	want["b/f3link"] = want["a/f3"]
	put("b/late", rnd(5000), true)
	// Created and unlinked between two fast commits: leaves no trace.
	put("a/tmp", rnd(100), false)
	require.NoError(t, v.Unlink("a/tmp"))
	put("a/last", rnd(4096), true)
	return want
}

func TestFastCommitWriteCrash(t *testing.T) {
	crashImg, want := fcWorkloadCrash(t, memdev.New(64<<20), nil, 2, "most fsyncs fast-commit")
	fcCheckCrashImage(t, t.TempDir(), crashImg, want)
}

// fcWorkloadCrash formats base with fast commits, calls prep (if not
// nil) on it, runs fcCrashWorkload (seed seq) and requires at least 25
// fast commits (msg says why).
func fcWorkloadCrash(t *testing.T, base *memdev.Device, prep func(*testing.T, *memdev.Device), seq uint64, msg string) (string, map[string][]byte) {
	t.Helper()
	require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{FastCommit: true, NoDiscard: true}))
	if prep != nil {
		prep(t, base)
	}
	crashImg, want, c := fcCrashWorkload(t, base, seq)
	assert.GreaterOrEqual(t, c.FastCommits, uint64(25), msg)
	return crashImg, want
}

// fcCrashWorkload runs fcWorkload (seed seq) on base, formatted with
// fast commits, and returns the crash image of what the flushes covered,
// the files' expected contents and the volume's counters.
// EXT4IO_FC_KEEP names a directory to keep the image in.
func fcCrashWorkload(t *testing.T, base *memdev.Device, seq uint64) (string, map[string][]byte, ext4io.Counters) {
	t.Helper()
	crash, err := errordev.NewCrashable(base)
	require.NoError(t, err)
	v, err := ext4io.Open(crash, ext4io.Options{Writable: true})
	require.NoError(t, err)
	want := fcWorkload(t, v, rand.New(rand.NewPCG(33, seq)))
	c := v.Counters()
	t.Logf("fast commits %d, fallbacks %d, journal commits %d", c.FastCommits, c.FastCommitFallbacks, c.JournalCommits)
	img, err := crash.Crash(errordev.CrashOptions{}) // only what the flushes covered
	require.NoError(t, err)
	require.NoError(t, v.Close())
	crashImg := ext4iotest.ImageOf(t, img)
	if keep := os.Getenv("EXT4IO_FC_KEEP"); keep != "" {
		fcCopyFile(t, crashImg, filepath.Join(keep, t.Name()+".img"))
	}
	return crashImg, want, c
}

// fcNoXattrsAfterReplay replays copies of crashImg read-only and writable
// and requires that none of the files in want has an xattr.
func fcNoXattrsAfterReplay(t *testing.T, crashImg string, want map[string][]byte) {
	t.Helper()
	for _, writable := range []bool{false, true} {
		w := filepath.Join(t.TempDir(), "x.img")
		fcCopyFile(t, crashImg, w)
		rv, err := ext4io.OpenImage(w, ext4io.Options{Writable: writable})
		require.NoError(t, err)
		for name := range want {
			names, err := rv.Listxattr(name)
			assert.NoError(t, err, name)
			assert.Empty(t, names, "%s: replay (writable %v) gave the file xattrs", name, writable)
		}
		require.NoError(t, rv.Close())
	}
}

// TestFastCommitOverStaleInodeSlots: on a device that held other bytes
// before Format, with the inode tables marked zeroed but not zeroed (as
// mkfs.ext4 leaves them on a device whose discard claims to zero), new
// files take inode slots of stale bytes.
// Those carry no in-inode xattr header, so the creates stay fast commits,
// and every replay (e2fsck's, ext4io's, Linux's) of the crash image,
// which keeps the stale bytes past each INODE tag, gives the fsynced
// files without xattrs.
func TestFastCommitOverStaleInodeSlots(t *testing.T) {
	t.Parallel()
	const size = 64 << 20
	base := memdev.New(size)
	fill := make([]byte, 1<<20)
	for i := range fill {
		fill[i] = 0x5a + byte(i*7) // never the xattr magic's 00 00 02 ea
	}
	for off := int64(0); off < size; off += int64(len(fill)) {
		_, err := base.WriteAt(fill, off)
		require.NoError(t, err)
	}
	// ITABLE_ZEROED set, or ext4io zeroes the tables past the used
	// inodes at the first create in each group.
	crashImg, want := fcWorkloadCrash(t, base, fcMarkItableZeroed, 3, "creates over stale inode slots fast-commit")
	fcCheckCrashImage(t, t.TempDir(), crashImg, want)
	fcNoXattrsAfterReplay(t, crashImg, want)
}

// TestFastCommitGroupCrash: four writers fsync files concurrently, so
// that fast commits are shared and built while other operations run; the
// crash image taken right after the last fsync returns holds every file
// after e2fsck's, ext4io's and Linux's replays.
func TestFastCommitGroupCrash(t *testing.T) {
	// A 16384-block log: its 256-block fast-commit area holds every fast
	// commit, so none falls back for a full area.
	base := memdev.New(256 << 20)
	require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{FastCommit: true, NoDiscard: true, JournalBlocks: 16384}))
	crash, err := errordev.NewCrashable(base)
	require.NoError(t, err)
	dev := &countDev{Device: crash, flushDelay: 200 * time.Microsecond}
	// No background write-back or committer: their commits would make
	// fsyncs fall back, and the crash image could hold only the log, not
	// fast commits.
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
	require.NoError(t, err)
	for job := range 4 {
		require.NoError(t, v.Mkdir(fmt.Sprintf("d%d", job), 0o755))
	}
	require.NoError(t, v.Sync())
	// The durable state right after an fsync returns holds its file
	// (ext4io's in-memory replay), whatever the other jobs are doing.
	check := func(name string, data []byte) {
		img, err := crash.Crash(errordev.CrashOptions{})
		if !assert.NoError(t, err) {
			return
		}
		rv, err := ext4io.Open(img, ext4io.Options{})
		if !assert.NoError(t, err, "%s: open the crash image", name) {
			return
		}
		defer rv.Close()
		f, err := rv.Open(name)
		if !assert.NoError(t, err, "%s: fsynced, then missing from the crash image", name) {
			return
		}
		defer f.Close()
		got := make([]byte, f.Size())
		_, err = f.ReadAt(got, 0)
		assert.NoError(t, err)
		assert.True(t, bytes.Equal(data, got), "%s: fsynced, then %d bytes in the crash image, want %d", name, len(got), len(data))
	}
	_, flushes, want := fsyncConcurrently(t, v, dev, 4, 25, 3000, check)
	c := v.Counters()
	t.Logf("fast commits %d, shared %d, fallbacks %d, journal commits %d, %.2f flushes per fsync",
		c.FastCommits, c.FastCommitShared, c.FastCommitFallbacks, c.JournalCommits, flushes)
	assert.NotZero(t, c.FastCommitShared, "concurrent fsyncs share fast commits")
	assert.Zero(t, c.FastCommitFallbacks)
	img, err := crash.Crash(errordev.CrashOptions{}) // only what the flushes covered
	require.NoError(t, err)
	require.NoError(t, v.Close())
	crashImg := ext4iotest.ImageOf(t, img)
	if keep := os.Getenv("EXT4IO_FC_KEEP"); keep != "" {
		fcCopyFile(t, crashImg, filepath.Join(keep, t.Name()+".img"))
	}
	fcCheckCrashImage(t, t.TempDir(), crashImg, want)
}

// fcCheckCrashImage checks a crash image with fast commits pending
// against want, the fsynced files: e2fsck's replay, ext4io's read-only
// and writable replays, debugfs, and Linux's replay when root.
func fcCheckCrashImage(t *testing.T, dir, crashImg string, want map[string][]byte) {
	t.Helper()
	keepOnFailure(t, "fcwrite-"+t.Name(), map[string]string{"crash.img": crashImg})
	// e2fsck replays the journal and the fast commits, then must find
	// nothing to fix.
	oracle := filepath.Join(dir, "oracle.img")
	fcCopyFile(t, crashImg, oracle)
	out, err := exec.Command(e2fs.Tool(t, "e2fsck"), "-fy", oracle).CombinedOutput()
	if bytes.Contains(out, []byte("Superblock checksum does not match")) {
		fcFixSuperCsum(t, oracle) // e2fsck 1.47.0's own slip (see TestFastCommitReplayLinux)
		out, err = exec.Command(e2fs.Tool(t, "e2fsck"), "-fy", oracle).CombinedOutput()
	}
	t.Logf("e2fsck -fy on the crash image:\n%s", out)
	if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() > 1) {
		t.Fatalf("e2fsck -fy: %v", err)
	}
	assert.NotContains(t, string(out), "Fix?", "e2fsck's replay leaves nothing to fix")
	e2fs.Fsck(t, oracle)
	for name, data := range want {
		got := ext4iotest.Dump(t, oracle, name)
		assert.True(t, bytes.Equal(data, got), "debugfs dump %s after e2fsck's replay: %d bytes, want %d", name, len(got), len(data))
	}
	ov, err := ext4io.OpenImage(oracle, ext4io.Options{})
	require.NoError(t, err)
	wantTree := fcWalk(t, ov)
	fcCheckContents(t, "e2fsck replay", ov, want)
	ov.Close()

	rv, err := ext4io.OpenImage(crashImg, ext4io.Options{})
	require.NoError(t, err)
	info := rv.Recovery()
	require.NotNil(t, info)
	assert.NotZero(t, info.FastCommitTags, "the crash image has fast commits to replay")
	t.Logf("recovery: %d transactions, %d fast-commit tags", info.Transactions, info.FastCommitTags)
	fcCompareTrees(t, "ext4io read-only replay vs e2fsck", fcWalk(t, rv), wantTree)
	fcCheckContents(t, "ext4io read-only replay", rv, want)
	rv.Close()

	w := filepath.Join(dir, "w.img")
	fcCopyFile(t, crashImg, w)
	wv, err := ext4io.OpenImage(w, ext4io.Options{Writable: true})
	require.NoError(t, err)
	require.NoError(t, wv.Close())
	e2fs.Fsck(t, w)
	wv, err = ext4io.OpenImage(w, ext4io.Options{})
	require.NoError(t, err)
	fcCompareTrees(t, "ext4io writable replay vs e2fsck", fcWalk(t, wv), wantTree)
	wv.Close()

	if os.Geteuid() != 0 || testing.Short() {
		t.Log("Linux's replay not checked: mounting needs root (and no -short)")
		return
	}
	kimg := filepath.Join(dir, "kernel.img")
	fcCopyFile(t, crashImg, kimg)
	fcCompareTrees(t, "Linux's replay vs e2fsck", fcKernelWalk(t, kimg), wantTree)
	if out, err := exec.Command(e2fs.Tool(t, "e2fsck"), "-fn", kimg).CombinedOutput(); err != nil {
		t.Errorf("e2fsck -fn after Linux's replay: %v\n%s", err, out)
	}
}

// TestFastCommitMultiBlock: one fsync after many creates writes a fast
// commit of several blocks (a CREAT, an INODE and range tags per file, PAD
// where a tag does not fit a block's end); the crash image replays the
// same in e2fsck, ext4io and Linux, and holds every created file. In the
// root directory it fails when the directory's own INODE tag is logged
// (Linux's recovery then fails).
func TestFastCommitMultiBlock(t *testing.T) {
	for _, dir := range []string{"", "d/"} {
		t.Run("dir="+dir, func(t *testing.T) {
			base := memdev.New(64 << 20)
			require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{FastCommit: true, NoDiscard: true}))
			crash, err := errordev.NewCrashable(base)
			require.NoError(t, err)
			// No background committer: a commit among the creates would
			// leave the fast commit fewer of them.
			v, err := ext4io.Open(crash, ext4io.Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
			require.NoError(t, err)
			if dir != "" {
				require.NoError(t, v.Mkdir(dir, 0o755))
				require.NoError(t, v.Sync()) // mkdir is not eligible
			}
			const files = 60
			name := func(i int) string { return fmt.Sprintf("%sfile-with-a-long-name-%03d", dir, i) }
			want := map[string][]byte{}
			for i := range files {
				f, err := v.Create(name(i))
				require.NoError(t, err)
				data := bytes.Repeat([]byte{byte(i)}, 3000)
				_, err = f.WriteAt(data, 0)
				require.NoError(t, err)
				if i == files-1 {
					require.NoError(t, f.Sync()) // the fast commit holds every create
					want[name(i)] = data
				}
				require.NoError(t, f.Close())
			}
			require.Equal(t, uint64(1), v.Counters().FastCommits)
			img, err := crash.Crash(errordev.CrashOptions{})
			require.NoError(t, err)
			require.NoError(t, v.Close())
			rv, err := ext4io.Open(img, ext4io.Options{})
			require.NoError(t, err)
			assert.Greater(t, rv.Recovery().FastCommitTags, 3*files, "CREAT, INODE and a range per file, PADs")
			for i := range files {
				_, err := rv.Stat(name(i))
				assert.NoError(t, err)
			}
			require.NoError(t, rv.Close())
			fcCheckCrashImage(t, t.TempDir(), ext4iotest.ImageOf(t, img), want)
		})
	}
}
