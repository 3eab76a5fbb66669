//go:build linux

package ext4io_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
)

// fcSwapPlain is the first write id of the small files of
// TestFastCommitAtomicCrash.
const fcSwapPlain = 900000

// fcSwapAck is a Datasync (file >= 0), a Volume.Sync (file -1) or the
// Sync of small file x<k> (file -2-k) that returned: it began at tick
// start of the workload's clock, and the recorder's log held logLen
// entries when it returned, the flush that made it durable among them.
type fcSwapAck struct {
	file   int
	start  uint64
	logLen int
}

// TestFastCommitAtomicCrash crashes a workload of atomic writes on a
// volume with fast commits at device writes and flushes (80 spread over
// the log, every one with EXT4IO_LONG), tearing the last write: three
// writers on six 4-block files (blocks 0-1 written, 2 unwritten, 3 a hole;
// any file may be written by any writer, so writers share files), each op
// a WriteAtomic of 1 to 4 blocks or a WriteAtomicBatch of two ranges,
// overlapping earlier ops, a Datasync of the file after one op in three
// and a Volume.Sync after one in twenty. A fourth writer creates one-block
// files with WriteAt and fsyncs each: their blocks come from the free
// space around the swapped files', so a swap's old blocks handed out
// before the swap is durable in a full commit show up as another write's
// data. The files keep at most 4 extents, so their fsyncs are fast commits
// (swaps as ADD_RANGE tags) until the area fills, then full commits. After
// each crash, replayed by ext4io: every op reads all-old or all-new (a
// block showing op k means every block of k shows k or an op not over
// before k began), every op acknowledged by a Datasync of its file or a
// Volume.Sync that returned before the crash is there (each of its blocks
// shows it or a later op), and e2fsck -fn is clean. A few images whose
// journal holds swap fast commits go to the oracles as well
// (fcSwapOracles): e2fsck's replay and Linux's (root) must give the same
// bytes and the same free blocks as ext4io's.
func TestFastCommitAtomicCrash(t *testing.T) {
	t.Parallel()
	const (
		bs     = 4096
		blocks = 4
		nfiles = 6
	)
	start := memdev.NewBlockSize(64<<20, bs)
	require.NoError(t, ext4io.Format(start, ext4io.FormatOptions{NoDiscard: true, FastCommit: true, JournalBlocks: 4096}))
	v, err := ext4io.Open(start, ext4io.Options{Writable: true})
	require.NoError(t, err)
	names := make([]string, nfiles)
	for i := range names {
		names[i] = "db" + string(rune('0'+i))
		atomicFile(t, v, names[i], 2, 1, blocks, bs)
	}
	require.NoError(t, v.Close())

	var (
		mu    sync.Mutex
		byID  = map[uint64]*atomicOp{}
		acks  []fcSwapAck
		clock atomic.Uint64
	)
	const writers = 3
	perWriter := sized(8, 16, 80)
	var fastCommits, journalled uint64
	workload := func(dev blockdev.Device) error {
		rec := dev.(*errordev.Recorder)
		v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
		if err != nil {
			return err
		}
		files := make([]*ext4io.File, nfiles)
		for i, name := range names {
			if files[i], err = v.OpenFile(name, os.O_RDWR|ext4io.O_DIRECT, 0); err != nil {
				return err
			}
		}
		ack := func(file int, start uint64) {
			n := rec.Len()
			mu.Lock()
			acks = append(acks, fcSwapAck{file: file, start: start, logLen: n})
			mu.Unlock()
		}
		errc := make(chan error, writers+1)
		for w := range writers {
			go func() {
				rng := rand.New(rand.NewPCG(uint64(w), 77))
				for k := range perWriter {
					id := uint64(w*1000 + k + 1)
					op := &atomicOp{file: rng.IntN(nfiles)}
					if rng.IntN(2) == 0 {
						n := uint64(1 + rng.IntN(blocks))
						op.ranges = [][2]uint64{{uint64(rng.IntN(int(blocks - n + 1))), n}}
					} else {
						a := uint64(rng.IntN(blocks - 1))
						b := a + 1 + uint64(rng.IntN(int(blocks-a-1)))
						op.ranges = [][2]uint64{{b, 1}, {a, 1}} // any order
					}
					ws := atomicWrites(id, op.ranges, bs)
					f := files[op.file]
					op.start = clock.Add(1)
					mu.Lock()
					byID[id] = op
					mu.Unlock()
					var err error
					if len(ws) > 1 {
						_, err = f.WriteAtomicBatch(ws)
					} else {
						_, err = f.WriteAtomic(ws[0].Data, ws[0].Off)
					}
					if err != nil {
						errc <- err
						return
					}
					end := clock.Add(1)
					mu.Lock()
					op.end = end
					mu.Unlock()
					switch {
					case rng.IntN(20) == 0:
						s := clock.Add(1)
						if err := v.Sync(); err != nil {
							errc <- err
							return
						}
						ack(-1, s)
					case rng.IntN(3) == 0:
						s := clock.Add(1)
						if err := f.Datasync(); err != nil {
							errc <- err
							return
						}
						ack(op.file, s)
					}
				}
				errc <- nil
			}()
		}
		// A fourth writer creates small files, each one block written
		// with WriteAt and fsynced: their blocks come from the free space
		// near the others', where the swaps' old blocks would be if they
		// were handed out before the swaps were durable in full.
		go func() {
			for k := range perWriter {
				name := fmt.Sprintf("x%d", k)
				f, err := v.Create(name)
				if err != nil {
					errc <- err
					return
				}
				buf := make([]byte, bs)
				atomicBlock(buf, fcSwapPlain+uint64(k), 0)
				s := clock.Add(1)
				if _, err = f.WriteAt(buf, 0); err == nil {
					err = f.Sync()
				}
				if err = errors.Join(err, f.Close()); err != nil {
					errc <- err
					return
				}
				ack(-2-k, s)
			}
			errc <- nil
		}()
		var errsAll []error
		for range writers + 1 {
			errsAll = append(errsAll, <-errc)
		}
		fastCommits = v.Counters().FastCommits
		journalled += v.Counters().AtomicJournalled // the workload runs once at a time
		for _, f := range files {
			errsAll = append(errsAll, f.Close())
		}
		errsAll = append(errsAll, v.Close())
		return errors.Join(errsAll...)
	}

	older := func(j uint64, k *atomicOp) bool { return atomicOlder(byID, j, k) }
	checkFiles := func(t *testing.T, point int, contents, small [][]byte) {
		ids := make([][]uint64, nfiles)
		for file, data := range contents {
			ids[file] = atomicCheckFile(t, byID, file, data, bs, 2)
		}
		// The small files: absent, empty or whole, and whole once
		// their Sync returned before the crash.
		for k, data := range small {
			if len(data) == 0 {
				continue
			}
			id, ok := atomicID(data, 0)
			require.True(t, ok && id == fcSwapPlain+uint64(k) && len(data) == bs, "x%d holds %d bytes of write %d", k, len(data), id)
		}
		// Acknowledged writes: those over before a Datasync of their
		// file, or a Volume.Sync, began that returned before the crash.
		for _, a := range acks {
			if point < a.logLen-1 {
				continue
			}
			if a.file <= -2 {
				k := -2 - a.file
				require.Len(t, small[k], bs, "x%d was fsynced (at log %d, crash at %d)", k, a.logLen, point)
				continue
			}
			for id, k := range byID {
				if k.end == 0 || k.end >= a.start || a.file >= 0 && a.file != k.file {
					continue
				}
				for _, r := range k.ranges {
					for b := r[0]; b < r[0]+r[1]; b++ {
						require.False(t, older(ids[k.file][b], k), "file %d block %d: write %d was synced (ack at log %d, crash at %d), the block holds %d",
							k.file, b, id, a.logLen, point, ids[k.file][b])
					}
				}
			}
		}
	}

	oracles, pending := 0, 0
	opts := ext4iotest.SweepOptions{EveryOp: true, MaxPoints: sized(40, 40, 0),
		CrashAt: errordev.CrashAtOptions{KeepProb: 0.5, Tear: true, TearUnit: bs}}
	checked := ext4iotest.CrashSweep(t, start, workload, func(t *testing.T, dev *memdev.Device, rep errordev.CrashReport) {
		// A read-only open replays in memory and tells whether fast
		// commits are pending.
		rv, err := ext4io.Open(dev, ext4io.Options{})
		require.NoError(t, err, "read-only recovery after %v", rep)
		tags := 0
		if info := rv.Recovery(); info != nil {
			tags = info.FastCommitTags
		}
		require.NoError(t, rv.Close())
		var img string
		if tags > 0 {
			pending++
			if oracles < 4 && pending%3 == 1 {
				oracles++
				img = filepath.Join(t.TempDir(), "crash.img")
				saveDev(t, dev, img)
			}
		}
		v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
		require.NoError(t, err, "recovering after %v", rep)
		contents := make([][]byte, nfiles)
		for i, name := range names {
			f, err := v.Open(name)
			require.NoError(t, err)
			contents[i] = make([]byte, blocks*bs)
			_, err = f.ReadAt(contents[i], 0)
			require.NoError(t, err)
			require.NoError(t, f.Close())
		}
		small := make([][]byte, perWriter)
		for k := range small {
			data, err := fs.ReadFile(v.FS(), fmt.Sprintf("x%d", k))
			if !errors.Is(err, fs.ErrNotExist) {
				require.NoError(t, err)
				small[k] = data
			}
		}
		require.NoError(t, v.Close())
		checkFiles(t, rep.Point, contents, small)
		ext4iotest.FsckDev(t, dev)
		if img != "" {
			fcSwapOracles(t, img, names, contents, freeBlocks(t, ext4iotest.ImageOf(t, dev)))
		}
	}, opts)
	t.Logf("%d atomic writes, %d syncs returned, %d fast commits; %d crash images checked, %d with fast commits pending, %d also by the oracles; %d writes journalled over all runs",
		len(byID), len(acks), fastCommits, checked, pending, oracles, journalled)
	require.NotZero(t, journalled, "no write took the journalled path")
	require.Greater(t, checked, 10)
	require.NotZero(t, fastCommits, "the workload's fsyncs were fast commits")
	require.NotZero(t, pending, "some crash images have fast commits to replay")
}

// freeRe matches dumpe2fs's per-group free block lists.
var freeRe = regexp.MustCompile(`(?m)^\s+Free blocks: .*$`)

// freeBlocks returns the free block lists of img's groups, as dumpe2fs
// reads them from the block bitmaps.
func freeBlocks(t *testing.T, img string) string {
	t.Helper()
	out, err := exec.Command(ext4iotest.Tool(t, "dumpe2fs"), img).CombinedOutput()
	require.NoError(t, err, "dumpe2fs: %s", out)
	return strings.Join(freeRe.FindAllString(string(out), -1), "\n")
}

// fcSwapOracles replays img, a crash image whose journal holds fast
// commits, with e2fsck (-fy on a copy: it must find nothing to fix) and,
// as root, with Linux (a loop mount of another copy): each must read the
// files names as want (ext4io's replay) and leave the block bitmaps
// with the free blocks free (ext4io's), and e2fsck -fn must be clean
// after each.
func fcSwapOracles(t *testing.T, img string, names []string, want [][]byte, free string) {
	t.Helper()
	keepOnFailure(t, "fcswap-"+t.Name(), map[string]string{"crash.img": img})
	dir := t.TempDir()
	oracle := filepath.Join(dir, "e2fsck.img")
	fcCopyFile(t, img, oracle)
	out, err := exec.Command(ext4iotest.Tool(t, "e2fsck"), "-fy", oracle).CombinedOutput()
	if bytes.Contains(out, []byte("Superblock checksum does not match")) {
		fcFixSuperCsum(t, oracle) // e2fsck 1.47.0's own slip (see TestFastCommitReplayLinux)
		out, err = exec.Command(ext4iotest.Tool(t, "e2fsck"), "-fy", oracle).CombinedOutput()
	}
	if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() > 1) {
		t.Fatalf("e2fsck -fy: %v\n%s", err, out)
	}
	assert.NotContains(t, string(out), "Fix?", "e2fsck's replay leaves nothing to fix:\n%s", out)
	ext4iotest.Fsck(t, oracle)
	for i, name := range names {
		got := ext4iotest.Dump(t, oracle, name)
		assert.True(t, bytes.Equal(want[i], got), "e2fsck's replay: %s differs from ext4io's at %d", name, firstDiff(want[i], got))
	}
	assert.Equal(t, free, freeBlocks(t, oracle), "free blocks after e2fsck's replay and after ext4io's")

	if os.Geteuid() != 0 || testing.Short() {
		t.Log("Linux's replay not checked: mounting needs root (and no -short)")
		return
	}
	kimg := filepath.Join(dir, "kernel.img")
	fcCopyFile(t, img, kimg)
	mnt := ext4iotest.Mount(t, kimg, false)
	for i, name := range names {
		got, err := os.ReadFile(filepath.Join(mnt, name))
		require.NoError(t, err)
		assert.True(t, bytes.Equal(want[i], got), "Linux's replay: %s differs from ext4io's at %d", name, firstDiff(want[i], got))
	}
	ext4iotest.Unmount(t, mnt)
	ext4iotest.Fsck(t, kimg)
	assert.Equal(t, free, freeBlocks(t, kimg), "free blocks after Linux's replay and after ext4io's")
}
