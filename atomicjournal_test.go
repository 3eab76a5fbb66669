package ext4io_test

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
)

// journalVolume formats a crashable memory device (fast commits with fc)
// and opens it with a file "db" of 256 KiB written and synced.
func journalVolume(t *testing.T, fc bool) (*errordev.Crashable, *ext4io.Volume, *ext4io.File) {
	t.Helper()
	base := memdev.New(64 << 20)
	require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{FastCommit: fc, NoDiscard: true}))
	dev, err := errordev.NewCrashable(base)
	require.NoError(t, err)
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, CommitInterval: -1})
	require.NoError(t, err)
	f := directFile(t, v, "db", 0, 256<<10)
	_, err = f.WriteAt(bytes.Repeat([]byte{0xEE}, 256<<10), 0)
	require.NoError(t, err)
	require.NoError(t, v.Sync())
	return dev, v, f
}

// journalWrite writes a 16 KiB page of b at off with WriteAtomic and
// checks that it went through the journal.
func journalWrite(t *testing.T, v *ext4io.Volume, f *ext4io.File, b byte, off int64) []byte {
	t.Helper()
	c0 := v.Counters().AtomicJournalled
	p := bytes.Repeat([]byte{b}, 16<<10)
	_, err := f.WriteAtomic(p, off)
	require.NoError(t, err)
	require.Equal(t, c0+1, v.Counters().AtomicJournalled, "the write was not journalled")
	return p
}

// crashRead crashes dev keeping only flushed writes, recovers the image
// and returns the bytes of name at [off, off+n); e2fsck must call the
// image clean.
func crashRead(t *testing.T, dev *errordev.Crashable, name string, off int64, n int) []byte {
	t.Helper()
	img, err := dev.Crash(errordev.CrashOptions{KeepProb: 0})
	require.NoError(t, err)
	cv, err := ext4io.Open(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	f, err := cv.Open(name)
	require.NoError(t, err)
	got := make([]byte, n)
	_, err = f.ReadAt(got, off)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, cv.Close())
	ext4iotest.FsckDev(t, img)
	return got
}

// TestAtomicJournalDurable: a journalled atomic write keeps the page's
// blocks and is durable when it returns, without a sync.
func TestAtomicJournalDurable(t *testing.T) {
	t.Parallel()
	for _, fc := range []bool{false, true} {
		dev, v, f := journalVolume(t, fc)
		before := physOf(t, f)
		p := journalWrite(t, v, f, 1, 64<<10)
		require.Equal(t, before, physOf(t, f), "the page moved")
		require.Equal(t, p, crashRead(t, dev, "db", 64<<10, len(p)))
		require.NoError(t, f.Close())
		require.NoError(t, v.Close())
	}
}

// TestAtomicJournalOverwriteSynced: a direct overwrite of a journalled
// page, made durable by Datasync, survives a crash: recovery must not
// write the logged copy back over it. Without the revoke that Datasync
// commits when the page no longer holds what was logged (File.liveCheck),
// replay puts the journalled page back.
func TestAtomicJournalOverwriteSynced(t *testing.T) {
	t.Parallel()
	for _, fc := range []bool{false, true} {
		dev, v, f := journalVolume(t, fc)
		journalWrite(t, v, f, 1, 64<<10)
		q := bytes.Repeat([]byte{2}, 16<<10)
		_, err := f.WriteAt(q, 64<<10)
		require.NoError(t, err)
		require.NoError(t, f.Datasync())
		require.Equal(t, q, crashRead(t, dev, "db", 64<<10, len(q)), "fast commits %v", fc)
		require.NoError(t, f.Close())
		require.NoError(t, v.Close())
	}
}

// TestAtomicJournalBufferedOverwrite: the same with a buffered overwrite
// written back by Sync.
func TestAtomicJournalBufferedOverwrite(t *testing.T) {
	t.Parallel()
	dev, v, f := journalVolume(t, false)
	journalWrite(t, v, f, 1, 0)
	b, err := v.OpenFile("db", os.O_RDWR, 0)
	require.NoError(t, err)
	q := bytes.Repeat([]byte{3}, 4096)
	_, err = b.WriteAt(q, 4096)
	require.NoError(t, err)
	require.NoError(t, b.Sync())
	want := bytes.Repeat([]byte{1}, 16<<10)
	copy(want[4096:], q)
	require.Equal(t, want, crashRead(t, dev, "db", 0, len(want)))
	require.NoError(t, b.Close())
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
}

// TestAtomicJournalTruncateReuse: a journalled page's blocks freed by a
// truncate and reused by another file, whose write is made durable,
// survive a crash: the free revokes the logged copies. Without that
// revoke (jmeta.liveFreed), replay writes the old page into the other
// file.
func TestAtomicJournalTruncateReuse(t *testing.T) {
	t.Parallel()
	dev, v, f := journalVolume(t, false)
	journalWrite(t, v, f, 1, 0)
	old := physOf(t, f)
	require.NoError(t, f.Truncate(0))
	require.NoError(t, f.Sync()) // the free commits: the blocks are allocatable
	g := directFile(t, v, "other", 0, 256<<10)
	q := bytes.Repeat([]byte{4}, 256<<10)
	_, err := g.WriteAt(q, 0)
	require.NoError(t, err)
	reused := false
	for _, p := range physOf(t, g) {
		reused = reused || p == old[0]
	}
	require.True(t, reused, "the test needs the other file to reuse the page's first block")
	require.NoError(t, g.Sync())
	require.Equal(t, q, crashRead(t, dev, "other", 0, len(q)))
	require.NoError(t, g.Close())
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
}

// TestAtomicJournalRemapAfter: a journalled page remapped by a later
// atomic write (its blocks freed) and a following journalled write of
// another page stay right after a crash.
func TestAtomicJournalRemapAfter(t *testing.T) {
	t.Parallel()
	dev, v, f := journalVolume(t, false)
	journalWrite(t, v, f, 1, 0)
	q := bytes.Repeat([]byte{5}, 16<<10)
	_, err := f.WriteAtomic(q, 0) // not synced since: remapped
	require.NoError(t, err)
	require.NoError(t, f.Datasync())
	r := journalWrite(t, v, f, 6, 32<<10)
	want := append(append(append([]byte(nil), q...), bytes.Repeat([]byte{0xEE}, 16<<10)...), r...)
	require.Equal(t, want, crashRead(t, dev, "db", 0, len(want)))
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
}

// TestAtomicJournalPolicy: WriteAtomic journals when the file was synced
// since its last atomic write, and remaps otherwise, so that many writes
// before one sync pay one commit, not one each.
func TestAtomicJournalPolicy(t *testing.T) {
	t.Parallel()
	_, v, f := journalVolume(t, false)
	defer v.Close()
	defer f.Close()
	page := bytes.Repeat([]byte{7}, 16<<10)
	c0 := v.Counters()
	for i := range 8 {
		_, err := f.WriteAtomic(page, int64(i)*16<<10)
		require.NoError(t, err)
	}
	c1 := v.Counters()
	require.Equal(t, c0.AtomicJournalled+1, c1.AtomicJournalled)
	require.NoError(t, f.Datasync())
	for i := range 4 {
		_, err := f.WriteAtomic(page, int64(i)*16<<10)
		require.NoError(t, err)
		require.NoError(t, f.Datasync())
	}
	require.Equal(t, c1.AtomicJournalled+4, v.Counters().AtomicJournalled)
}

// TestAtomicJournalConcurrent: journalled writes of whole pages to one
// file and to another, with readers, under -race: every page read is one
// write's, never a mix, and the end state survives a crash.
func TestAtomicJournalConcurrent(t *testing.T) {
	t.Parallel()
	dev, v, f := journalVolume(t, false)
	g := directFile(t, v, "db2", 0, 256<<10)
	_, err := g.WriteAt(bytes.Repeat([]byte{0xEE}, 256<<10), 0)
	require.NoError(t, err)
	require.NoError(t, g.Sync())
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var errs []error
	fail := func(err error) {
		errMu.Lock()
		errs = append(errs, err)
		errMu.Unlock()
	}
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			file := []*ext4io.File{f, f, g}[w]
			for k := range 20 {
				p := bytes.Repeat([]byte{byte(w*32 + k + 1)}, 16<<10)
				if _, err := file.WriteAtomic(p, int64(k%4)*16<<10); err != nil {
					fail(err)
					return
				}
				if err := file.Datasync(); err != nil {
					fail(err)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 16<<10)
		for k := range 200 {
			if _, err := f.ReadAt(buf, int64(k%4)*16<<10); err != nil {
				fail(err)
				return
			}
			if !bytes.Equal(buf, bytes.Repeat(buf[:1], len(buf))) {
				t.Errorf("a torn page read back: first byte %d, last %d", buf[0], buf[len(buf)-1])
				return
			}
		}
	}()
	wg.Wait()
	require.Empty(t, errs)
	require.Positive(t, v.Counters().AtomicJournalled)
	for _, file := range []*ext4io.File{f, g} {
		want := make([]byte, 64<<10)
		_, err := file.ReadAt(want, 0)
		require.NoError(t, err)
		require.Equal(t, want, crashRead(t, dev, filepath.Base(file.Name()), 0, len(want)))
	}
	require.NoError(t, f.Close())
	require.NoError(t, g.Close())
	require.NoError(t, v.Close())
}

// TestAtomicJournalOverwriteThenJournal: a journalled page overwritten
// in place, then another page journalled (the file synced in between), then
// a Datasync: the overwrite survives a crash. The second write's
// transaction revokes the first one's blocks (jmeta.reviseLive); without
// that, the first record is dropped unrevoked and replay puts the first
// page back.
func TestAtomicJournalOverwriteThenJournal(t *testing.T) {
	t.Parallel()
	dev, v, f := journalVolume(t, false)
	journalWrite(t, v, f, 1, 0)
	require.NoError(t, f.Datasync())
	q := bytes.Repeat([]byte{2}, 16<<10)
	_, err := f.WriteAt(q, 0)
	require.NoError(t, err)
	r := journalWrite(t, v, f, 3, 64<<10)
	require.NoError(t, f.Datasync())
	require.Equal(t, q, crashRead(t, dev, "db", 0, len(q)))
	require.Equal(t, r, crashRead(t, dev, "db", 64<<10, len(r)))
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
}

// TestAtomicJournalLinuxReplay: a crash image whose log holds a
// journalled page that never reached its home blocks (the in-place write
// was not flushed, so the crash drops it): ext4io's recovery and Linux's
// jbd2 (root, mount -o loop) both write the page home and read the new
// bytes, and e2fsck -fn calls the image clean after each.
func TestAtomicJournalLinuxReplay(t *testing.T) {
	t.Parallel()
	dev, v, f := journalVolume(t, false)
	p := journalWrite(t, v, f, 9, 64<<10)
	img, err := dev.Crash(errordev.CrashOptions{KeepProb: 0})
	require.NoError(t, err)
	home := make([]byte, len(p))
	_, err = img.ReadAt(home, int64(physOf(t, f)[16])*4096)
	require.NoError(t, err)
	require.Equal(t, bytes.Repeat([]byte{0xEE}, len(p)), home, "the test needs the page's home blocks to hold the old bytes")
	want := bytes.Repeat([]byte{0xEE}, 256<<10)
	copy(want[64<<10:], p)
	if os.Geteuid() == 0 && !testing.Short() {
		path := filepath.Join(t.TempDir(), "crash.img")
		saveDev(t, img, path)
		linuxReads(t, path, []string{"db"}, [][]byte{want})
	} else {
		t.Log("not root or -short: Linux's replay is not checked")
	}
	require.Equal(t, want, crashRead(t, dev, "db", 0, len(want)))
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
}

// TestAtomicJournalVolumeSync: an overwrite of a journalled page made
// durable by Volume.Sync survives a crash (Sync revokes every live
// record's blocks); without the revoke, replay puts the page back.
func TestAtomicJournalVolumeSync(t *testing.T) {
	t.Parallel()
	dev, v, f := journalVolume(t, false)
	journalWrite(t, v, f, 1, 0)
	q := bytes.Repeat([]byte{2}, 16<<10)
	_, err := f.WriteAt(q, 0)
	require.NoError(t, err)
	require.NoError(t, v.Sync())
	require.Equal(t, q, crashRead(t, dev, "db", 0, len(q)))
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
}

// TestAtomicJournalFastCommits: on a volume with fast commits, fast
// commits written before and after a journalled write (which commits in
// full) stay replayable, and the journalled page survives with them.
func TestAtomicJournalFastCommits(t *testing.T) {
	t.Parallel()
	dev, v, f := journalVolume(t, true)
	g := directFile(t, v, "log", 0, 64<<10)
	require.NoError(t, g.Sync())
	put := func(b byte, off int64) []byte {
		q := bytes.Repeat([]byte{b}, 4096)
		_, err := g.WriteAt(q, off)
		require.NoError(t, err)
		require.NoError(t, g.Datasync())
		return q
	}
	fc0 := v.Counters().FastCommits
	a := put(1, 64<<10) // extends the file: a fast commit
	p := journalWrite(t, v, f, 2, 0)
	b := put(3, 68<<10)
	require.Greater(t, v.Counters().FastCommits, fc0+1, "the test needs fast commits")
	require.Equal(t, p, crashRead(t, dev, "db", 0, len(p)))
	require.Equal(t, append(a, b...), crashRead(t, dev, "log", 64<<10, 8192))
	require.NoError(t, g.Close())
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
}

// ajCountDev counts a device's writes, reads and flushes.
type ajCountDev struct {
	blockdev.Device
	w, r, f atomic.Int64
}

func (d *ajCountDev) WriteAt(p []byte, off int64) (int, error) {
	d.w.Add(1)
	return d.Device.WriteAt(p, off)
}

func (d *ajCountDev) ReadAt(p []byte, off int64) (int, error) {
	d.r.Add(1)
	return d.Device.ReadAt(p, off)
}

func (d *ajCountDev) Flush() error {
	d.f.Add(1)
	return d.Device.Flush()
}

// TestAtomicJournalDeviceOps counts the device operations of a
// journalled 16 KiB page and the Datasync after it: one log write (revoke
// block, descriptor and data), a flush, the commit block, a flush, the
// page in place; the Datasync then issues nothing, as the write changed
// nothing since its commit (inode.jclean). After a plain overwrite of
// the page, Datasync must do its work again (a revoke commit).
func TestAtomicJournalDeviceOps(t *testing.T) {
	t.Parallel()
	dev := &ajCountDev{Device: memdev.New(64 << 20)}
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{NoDiscard: true}))
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, CommitInterval: -1})
	require.NoError(t, err)
	defer v.Close()
	f := directFile(t, v, "db", 0, 256<<10)
	defer f.Close()
	_, err = f.WriteAt(bytes.Repeat([]byte{0xEE}, 256<<10), 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	for i := range 3 {
		w0, r0, f0 := dev.w.Load(), dev.r.Load(), dev.f.Load()
		journalWrite(t, v, f, byte(i+1), int64(i)*16<<10)
		require.NoError(t, f.Datasync())
		ext4io.WaitHomeWrites(v) // the page in place, in the background
		require.Equal(t, [3]int64{3, 0, 2}, [3]int64{dev.w.Load() - w0, dev.r.Load() - r0, dev.f.Load() - f0},
			"writes, reads, flushes of a journalled page and Datasync")
	}
	// The first pages' copies were revoked by the next journalled writes:
	// an overwrite of one needs a flush only. The last page's copy is
	// live: an overwrite of it needs the revoke committed.
	for _, c := range []struct {
		off     int64
		flushes int64
	}{{0, 1}, {2 * 16 << 10, 2}} {
		_, err = f.WriteAt(bytes.Repeat([]byte{9}, 4096), c.off)
		require.NoError(t, err)
		f0 := dev.f.Load()
		require.NoError(t, f.Datasync())
		require.Equal(t, c.flushes, dev.f.Load()-f0, "flushes of a Datasync after an overwrite at %d", c.off)
	}
}

// TestAtomicJournalDatasyncCommitsXattr: a Datasync after a journalled
// write and an extended attribute change (no data change) still commits
// the attribute, as every Datasync commits what is pending: the shortcut
// that skips a Datasync after a journalled write applies only when
// nothing is pending or committing (the torture found the attribute
// lost without that condition).
func TestAtomicJournalDatasyncCommitsXattr(t *testing.T) {
	t.Parallel()
	dev, v, f := journalVolume(t, false)
	journalWrite(t, v, f, 1, 0)
	val := bytes.Repeat([]byte{'x'}, 283)
	require.NoError(t, f.Setxattr("user.a1", val, 0))
	require.NoError(t, f.Datasync())
	img, err := dev.Crash(errordev.CrashOptions{KeepProb: 0})
	require.NoError(t, err)
	cv, err := ext4io.Open(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	got, err := cv.Getxattr("db", "user.a1")
	require.NoError(t, err)
	require.Equal(t, val, got)
	require.NoError(t, cv.Close())
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
}

// TestAtomicJournalPageCopyReused: a journalled 16 KiB WriteAtomic and a
// Datasync after it allocate less than the page: the copy the journal,
// the write in place and the live record share is reused once all three
// are done with it, rather than allocated per write.
func TestAtomicJournalPageCopyReused(t *testing.T) {
	if testing.Short() {
		t.Skip("measures allocations over 1,500 writes")
	}
	const page, pages = 16 << 10, 64
	dev := memdev.New(64 << 20)
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{NoDiscard: true}))
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	require.NoError(t, err)
	defer v.Close()
	f := directFile(t, v, "db", ext4io.FallocWriteZeroes, page*pages)
	defer f.Close()
	buf := bytes.Repeat([]byte{7}, page)
	write := func(i int) {
		_, err := f.WriteAtomic(buf, int64(i*7%pages)*page)
		require.NoError(t, err)
		require.NoError(t, f.Datasync())
	}
	// Warm up: the device's memory for the whole log, the pools.
	for i := range 1000 {
		write(i)
	}
	const n = 500
	c0 := v.Counters().AtomicJournalled
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for i := range n {
		write(i)
	}
	runtime.ReadMemStats(&m1)
	require.Equal(t, c0+n, v.Counters().AtomicJournalled, "not every write was journalled")
	per := (m1.TotalAlloc - m0.TotalAlloc) / n
	t.Logf("%d bytes allocated per write", per)
	require.Less(t, per, uint64(page), "each write allocates a page or more")
}

// slowPageDev delays every write of 16 KiB (a page written in place), so
// that the write in place of a journalled page is still in flight when
// the file's next one begins.
type slowPageDev struct{ *memdev.Device }

func (d slowPageDev) WriteAt(p []byte, off int64) (int, error) {
	if len(p) == 16<<10 {
		time.Sleep(100 * time.Microsecond)
	}
	return d.Device.WriteAt(p, off)
}

// TestAtomicJournalPageCopyStress: journalled pages of two files written
// by two goroutines, with plain overwrites and Volume.Syncs among them,
// then by one alone, on
// a small journal that checkpoints often and a device that is slow to
// write pages in place: every page reads its last contents, before and
// after a reopen (replay), so no reused page copy reaches a block while
// the journal or a write in place still used it.
func TestAtomicJournalPageCopyStress(t *testing.T) {
	t.Parallel()
	const page, pages = 16 << 10, 16
	mem := memdev.New(64 << 20)
	require.NoError(t, ext4io.Format(mem, ext4io.FormatOptions{NoDiscard: true, JournalBlocks: 1024}))
	dev := slowPageDev{mem}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	require.NoError(t, err)
	names := []string{"a", "b"}
	want := make([][]byte, len(names))
	var wg sync.WaitGroup
	for w, name := range names {
		f := directFile(t, v, name, ext4io.FallocWriteZeroes, page*pages)
		want[w] = make([]byte, page*pages)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer f.Close()
			for i := range 600 {
				off := int64((i*5+w)%pages) * page
				p := bytes.Repeat([]byte{byte(i*2 + w + 1)}, page)
				var err error
				switch i % 10 {
				case 3:
					_, err = f.WriteAt(p, off)
				case 7:
					err = v.Sync()
				}
				if err == nil {
					_, err = f.WriteAtomic(p, off)
				}
				if err == nil {
					err = f.Datasync()
				}
				if err != nil {
					t.Error(err)
					return
				}
				copy(want[w][off:], p)
			}
		}()
	}
	wg.Wait()
	// One writer alone: its Datasyncs take the shortcut, so the next
	// page's copy is made while the last one's write in place is in
	// flight.
	f, err := v.OpenFile(names[0], os.O_RDWR, 0)
	require.NoError(t, err)
	for i := range 300 {
		off := int64(i*3%pages) * page
		p := bytes.Repeat([]byte{byte(i + 1)}, page)
		_, err := f.WriteAtomic(p, off)
		require.NoError(t, err)
		require.NoError(t, f.Datasync())
		copy(want[0][off:], p)
	}
	require.NoError(t, f.Close())
	check := func(v *ext4io.Volume) {
		for w, name := range names {
			got, err := v.ReadFile(name)
			require.NoError(t, err)
			require.True(t, bytes.Equal(want[w], got), "%s: first difference at %d", name, firstDiff(want[w], got))
		}
	}
	check(v)
	require.Greater(t, v.Counters().JournalCheckpoints, uint64(2))
	require.NoError(t, v.Close())
	v, err = ext4io.Open(dev, ext4io.Options{Writable: true})
	require.NoError(t, err)
	check(v)
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, mem)
}
