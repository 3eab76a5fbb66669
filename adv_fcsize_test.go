package ext4io_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
)

// TestFastCommitSizeOverInFlightData: an fsync whose fast commit maps no
// new block (a write into the file's mapped tail block that raises
// i_size) must not let its INODE tag, which carries the new i_size, reach
// the device before the data it exposes is durable. Crash images are
// taken before every flush with a random half of the unflushed writes
// kept: in each, the file is either its old 100 bytes or the 4,096 bytes
// written, never 4,096 bytes whose tail the write did not fill (the
// truncated 'A's, or zeroes). One image of each outcome also goes through
// e2fsck's and, as root on Linux, the kernel's replay (fcCrossCheck).
// fcCrossCheck, when set (Linux), checks that e2fsck's replay of a crash
// image, and the kernel's as root, give the files want as ext4io's does.
var fcCrossCheck func(t *testing.T, img *memdev.Device, want map[string][]byte)

func TestFastCommitSizeOverInFlightData(t *testing.T) {
	base := memdev.New(64 << 20)
	crash, dev, v := fcHookVolume(t, base, ext4io.FormatOptions{})
	f, err := v.Create("f")
	require.NoError(t, err)
	_, err = f.WriteAt(bytes.Repeat([]byte{'A'}, 4096), 0)
	require.NoError(t, err)
	require.NoError(t, v.Sync()) // a full commit: 4,096 'A's
	require.NoError(t, f.Truncate(100))
	require.NoError(t, f.Sync()) // a fast commit: the baseline is 100 'A's

	want := append(bytes.Repeat([]byte{'A'}, 100), bytes.Repeat([]byte{'B'}, 4096-100)...)
	images, bad := 0, 0
	crossChecked := map[int]bool{} // outcomes (file sizes) cross-checked
	check := func(seed uint64) {
		img, err := crash.Crash(errordev.CrashOptions{Seed: seed, KeepProb: 0.5})
		require.NoError(t, err)
		rv, err := ext4io.Open(img, ext4io.Options{})
		require.NoError(t, err, "seed %d: open the crash image", seed)
		defer rv.Close()
		rf, err := rv.Open("f")
		require.NoError(t, err, "seed %d", seed)
		defer rf.Close()
		got := make([]byte, rf.Size())
		_, err = rf.ReadAt(got, 0)
		require.NoError(t, err)
		images++
		if fcCrossCheck != nil && !crossChecked[len(got)] {
			crossChecked[len(got)] = true
			fcCrossCheck(t, img, map[string][]byte{"f": got})
		}
		if len(got) == 100 {
			assert.Equal(t, want[:100], got, "seed %d", seed)
			return
		}
		if !bytes.Equal(want, got) {
			bad++
			t.Errorf("seed %d: the file has %d bytes, %d of them 'B' (want 100 bytes, or %d bytes ending in 3,996 'B's)",
				seed, len(got), bytes.Count(got, []byte{'B'}), len(want))
		}
	}
	hook := func() {
		for seed := range uint64(16) {
			check(seed)
		}
	}
	dev.beforeFlush.Store(&hook)
	_, err = f.WriteAt(want[100:], 100)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	dev.beforeFlush.Store(nil)
	c := v.Counters()
	t.Logf("%d crash images, %d bad; fast commits %d, fallbacks %d; outcomes cross-checked %v",
		images, bad, c.FastCommits, c.FastCommitFallbacks, crossChecked)
	require.NotZero(t, c.FastCommits, "the fsync wrote a fast commit")
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, base)
}

// TestFastCommitTruncateZeroesTail: an fsync after a truncate inside a
// block writes a fast commit with the smaller i_size; the truncate zeroed
// the block's bytes past it on the device, and a later extension reads
// them. Crash images are taken before every flush with a random half of
// the unflushed writes kept: in each whose file has the new size, the
// file extended again (a writable replay, Truncate back to 4,096) reads
// zeroes past 100 bytes, never the truncated 'A's.
func TestFastCommitTruncateZeroesTail(t *testing.T) {
	base := memdev.New(64 << 20)
	crash, dev, v := fcHookVolume(t, base, ext4io.FormatOptions{})
	f, err := v.Create("f")
	require.NoError(t, err)
	_, err = f.WriteAt(bytes.Repeat([]byte{'A'}, 4096), 0)
	require.NoError(t, err)
	g, err := v.Create("g")
	require.NoError(t, err)
	require.NoError(t, v.Sync()) // a full commit: f holds 4,096 'A's
	_, err = g.WriteAt([]byte("g"), 0)
	require.NoError(t, err)
	require.NoError(t, g.Sync()) // a fast commit starts the area

	images, shrunk, bad := 0, 0, 0
	check := func(seed uint64) {
		img, err := crash.Crash(errordev.CrashOptions{Seed: seed, KeepProb: 0.5})
		require.NoError(t, err)
		rv, err := ext4io.Open(img, ext4io.Options{Writable: true})
		require.NoError(t, err, "seed %d: open the crash image", seed)
		defer rv.Close()
		rf, err := rv.OpenFile("f", os.O_RDWR, 0)
		require.NoError(t, err, "seed %d", seed)
		defer rf.Close()
		images++
		if rf.Size() == 4096 {
			return // the truncate is not in the image
		}
		require.EqualValues(t, 100, rf.Size(), "seed %d", seed)
		shrunk++
		require.NoError(t, rf.Truncate(4096))
		got := make([]byte, 4096)
		_, err = rf.ReadAt(got, 0)
		require.NoError(t, err)
		want := append(bytes.Repeat([]byte{'A'}, 100), make([]byte, 4096-100)...)
		if !bytes.Equal(want, got) {
			bad++
			t.Errorf("seed %d: extended to 4,096 bytes after the crash, the file reads %d 'A's past byte 100 (want zeroes)",
				seed, bytes.Count(got[100:], []byte{'A'}))
		}
	}
	hook := func() {
		for seed := range uint64(16) {
			check(seed)
		}
	}
	dev.beforeFlush.Store(&hook)
	require.NoError(t, f.Truncate(100))
	require.NoError(t, f.Sync())
	dev.beforeFlush.Store(nil)
	c := v.Counters()
	t.Logf("%d crash images, %d with the truncate, %d bad; fast commits %d, fallbacks %d",
		images, shrunk, bad, c.FastCommits, c.FastCommitFallbacks)
	require.Equal(t, uint64(2), c.FastCommits, "both fsyncs wrote fast commits")
	require.NotZero(t, shrunk, "some images hold the truncate")
	require.NoError(t, f.Close())
	require.NoError(t, g.Close())
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, base)
}

// TestFastCommitPunchZeroesEdges: a hole punched from inside one block to
// inside another unmaps the blocks between (DEL_RANGE) and zeroes the
// edges in place. Crash images are taken before every flush of the fsync
// after it, with a random half of the unflushed writes kept: in none is
// the middle block unmapped (the DEL_RANGE replayed) while an edge still
// holds 'A's (its zeroing lost), as Linux, which flushes the zeroing
// before the tags, never shows. Edges zeroed around a middle still
// mapped are a punch not yet committed, possible in Linux too.
func TestFastCommitPunchZeroesEdges(t *testing.T) {
	base := memdev.New(64 << 20)
	crash, dev, v := fcHookVolume(t, base, ext4io.FormatOptions{})
	const size, lo, hi = 3 * 4096, 100, 3*4096 - 100
	old := bytes.Repeat([]byte{'A'}, size)
	f, err := v.Create("f")
	require.NoError(t, err)
	_, err = f.WriteAt(old, 0)
	require.NoError(t, err)
	g, err := v.Create("g")
	require.NoError(t, err)
	require.NoError(t, v.Sync()) // a full commit: f holds 3 blocks of 'A's
	_, err = g.WriteAt([]byte("g"), 0)
	require.NoError(t, err)
	require.NoError(t, g.Sync()) // a fast commit starts the area

	punched := bytes.Clone(old) // the file after the punch
	clear(punched[lo:hi])
	images, torn := 0, 0
	check := func(seed uint64) {
		img, err := crash.Crash(errordev.CrashOptions{Seed: seed, KeepProb: 0.5})
		require.NoError(t, err)
		rv, err := ext4io.Open(img, ext4io.Options{})
		require.NoError(t, err, "seed %d: open the crash image", seed)
		defer rv.Close()
		rf, err := rv.Open("f")
		require.NoError(t, err, "seed %d", seed)
		defer rf.Close()
		got := make([]byte, rf.Size())
		_, err = rf.ReadAt(got, 0)
		require.NoError(t, err)
		images++
		require.Len(t, got, size)
		if bytes.Count(got[4096:8192], []byte{0}) == 4096 && !bytes.Equal(got, punched) {
			torn++
			t.Errorf("seed %d: the middle block is unmapped but %d 'A's remain in the hole's edges", seed, bytes.Count(got[lo:hi], []byte{'A'}))
		}
	}
	hook := func() {
		for seed := range uint64(16) {
			check(seed)
		}
	}
	dev.beforeFlush.Store(&hook)
	require.NoError(t, f.Fallocate(ext4io.FallocPunchHole, lo, hi-lo))
	require.NoError(t, f.Sync())
	dev.beforeFlush.Store(nil)
	c := v.Counters()
	t.Logf("%d crash images, %d torn; fast commits %d, fallbacks %d", images, torn, c.FastCommits, c.FastCommitFallbacks)
	require.Equal(t, uint64(2), c.FastCommits, "both fsyncs wrote fast commits")
	require.NoError(t, f.Close())
	require.NoError(t, g.Close())
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, base)
}
