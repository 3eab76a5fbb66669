//go:build unix

package ext4io_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/stretchr/testify/require"
)

// discardWorkload runs random creates, writes, truncates and unlinks on
// v, syncing now and then, and returns the files it left with their
// contents.
func discardWorkload(t *testing.T, v *ext4io.Volume, seed uint64, ops int) map[string][]byte {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed+1))
	files := map[string][]byte{}
	for i := range ops {
		name := fmt.Sprintf("f%02d", rng.IntN(24))
		data, exists := files[name]
		switch op := rng.IntN(10); {
		case op < 5: // write
			f, err := v.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				t.Fatalf("op %d: open %s: %v", i, name, err)
			}
			off := int64(rng.IntN(200_000))
			p := make([]byte, 1+rng.IntN(300_000))
			for j := range p {
				p[j] = byte(rng.Uint32() | 1)
			}
			if _, err := f.WriteAt(p, off); err != nil {
				t.Fatalf("op %d: write %s: %v", i, name, err)
			}
			if need := off + int64(len(p)); int64(len(data)) < need {
				data = append(data, make([]byte, need-int64(len(data)))...)
			}
			copy(data[off:], p)
			files[name] = data
			require.NoError(t, f.Close())
		case op < 7 && exists: // truncate
			f, err := v.OpenFile(name, os.O_RDWR, 0)
			require.NoError(t, err)
			size := int64(rng.IntN(len(data) + 1))
			if err := f.Truncate(size); err != nil {
				t.Fatalf("op %d: truncate %s: %v", i, name, err)
			}
			files[name] = data[:size]
			require.NoError(t, f.Close())
		case op < 9 && exists: // unlink
			if err := v.Unlink(name); err != nil {
				t.Fatalf("op %d: unlink %s: %v", i, name, err)
			}
			delete(files, name)
		default:
			require.NoError(t, v.Sync())
		}
	}
	return files
}

// checkFiles compares the files of v with want.
func checkFiles(t *testing.T, v *ext4io.Volume, want map[string][]byte) {
	t.Helper()
	for name, data := range want {
		got, err := v.ReadFile(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("%s: %d bytes differ from the %d written", name, len(got), len(data))
		}
	}
}

// TestDiscardAfterCommit runs a random workload with Options.Discard on a
// recording device. For every discard in the device's log, the image a
// power cut just before it leaves (only what earlier flushes made
// durable) is recovered read-only: every discarded block must be free
// there, so each discard came after the durable commit that freed its
// blocks, and a crash never finds committed metadata mapping a discarded
// block. The surviving files must read back intact (a block written
// before its discard would read as zeroes) and the image pass e2fsck.
func TestDiscardAfterCommit(t *testing.T) {
	t.Parallel()
	for _, bs := range []int{1024, 4096} {
		t.Run(fmt.Sprint(bs), func(t *testing.T) {
			base := memdev.NewBlockSize(64<<20, 4096)
			require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{BlockSize: bs}))
			rec, err := errordev.NewRecorder(base)
			require.NoError(t, err)
			// Every discarded block must be free in the live volume when
			// its discard is issued: not allocated again before.
			var live atomic.Pointer[ext4io.Volume]
			hook := &discardHook{Device: rec, fn: func(off, n int64) {
				for b := off / int64(bs); b < (off+n)/int64(bs); b++ {
					if free, err := ext4io.BlockFree(live.Load(), uint64(b)); err != nil || !free {
						t.Errorf("discard of block %d (%d+%d bytes): in use (%v)", b, off, n, err)
						return
					}
				}
			}}
			// A short commit interval mixes background commits in.
			v, err := ext4io.Open(hook, ext4io.Options{Writable: true, Discard: true, CommitInterval: 3 * time.Millisecond})
			require.NoError(t, err)
			live.Store(v)
			files := discardWorkload(t, v, uint64(bs), 150)
			st := v.DiscardStats()
			require.NoError(t, v.Close())
			if st.Discards == 0 || st.Failures != 0 || st.Disabled {
				t.Fatalf("stats %+v: want discards and no failures", st)
			}
			var points []int
			for i := range rec.Len() {
				if k, _, _ := rec.Entry(i); k == errordev.Discard {
					points = append(points, i)
				}
			}
			t.Logf("%d discards (%d bytes) in a log of %d entries", len(points), st.Bytes, rec.Len())
			if testing.Short() && len(points) > 40 {
				points = points[:40]
			}
			for _, p := range points {
				_, off, n := rec.Entry(p)
				img, rep, err := rec.CrashAt(p-1, errordev.CrashAtOptions{})
				require.NoError(t, err)
				cv, err := ext4io.Open(img, ext4io.Options{})
				if err != nil {
					t.Fatalf("discard %d (%s): open: %v", p, rep, err)
				}
				for b := off / int64(bs); b < (off+n)/int64(bs); b++ {
					free, err := ext4io.BlockFree(cv, uint64(b))
					require.NoError(t, err)
					if !free {
						t.Fatalf("log entry %d discards block %d (%d+%d bytes), in use in the durable state before it (%s)", p, b, off, n, rep)
					}
				}
				cv.Close()
			}
			v, err = ext4io.Open(rec, ext4io.Options{})
			require.NoError(t, err)
			checkFiles(t, v, files)
			v.Close()
			ext4iotest.FsckDev(t, base)
		})
	}
}

// discardHook calls fn before each discard.
type discardHook struct {
	blockdev.Device
	fn func(off, n int64)
}

func (h *discardHook) Discard(off, n int64) error {
	h.fn(off, n)
	return h.Device.Discard(off, n)
}

// TestDiscardNoJournal: without a journal, freed runs are discarded as
// they are freed, once free in the bitmap, and nothing the volume still
// uses is lost.
func TestDiscardNoJournal(t *testing.T) {
	t.Parallel()
	base := memdev.New(32 << 20)
	require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{BlockSize: 1024, Features: "^has_journal"}))
	// Every discarded block is free when its discard is issued: the
	// free was checked (so a corrupt mapping cannot get metadata
	// discarded) and the bitmap changed first.
	var live atomic.Pointer[ext4io.Volume]
	hook := &discardHook{Device: base, fn: func(off, n int64) {
		for b := off / 1024; b < (off+n)/1024; b++ {
			if free, err := ext4io.BlockFree(live.Load(), uint64(b)); err != nil || !free {
				t.Errorf("discard of block %d (%d+%d bytes): in use (%v)", b, off, n, err)
				return
			}
		}
	}}
	v, err := ext4io.Open(hook, ext4io.Options{Writable: true, Discard: true})
	require.NoError(t, err)
	live.Store(v)
	files := discardWorkload(t, v, 7, 120)
	if st := v.DiscardStats(); st.Discards == 0 {
		t.Fatalf("no discards: %+v", st)
	}
	checkFiles(t, v, files)
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, base)
}

// unsupportedDiscard refuses every discard, like a device without one.
type unsupportedDiscard struct{ blockdev.Device }

func (unsupportedDiscard) Discard(off, n int64) error {
	return fmt.Errorf("test device: %w", blockdev.ErrUnsupported)
}

// failingDiscard fails every discard with an I/O error.
type failingDiscard struct{ blockdev.Device }

func (failingDiscard) Discard(off, n int64) error {
	return fmt.Errorf("test device: %w", blockdev.ErrIO)
}

// TestDiscardErrorsNotFatal: failed and unsupported discards do not fail
// the operations that freed the blocks; they are counted, and an
// unsupported one turns online discard off. Trim reports the error.
func TestDiscardErrorsNotFatal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		wrap        func(blockdev.Device) blockdev.Device
		disabled    bool
		trimFailure error
	}{
		{"unsupported", func(d blockdev.Device) blockdev.Device { return unsupportedDiscard{d} }, true, ext4io.ErrUnsupported},
		{"failing", func(d blockdev.Device) blockdev.Device { return failingDiscard{d} }, false, ext4io.ErrIO},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := memdev.New(32 << 20)
			require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{BlockSize: 1024}))
			v, err := ext4io.Open(tc.wrap(base), ext4io.Options{Writable: true, Discard: true, CommitInterval: -1})
			require.NoError(t, err)
			files := discardWorkload(t, v, 3, 80)
			require.NoError(t, v.Sync())
			st := v.DiscardStats()
			if st.Discards != 0 || st.Failures == 0 || st.Disabled != tc.disabled || st.LastError == nil {
				t.Fatalf("stats %+v", st)
			}
			if tc.disabled && st.Failures != 1 {
				t.Errorf("%d failures: online discard went on after ErrUnsupported", st.Failures)
			}
			if _, err := v.Trim(0, 1<<40, 0); !errors.Is(err, tc.trimFailure) {
				t.Errorf("Trim: %v; want %v", err, tc.trimFailure)
			}
			checkFiles(t, v, files)
			require.NoError(t, v.Close())
			ext4iotest.FsckDev(t, base)
		})
	}
}

// allocated returns the bytes the host file system allocated to path.
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(path, &st))
	return st.Blocks * 512
}

// TestTrimFile: on a file-backed image, Trim after an unlink punches the
// freed blocks out of the image file (its allocated size drops by about
// the file's size), and so does online discard without Trim. The other
// file survives and the image passes e2fsck.
func TestTrimFile(t *testing.T) {
	t.Parallel()
	const size, big = 128 << 20, 32 << 20
	for _, online := range []bool{false, true} {
		t.Run(map[bool]string{false: "Trim", true: "online"}[online], func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "img")
			dev, err := blockdev.CreateFile(path, size)
			require.NoError(t, err)
			defer dev.Close()
			require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{}))
			v, err := ext4io.Open(dev, ext4io.Options{Writable: true, Discard: online})
			require.NoError(t, err)
			data := bytes.Repeat([]byte("trim me "), big/8)
			keep := bytes.Repeat([]byte("keep "), 100_000)
			for name, p := range map[string][]byte{"big": data, "keep": keep} {
				require.NoError(t, v.WriteFile(name, p, 0o644))
			}
			require.NoError(t, v.Sync())
			before := allocated(t, path)
			if before < big {
				t.Skipf("the host file system allocated %d bytes for %d written", before, big)
			}
			require.NoError(t, v.Unlink("big"))
			if err := v.Sync(); err != nil {
				t.Fatal(err)
			}
			afterRm := allocated(t, path)
			n, err := v.Trim(0, size, 0)
			require.NoError(t, err)
			after := allocated(t, path)
			t.Logf("allocated: %d before rm, %d after rm, %d after Trim of %d bytes; stats %+v", before, afterRm, after, n, v.DiscardStats())
			if online {
				if afterRm > before-big*9/10 {
					t.Errorf("online discard: %d bytes allocated after removing %d of %d", afterRm, big, before)
				}
			} else {
				if n < big {
					t.Errorf("Trim = %d bytes; want at least the %d freed", n, big)
				}
				if afterRm < before-big/10 {
					t.Errorf("the image shrank from %d to %d without discard", before, afterRm)
				}
				if after > before-big*9/10 {
					t.Errorf("%d bytes allocated after Trim; %d before the %d-byte file was removed", after, before, big)
				}
				// A second Trim finds the groups trimmed.
				if n2, err := v.Trim(0, size, 0); err != nil || n2 >= n {
					t.Errorf("second Trim = %d, %v; first %d", n2, err, n)
				}
			}
			if got, err := v.ReadFile("keep"); err != nil || !bytes.Equal(got, keep) {
				t.Fatalf("keep: %v", err)
			}
			require.NoError(t, v.Close())
			ext4iotest.Fsck(t, path)
		})
	}
}

// TestTrimArgs: FITRIM's argument checks, and read-only volumes.
func TestTrimArgs(t *testing.T) {
	base := memdev.New(16 << 20)
	require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{BlockSize: 1024}))
	ro, err := ext4io.Open(base, ext4io.Options{})
	require.NoError(t, err)
	if _, err := ro.Trim(0, 1<<30, 0); !errors.Is(err, ext4io.ErrReadOnly) {
		t.Errorf("read-only Trim: %v", err)
	}
	ro.Close()
	v, err := ext4io.Open(base, ext4io.Options{Writable: true})
	require.NoError(t, err)
	defer v.Close()
	for _, a := range [][3]int64{{0, 512, 0}, {16 << 20, 1 << 20, 0}, {-1, 1 << 20, 0}, {0, 1 << 20, 1 << 30}} {
		if n, err := v.Trim(a[0], a[1], a[2]); !errors.Is(err, ext4io.ErrInvalid) {
			t.Errorf("Trim(%d, %d, %d) = %d, %v; want ErrInvalid", a[0], a[1], a[2], n, err)
		}
	}
	// Past the end is clipped; a range holding only metadata trims 0.
	if n, err := v.Trim(0, 1<<40, 0); err != nil || n == 0 {
		t.Errorf("whole Trim = %d, %v", n, err)
	}
	if n, err := v.Trim(1024, 4096, 0); err != nil || n != 0 {
		t.Errorf("Trim of the first metadata blocks = %d, %v", n, err)
	}
}

// BenchmarkUnlinkDiscard measures unlinking 16 files of 4 MiB and
// syncing, on a file-backed image, with and without online discard (each
// freed extent becomes a hole punched in the image file).
func BenchmarkUnlinkDiscard(b *testing.B) {
	for _, online := range []bool{false, true} {
		b.Run(map[bool]string{false: "off", true: "on"}[online], func(b *testing.B) {
			dev, err := blockdev.CreateFile(filepath.Join(b.TempDir(), "img"), 1<<30)
			if err != nil {
				b.Fatal(err)
			}
			defer dev.Close()
			if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
				b.Fatal(err)
			}
			v, err := ext4io.Open(dev, ext4io.Options{Writable: true, Discard: online})
			if err != nil {
				b.Fatal(err)
			}
			defer v.Close()
			data := bytes.Repeat([]byte{7}, 4<<20)
			for b.Loop() {
				b.StopTimer()
				for i := range 16 {
					if err := v.WriteFile(fmt.Sprint(i), data, 0o644); err != nil {
						b.Fatal(err)
					}
				}
				if err := v.Sync(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				for i := range 16 {
					if err := v.Unlink(fmt.Sprint(i)); err != nil {
						b.Fatal(err)
					}
				}
				if err := v.Sync(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
