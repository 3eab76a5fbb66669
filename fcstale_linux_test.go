package ext4io_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
)

// TestFastCommitOverOldFilesystem: the device held an ext4 filesystem of
// the same geometry before Format (a reused disk), so the new files take
// inode slots that hold the old files' inodes: their i_block has the
// extent magic and extents to blocks the new files now use.
func TestFastCommitOverOldFilesystem(t *testing.T) {
	for _, fo := range []ext4io.FormatOptions{
		{},
		{InodeSize: 128},
		{InodeSize: 512},
		{BlockSize: 1024},
	} {
		t.Run(fmt.Sprintf("bs=%d,is=%d", fo.BlockSize, fo.InodeSize), func(t *testing.T) {
			base := fcReusedDisk(t, fo)
			crash, err := errordev.NewCrashable(base)
			require.NoError(t, err)
			v, err := ext4io.Open(crash, ext4io.Options{Writable: true})
			require.NoError(t, err)
			want := fcWorkload(t, v, rand.New(rand.NewPCG(33, 3)))
			c := v.Counters()
			t.Logf("fast commits %d, fallbacks %d, journal commits %d", c.FastCommits, c.FastCommitFallbacks, c.JournalCommits)
			img, err := crash.Crash(errordev.CrashOptions{})
			require.NoError(t, err)
			require.NoError(t, v.Close())
			crashImg := ext4iotest.ImageOf(t, img)
			fcCheckCrashImage(t, t.TempDir(), crashImg, want)
		})
	}
}

// TestFastCommitOverOldFilesystemReusedNumber: on a reused disk, a file
// created over an old inode and unlinked before any commit frees its
// number, which the next create takes; the fast commit holds CREAT,
// UNLINK, CREAT of that number. The on-disk i_block is still the old
// filesystem's tree (not the unlinked file's own, whose blocks no other
// file could have taken), so the create must not be a fast commit.
func TestFastCommitOverOldFilesystemReusedNumber(t *testing.T) {
	base := fcReusedDisk(t, ext4io.FormatOptions{})
	crash, err := errordev.NewCrashable(base)
	require.NoError(t, err)
	v, err := ext4io.Open(crash, ext4io.Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
	require.NoError(t, err)
	ino := func(name string) uint32 {
		fi, err := v.Stat(name)
		require.NoError(t, err)
		return fi.Sys().(*ext4io.FileInfo).Ino
	}
	require.NoError(t, v.Mkdir("a", 0o755))
	// A file over the old files' data: the old trees map its blocks.
	big := bytes.Repeat([]byte{0xb1}, 12<<20)
	f, err := v.Create("big")
	require.NoError(t, err)
	_, err = f.WriteAt(big, 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, v.Sync())
	want := map[string][]byte{"big": big}
	for i := range 8 {
		f, err := v.Create(fmt.Sprintf("a/tmp%d", i))
		require.NoError(t, err)
		_, err = f.WriteAt(bytes.Repeat([]byte{byte(i)}, 5000), 0)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		old := ino(fmt.Sprintf("a/tmp%d", i))
		require.NoError(t, v.Unlink(fmt.Sprintf("a/tmp%d", i)))
		name := fmt.Sprintf("a/f%d", i)
		f, err = v.Create(name)
		require.NoError(t, err)
		require.Equal(t, old, ino(name), "the create takes the unlinked file's number")
		data := bytes.Repeat([]byte{0x40 + byte(i)}, 3000+i*1000)
		_, err = f.WriteAt(data, 0)
		require.NoError(t, err)
		require.NoError(t, f.Sync())
		require.NoError(t, f.Close())
		want[name] = data
	}
	// An append is a fast commit whatever the creates were: the crash
	// image has one pending.
	f, err = v.OpenFile("a/f0", os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("tail"), int64(len(want["a/f0"])))
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	want["a/f0"] = append(want["a/f0"], "tail"...)
	c := v.Counters()
	t.Logf("fast commits %d, fallbacks %d, journal commits %d", c.FastCommits, c.FastCommitFallbacks, c.JournalCommits)
	img, err := crash.Crash(errordev.CrashOptions{})
	require.NoError(t, err)
	require.NoError(t, v.Close())
	fcCheckCrashImage(t, t.TempDir(), ext4iotest.ImageOf(t, img), want)
}

// fcReusedDisk returns a device formatted with fo and FastCommit over an
// ext4 filesystem of the same geometry that holds 64 files in 16
// directories (the inode tables are left for lazy init, so the old
// inodes stay in the new volume's free slots).
func fcReusedDisk(t *testing.T, fo ext4io.FormatOptions) *memdev.Device {
	t.Helper()
	const size = 64 << 20
	base := memdev.New(size)
	old := fo
	old.NoDiscard = true
	require.NoError(t, ext4io.Format(base, old))
	ov, err := ext4io.Open(base, ext4io.Options{Writable: true})
	require.NoError(t, err)
	// Directories in most groups (the new volume's a and b may
	// land in any of them), their files' inodes next to them.
	rng := rand.New(rand.NewPCG(7, 7))
	for d := range 16 {
		require.NoError(t, ov.Mkdir(fmt.Sprintf("d%d", d), 0o755))
	}
	for i := range 64 {
		f, err := ov.Create(fmt.Sprintf("d%d/old%d", i%16, i))
		require.NoError(t, err)
		b := make([]byte, 1+rng.IntN(200000))
		for j := range b {
			b[j] = byte(rng.UintN(256))
		}
		_, err = f.WriteAt(b, 0)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	require.NoError(t, ov.Close())

	nf := fo
	nf.FastCommit, nf.NoDiscard = true, true
	require.NoError(t, ext4io.Format(base, nf))
	return base
}
