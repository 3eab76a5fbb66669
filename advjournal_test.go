package ext4io_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/ext4io/ext4io/iomap"
)

// jbd2Magic is the jbd2 block header magic: a data block that begins with
// it is logged escaped.
const jbd2Magic = 0xC03B3998

// TestAdvJournalReadOnlyReplay: a crash image whose log holds journalled
// pages that never reached their home blocks (one of them beginning with
// jbd2's magic, logged escaped). A read-only open replays the log in
// memory: buffered and direct reads see the logged bytes, as Linux (which
// replays at mount) and e2fsck -fy (on a copy) do, and the image itself is
// left untouched.
func TestAdvJournalReadOnlyReplay(t *testing.T) {
	t.Parallel()
	dev, v, f := journalVolume(t, false)
	p := bytes.Repeat([]byte{9}, 16<<10)
	binary.BigEndian.PutUint32(p, jbd2Magic)
	binary.BigEndian.PutUint32(p[4096:], jbd2Magic) // the page's second block too
	c0 := v.Counters().AtomicJournalled
	q := journalWrite(t, v, f, 7, 128<<10)
	require.NoError(t, f.Datasync())
	_, err := f.WriteAtomic(p, 64<<10) // the last: its in-place write is never flushed
	require.NoError(t, err)
	require.Equal(t, c0+2, v.Counters().AtomicJournalled, "the test needs both pages journalled")
	img, err := dev.Crash(errordev.CrashOptions{KeepProb: 0})
	require.NoError(t, err)
	want := bytes.Repeat([]byte{0xEE}, 256<<10)
	copy(want[64<<10:], p)
	copy(want[128<<10:], q)
	home := make([]byte, 4096)
	_, err = img.ReadAt(home, int64(physOf(t, f)[16])*4096)
	require.NoError(t, err)
	require.Equal(t, bytes.Repeat([]byte{0xEE}, 4096), home, "the test needs the page's home blocks to hold the old bytes")
	// The log holds the page's first two blocks (the same bytes) escaped
	// (magic zeroed, the tag flagged), never as they are.
	esc := bytes.Clone(p[:4096])
	clear(esc[:4])
	escaped, raw := 0, 0
	blk := make([]byte, 4096)
	for off := int64(0); off < img.Size(); off += 4096 {
		_, err := img.ReadAt(blk, off)
		require.NoError(t, err)
		escaped += btoi(bytes.Equal(blk, esc))
		raw += btoi(bytes.Equal(blk, p[:4096]))
	}
	require.Equal(t, [2]int{2, 0}, [2]int{escaped, raw}, "log copies of the page's first blocks: escaped, as they are")
	d0, err := ext4iotest.Digest(img)
	require.NoError(t, err)

	rv, err := ext4io.Open(img, ext4io.Options{})
	require.NoError(t, err)
	require.NotNil(t, rv.Recovery(), "the read-only open replayed nothing")
	for _, flag := range []int{os.O_RDONLY, os.O_RDONLY | ext4io.O_DIRECT} {
		rf, err := rv.OpenFile("db", flag, 0)
		require.NoError(t, err)
		got := make([]byte, len(want))
		_, err = rf.ReadAt(got, 0)
		require.NoError(t, err)
		require.True(t, bytes.Equal(want, got), "flag %#x: read-only open reads differently at %d", flag, firstDiff(want, got))
		// Page by page, as small reads go (read-ahead windows).
		for off := 0; off < len(want); off += 4096 {
			_, err = rf.ReadAt(got[:4096], int64(off))
			require.NoError(t, err)
			require.True(t, bytes.Equal(want[off:off+4096], got[:4096]), "flag %#x: block at %d", flag, off)
		}
		require.NoError(t, rf.Close())
	}
	got, err := rv.ReadFile("db")
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "ReadFile differs at %d", firstDiff(want, got))
	require.NoError(t, rv.Close())
	d1, err := ext4iotest.Digest(img)
	require.NoError(t, err)
	require.Equal(t, d0, d1, "the read-only open wrote the image")

	path := filepath.Join(t.TempDir(), "crash.img")
	saveDev(t, img, path)
	fixed := filepath.Join(t.TempDir(), "fixed.img")
	saveDev(t, img, fixed)
	out, err := exec.Command(ext4iotest.Tool(t, "e2fsck"), "-fy", fixed).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 1 {
		err = nil // "file system was modified": the journal replay
	}
	require.NoError(t, err, "%s", out)
	ext4iotest.Fsck(t, fixed)
	require.True(t, bytes.Equal(want, ext4iotest.Dump(t, fixed, "db")), "e2fsck's replay reads differently")
	if os.Geteuid() == 0 && !testing.Short() {
		linuxReads(t, path, []string{"db"}, [][]byte{want})
	} else {
		t.Log("not root or -short: Linux's replay is not checked")
	}
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
}

// TestAdvJournalStress mixes journalled atomic writes (single pages and
// batches, each followed by the Datasync that lets the next one journal)
// with every other operation on one file and across files: buffered,
// direct and iomap-ops writes, reads, truncate and regrow, punch, zero,
// collapse and insert, xattrs, File and Volume syncs, handles closed and
// reopened, files created and unlinked (evicting inodes from a tiny
// inode cache), with fast commits and without. A deadlock between the
// journalled write's commit (txnGate, then the inode lock) and any path
// that takes them the other way round hangs the operations: the watchdog
// fails the test with every goroutine's stack instead. The image must be
// clean after Close. EXT4IO_LONG runs 20 s per variant instead of 1.5 s.
func TestAdvJournalStress(t *testing.T) {
	t.Parallel()
	dur := 1500 * time.Millisecond
	if os.Getenv("EXT4IO_LONG") != "" {
		dur = 20 * time.Second
	}
	for _, fc := range []bool{false, true} {
		t.Run(fmt.Sprintf("fc=%v", fc), func(t *testing.T) { advJournalStress(t, fc, dur) })
	}
}

func advJournalStress(t *testing.T, fc bool, dur time.Duration) {
	const size, core = 256 << 10, 192 << 10 // the tail past core is reshaped
	base := memdev.New(64 << 20)
	require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{FastCommit: fc, NoDiscard: true}))
	v, err := ext4io.Open(base, ext4io.Options{Writable: true, InodeCache: 4, CommitInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	for _, name := range []string{"db", "db2"} {
		f := directFile(t, v, name, 0, size)
		_, err = f.WriteAt(bytes.Repeat([]byte{0xEE}, size), 0)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	require.NoError(t, v.Sync())
	var stop atomic.Bool
	var wg sync.WaitGroup
	var journalled atomic.Int64
	fail := func(format string, args ...any) {
		t.Errorf(format, args...)
		stop.Store(true)
	}
	run := func(name string, seed uint64, step func(r *rand.Rand) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, 1))
			for !stop.Load() {
				if err := step(r); err != nil {
					fail("%s: %v", name, err)
					return
				}
			}
		}()
	}
	open := func(name string, flag int) *ext4io.File {
		f, err := v.OpenFile(name, flag, 0)
		require.NoError(t, err)
		return f
	}
	page := func(r *rand.Rand, n int) []byte { return bytes.Repeat([]byte{byte(r.IntN(250) + 1)}, n) }
	pageOff := func(r *rand.Rand, n int) int64 { return int64(r.IntN((core-n)/4096+1)) * 4096 }
	var files []*ext4io.File
	for i, name := range []string{"db", "db2"} {
		d := open(name, os.O_RDWR|ext4io.O_DIRECT)
		files = append(files, d)
		run("atomic "+name, uint64(10+i), func(r *rand.Rand) error {
			c0 := v.Counters().AtomicJournalled
			if _, err := d.WriteAtomic(page(r, 16<<10), pageOff(r, 16<<10)); err != nil {
				return err
			}
			journalled.Add(int64(v.Counters().AtomicJournalled - c0))
			return d.Datasync()
		})
	}
	d := open("db", os.O_RDWR|ext4io.O_DIRECT)
	run("batch", 20, func(r *rand.Rand) error {
		ws := []ext4io.AtomicWrite{{Off: pageOff(r, 4096), Data: page(r, 4096)}, {Off: pageOff(r, 8192), Data: page(r, 8192)}}
		if ws[0].Off > ws[1].Off {
			ws[0], ws[1] = ws[1], ws[0]
		}
		if ws[0].Off+int64(len(ws[0].Data)) > ws[1].Off {
			ws = ws[:1]
		}
		if _, err := d.WriteAtomicBatch(ws); err != nil {
			return err
		}
		return d.Sync()
	})
	buf := open("db", os.O_RDWR)
	run("buffered", 30, func(r *rand.Rand) error {
		n := 1 + r.IntN(6000)
		if _, err := buf.WriteAt(page(r, n), int64(r.IntN(core-n))); err != nil {
			return err
		}
		if r.IntN(4) == 0 {
			return buf.Datasync()
		}
		return nil
	})
	run("direct", 40, func(r *rand.Rand) error {
		_, err := d.WriteAt(page(r, 4096), pageOff(r, 4096))
		return err
	})
	run("iomap", 50, func(r *rand.Rand) error {
		kind := ext4io.IomapOverwrite
		if r.IntN(2) == 0 {
			kind = ext4io.IomapNormal
		}
		off := pageOff(r, 8192)
		l, err := d.LockIO(kind, off, 8192)
		if err != nil {
			return err
		}
		n, err := iomap.DirectWrite(base, d.IomapOps(kind), page(r, 8192), off, &iomap.DioOptions{BlockSize: 4096})
		if err = l.Unlock(off, n, err); errors.Is(err, iomap.ErrNeedNormal) {
			return nil // an unwritten or punched block
		}
		return err
	})
	rd := open("db", os.O_RDONLY)
	rdd := open("db", os.O_RDONLY|ext4io.O_DIRECT)
	run("read", 60, func(r *rand.Rand) error {
		p := make([]byte, 16<<10)
		off := pageOff(r, len(p))
		if _, err := rd.ReadAt(p, off); err != nil {
			return err
		}
		_, err := rdd.ReadAt(p, off)
		return err
	})
	tail := open("db", os.O_RDWR)
	run("tail", 70, func(r *rand.Rand) error {
		switch r.IntN(5) {
		case 0:
			if err := tail.Truncate(core + 4096*int64(r.IntN(4))); err != nil {
				return err
			}
			return tail.Truncate(size)
		case 1:
			return tail.Fallocate(ext4io.FallocPunchHole, core+4096*int64(r.IntN(8)), 8192)
		case 2:
			return tail.Fallocate(ext4io.FallocZeroRange, core+4096*int64(r.IntN(8)), 4096)
		case 3:
			if err := tail.Fallocate(ext4io.FallocCollapseRange, core, 32<<10); err != nil {
				return err
			}
			return tail.Fallocate(ext4io.FallocInsertRange, core, 32<<10)
		default:
			_, err := tail.WriteAt(page(r, 16<<10), core+4096*int64(r.IntN(12)))
			return err
		}
	})
	run("core punch", 80, func(r *rand.Rand) error {
		time.Sleep(time.Millisecond)
		off := pageOff(r, 4096)
		mode := []ext4io.FallocMode{ext4io.FallocPunchHole, ext4io.FallocZeroRange, ext4io.FallocWriteZeroes}[r.IntN(3)]
		if err := tail.Fallocate(mode, off, 4096); err != nil {
			return err
		}
		_, err := tail.WriteAt(page(r, 4096), off) // written again, journalled again later
		return err
	})
	run("meta", 90, func(r *rand.Rand) error {
		switch r.IntN(4) {
		case 0:
			return tail.Setxattr("user.k", page(r, 1+r.IntN(100)), 0)
		case 1:
			return v.Sync()
		case 2:
			_, err := tail.Extents()
			return err
		default:
			return tail.Sync()
		}
	})
	run("handles", 100, func(r *rand.Rand) error {
		flag := os.O_RDWR
		if r.IntN(2) == 0 {
			flag |= ext4io.O_DIRECT
		}
		f, err := v.OpenFile("db2", flag, 0)
		if err != nil {
			return err
		}
		if _, err := f.WriteAt(page(r, 4096), pageOff(r, 4096)); err != nil {
			return err
		}
		return f.Close()
	})
	run("files", 110, func(r *rand.Rand) error {
		name := fmt.Sprintf("tmp%d", r.IntN(8))
		f, err := v.Create(name)
		if err != nil {
			return err
		}
		if _, err := f.WriteAt(page(r, 8192), 0); err != nil {
			return err
		}
		c0 := v.Counters().AtomicJournalled
		if err := f.Sync(); err != nil {
			return err
		}
		if _, err := f.WriteAtomic(page(r, 4096), 4096); err != nil {
			return err
		}
		journalled.Add(int64(v.Counters().AtomicJournalled - c0))
		if err := v.Remove(name); err != nil {
			return err
		}
		return f.Close()
	})

	time.Sleep(dur)
	stop.Store(true)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		stacks := make([]byte, 1<<22)
		stacks = stacks[:runtime.Stack(stacks, true)]
		t.Fatalf("operations hung for 30 s after the stop (a deadlock); goroutines:\n%s", stacks)
	}
	require.Positive(t, journalled.Load(), "the test needs journalled writes")
	t.Logf("journalled atomic writes: %d", journalled.Load())
	for _, f := range append(files, d, buf, rd, rdd, tail) {
		require.NoError(t, f.Close())
	}
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, base)
}

// btoi is 1 for true, 0 for false.
func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
