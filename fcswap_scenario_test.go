//go:build linux

package ext4io_test

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
)

// fcSwapVolume formats a 64 MiB volume with fast commits and a 4096-block
// log, creates files names of 4 blocks (blocks 0-1 written with write id
// 0, block 2 unwritten, block 3 a hole), commits them in full, and opens
// it writable on a recorder, without the background committer: what the
// test fsyncs stays in fast commits until it syncs the volume.
func fcSwapVolume(t *testing.T, names []string) (*errordev.Recorder, *ext4io.Volume, map[string][]byte) {
	t.Helper()
	const bs = 4096
	start := memdev.NewBlockSize(64<<20, bs)
	require.NoError(t, ext4io.Format(start, ext4io.FormatOptions{NoDiscard: true, FastCommit: true, JournalBlocks: 4096}))
	v, err := ext4io.Open(start, ext4io.Options{Writable: true})
	require.NoError(t, err)
	want := map[string][]byte{}
	for _, name := range names {
		f, err := v.Create(name)
		require.NoError(t, err)
		buf := make([]byte, 4*bs)
		for b := range uint64(2) {
			atomicBlock(buf[b*bs:(b+1)*bs], 0, b)
		}
		_, err = f.WriteAt(buf[:2*bs], 0)
		require.NoError(t, err)
		require.NoError(t, f.Fallocate(ext4io.FallocKeepSize, 2*bs, bs))
		require.NoError(t, f.Truncate(4*bs))
		require.NoError(t, f.Close())
		want[name] = buf
	}
	require.NoError(t, v.Close())
	rec, err := errordev.NewRecorder(start)
	require.NoError(t, err)
	v, err = ext4io.Open(rec, ext4io.Options{Writable: true, CommitInterval: -1})
	require.NoError(t, err)
	return rec, v, want
}

// fcSwapWrite writes blocks [lblk, lblk+n) of f atomically as write id
// and records them in want.
func fcSwapWrite(t *testing.T, f *ext4io.File, want []byte, id, lblk, n uint64) {
	t.Helper()
	const bs = 4096
	p := want[lblk*bs : (lblk+n)*bs]
	for b := range n {
		atomicBlock(p[b*bs:(b+1)*bs], id, lblk+b)
	}
	_, err := f.WriteAtomic(bytes.Clone(p), int64(lblk*bs))
	require.NoError(t, err)
}

// fcSwapCheckImage replays img's durable state at log entry point of rec
// (what a crash right after it leaves, nothing unflushed kept): its
// journal must hold fast commits; ext4io's writable replay must read every
// file as want and pass e2fsck -fn, and e2fsck's and Linux's replays
// must agree with it (fcSwapOracles).
func fcSwapCheckImage(t *testing.T, rec *errordev.Recorder, point int, want map[string][]byte) {
	t.Helper()
	dev, _, err := rec.CrashAt(point, errordev.CrashAtOptions{})
	require.NoError(t, err)
	img := filepath.Join(t.TempDir(), "crash.img")
	saveDev(t, dev, img)
	rv, err := ext4io.Open(dev, ext4io.Options{})
	require.NoError(t, err)
	require.NotNil(t, rv.Recovery())
	require.NotZero(t, rv.Recovery().FastCommitTags, "the crash image has fast commits to replay")
	require.NoError(t, rv.Close())
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	require.NoError(t, err)
	names := make([]string, 0, len(want))
	contents := make([][]byte, 0, len(want))
	for name, data := range want {
		got, err := readAll(v, name)
		require.NoError(t, err)
		require.True(t, bytes.Equal(data, got), "%s after ext4io's replay: %d bytes, first difference at %d", name, len(got), firstDiff(data, got))
		names = append(names, name)
		contents = append(contents, got)
	}
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, dev)
	fcSwapOracles(t, img, names, contents, freeBlocks(t, ext4iotest.ImageOf(t, dev)))
}

// readAll reads the whole file name of v.
func readAll(v *ext4io.Volume, name string) ([]byte, error) {
	return fs.ReadFile(v.FS(), name)
}

// TestFastCommitAtomicScenarios: atomic swaps fast-committed in the cases
// issue 36 names, each crash image (the durable state right after the
// last fsync) replayed by ext4io, e2fsck and Linux (root) to the same
// bytes and free blocks, the swap's old blocks free again:
//   - a swap over written, unwritten and hole blocks;
//   - a swap, then a punch of part of the range, then Datasync (the run
//     carries DEL_RANGE for the punched blocks, ADD_RANGE for the rest);
//   - a swap, then a truncate into the range;
//   - a swap never fsynced itself, carried by another file's fsync (the
//     run holds every inode tracked);
//   - a batch of two ranges, then a second swap of the same blocks before
//     the fsync (the run holds the newest mapping only).
func TestFastCommitAtomicScenarios(t *testing.T) {
	const bs = 4096
	for _, tc := range []struct {
		name  string
		files []string
		run   func(t *testing.T, v *ext4io.Volume, want map[string][]byte)
	}{
		{"hole-and-unwritten", []string{"a"}, func(t *testing.T, v *ext4io.Volume, want map[string][]byte) {
			f, err := v.OpenFile("a", os.O_RDWR, 0)
			require.NoError(t, err)
			fcSwapWrite(t, f, want["a"], 1, 1, 3)
			require.NoError(t, f.Datasync())
			require.NoError(t, f.Close())
		}},
		{"punch-after-swap", []string{"a"}, func(t *testing.T, v *ext4io.Volume, want map[string][]byte) {
			f, err := v.OpenFile("a", os.O_RDWR, 0)
			require.NoError(t, err)
			fcSwapWrite(t, f, want["a"], 1, 0, 4)
			require.NoError(t, f.Fallocate(ext4io.FallocPunchHole|ext4io.FallocKeepSize, 1*bs, 2*bs))
			clear(want["a"][1*bs : 3*bs])
			require.NoError(t, f.Datasync())
			require.NoError(t, f.Close())
		}},
		{"truncate-after-swap", []string{"a"}, func(t *testing.T, v *ext4io.Volume, want map[string][]byte) {
			f, err := v.OpenFile("a", os.O_RDWR, 0)
			require.NoError(t, err)
			fcSwapWrite(t, f, want["a"], 1, 0, 4)
			require.NoError(t, f.Truncate(bs+100))
			want["a"] = want["a"][:bs+100]
			require.NoError(t, f.Sync())
			require.NoError(t, f.Close())
		}},
		{"other-file-fsync", []string{"a", "b"}, func(t *testing.T, v *ext4io.Volume, want map[string][]byte) {
			a, err := v.OpenFile("a", os.O_RDWR, 0)
			require.NoError(t, err)
			b, err := v.OpenFile("b", os.O_RDWR, 0)
			require.NoError(t, err)
			fcSwapWrite(t, a, want["a"], 1, 0, 3)
			fcSwapWrite(t, b, want["b"], 2, 2, 2)
			require.NoError(t, b.Datasync())
			require.NoError(t, a.Close())
			require.NoError(t, b.Close())
		}},
		{"batch-then-again", []string{"a"}, func(t *testing.T, v *ext4io.Volume, want map[string][]byte) {
			f, err := v.OpenFile("a", os.O_RDWR, 0)
			require.NoError(t, err)
			w := want["a"]
			for b := range uint64(4) {
				if b != 1 {
					atomicBlock(w[b*bs:(b+1)*bs], 1, b)
				}
			}
			_, err = f.WriteAtomicBatch([]ext4io.AtomicWrite{
				{Off: 3 * bs, Data: bytes.Clone(w[3*bs:])}, {Off: 0, Data: bytes.Clone(w[:bs])}, {Off: 2 * bs, Data: bytes.Clone(w[2*bs : 3*bs])}})
			require.NoError(t, err)
			fcSwapWrite(t, f, w, 2, 0, 2)
			require.NoError(t, f.Datasync())
			require.NoError(t, f.Close())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, v, want := fcSwapVolume(t, tc.files)
			c0 := v.Counters()
			tc.run(t, v, want)
			c := v.Counters()
			require.Equal(t, c0.FastCommits+1, c.FastCommits, "the fsync was a fast commit")
			require.Equal(t, c0.FastCommitFallbacks, c.FastCommitFallbacks)
			point := rec.Len() - 1
			require.NoError(t, v.Close())
			fcSwapCheckImage(t, rec, point, want)
		})
	}
}

// TestFastCommitAtomicManyInodes: 40 files swapped, then one Datasync:
// one fast commit of several blocks (ADD_RANGE and INODE tags of 40
// inodes, PADs) after an earlier one started the area. A crash at each
// of its device writes, torn in 4 KiB units or not, replays all 40 swaps
// or none: the TAIL's crc covers the whole fast commit.
func TestFastCommitAtomicManyInodes(t *testing.T) {
	const (
		bs = 4096
		n  = 40
	)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("f%02d", i)
	}
	rec, v, want := fcSwapVolume(t, names)
	old := map[string][]byte{}
	for name, data := range want {
		old[name] = bytes.Clone(data)
	}
	// A first fast commit starts the area: the one checked below is not
	// its first, whose HEAD block goes last.
	f0, err := v.OpenFile(names[0], os.O_RDWR, 0)
	require.NoError(t, err)
	fcSwapWrite(t, f0, want[names[0]], 1, 3, 1)
	require.NoError(t, f0.Datasync())
	require.NoError(t, f0.Close())
	old[names[0]] = bytes.Clone(want[names[0]])
	files := make([]*ext4io.File, n)
	for i, name := range names {
		files[i], err = v.OpenFile(name, os.O_RDWR, 0)
		require.NoError(t, err)
		fcSwapWrite(t, files[i], want[name], uint64(100+i), 0, 3)
	}
	from := rec.Len()
	c0 := v.Counters()
	require.NoError(t, files[n-1].Datasync())
	to := rec.Len()
	require.Equal(t, c0.FastCommits+1, v.Counters().FastCommits, "one fast commit for all 40 swaps")
	for _, f := range files {
		require.NoError(t, f.Close())
	}
	require.NoError(t, v.Close())

	states := map[string]int{}
	for p := from - 1; p < to; p++ {
		for seed := range uint64(16) {
			dev, rep, err := rec.CrashAt(p, errordev.CrashAtOptions{Seed: seed, KeepProb: 0.5, Tear: seed%2 == 1, TearUnit: bs})
			require.NoError(t, err)
			rv, err := ext4io.Open(dev, ext4io.Options{})
			require.NoError(t, err, "recovering after %v", rep)
			news := 0
			for _, name := range names {
				got, err := readAll(rv, name)
				require.NoError(t, err)
				switch {
				case bytes.Equal(got, want[name]):
					news++
				case bytes.Equal(got, old[name]):
				default:
					t.Fatalf("crash %v: %s is neither before nor after the swap (first difference at %d)", rep, name, firstDiff(want[name], got))
				}
			}
			require.NoError(t, rv.Close())
			require.True(t, news == 0 || news == n, "crash %v: %d of %d swaps replayed", rep, news, n)
			if news == 0 {
				states["none"]++
			} else {
				states["all"]++
			}
		}
	}
	t.Logf("crash points %d..%d: %v", from-1, to-1, states)
	assert.NotZero(t, states["all"])
	assert.NotZero(t, states["none"])
}
