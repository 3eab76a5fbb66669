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
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/stretchr/testify/require"
)

// TestDelallocFullVolume: buffered writes reserve their blocks, so a
// volume filled by buffered writes fails them with ErrNoSpace at write
// time, never at write-back: Sync and Close succeed, every byte accepted is
// on disk, and e2fsck is clean.
func TestDelallocFullVolume(t *testing.T) {
	t.Parallel()
	for _, cache := range []int64{0, 64 << 10} { // default; tiny (write-back under pressure)
		t.Run(fmt.Sprintf("cache%d", cache), func(t *testing.T) {
			img := formatImage(t, 16<<20, ext4io.FormatOptions{BlockSize: 1024})
			v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true, PageCacheBytes: cache, WritebackAge: -1, CommitInterval: -1})
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(1, 2))
			want := map[string][]byte{}
			full := false
			for i := 0; !full; i++ {
				name := fmt.Sprintf("f%d", i)
				f, err := v.Create(name)
				if err != nil {
					if errors.Is(err, ext4io.ErrNoSpace) {
						break
					}
					t.Fatal(err)
				}
				var data []byte
				for len(data) < 3<<20 {
					chunk := make([]byte, 1+rng.IntN(70_000))
					for j := range chunk {
						chunk[j] = byte(rng.Uint32()) | 1
					}
					n, err := f.WriteAt(chunk, int64(len(data)))
					data = append(data, chunk[:n]...)
					if errors.Is(err, ext4io.ErrNoSpace) {
						full = true
						break
					}
					require.NoError(t, err)
				}
				want[name] = data
			}
			if !full {
				t.Fatal("the volume never filled")
			}
			if c := v.Counters(); c.ReservedBlocks == 0 && cache == 0 {
				t.Fatalf("nothing reserved before write-back: %+v", c)
			}
			if err := v.Sync(); err != nil {
				t.Fatalf("write-back on a full volume: %v", err)
			}
			if c := v.Counters(); c.ReservedBlocks != 0 || c.DelallocBlocks == 0 {
				t.Fatalf("after Sync: %+v; want every reservation allocated", c)
			}
			require.NoError(t, v.Close())
			e2fs.Fsck(t, img)
			ro, err := ext4io.OpenImage(img, ext4io.Options{})
			require.NoError(t, err)
			defer ro.Close()
			checkSynced(t, ro, want)
			t.Logf("%d files, %d free blocks left", len(want), ro.Superblock().FreeBlocksCount)
		})
	}
}

// TestDelallocReservations: reservations of delayed blocks are released by
// truncate, punch-hole, zero-range, write-zeroes and unlink, and nothing
// leaks: after Close the free block count equals the one e2fsck computes
// and the counts before the writes, less the blocks still mapped.
func TestDelallocReservations(t *testing.T) {
	img := formatImage(t, 64<<20, ext4io.FormatOptions{})
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
	require.NoError(t, err)
	data := bytes.Repeat([]byte("delalloc"), 1<<17) // 1 MiB: 256 blocks
	reserved := func() uint64 { return v.Counters().ReservedBlocks }
	steps := []struct {
		name string
		do   func(f *ext4io.File) error
		left uint64 // blocks still reserved for the file
	}{
		{"truncate", func(f *ext4io.File) error { return f.Truncate(100*4096 + 10) }, 101},
		{"punch", func(f *ext4io.File) error { return f.Fallocate(ext4io.FallocPunchHole, 10*4096, 100*4096) }, 156},
		{"zero-range", func(f *ext4io.File) error { return f.Fallocate(ext4io.FallocZeroRange, 4096+1, 50*4096) }, 207},
		{"write-zeroes", func(f *ext4io.File) error { return f.Fallocate(ext4io.FallocWriteZeroes, 0, 1<<20) }, 0},
		{"unlink", nil, 256}, // while open: an orphan, released at Close
	}
	for i, s := range steps {
		name := fmt.Sprintf("%s-%d", s.name, i)
		f, err := v.Create(name)
		require.NoError(t, err)
		if _, err := f.WriteAt(data, 0); err != nil {
			t.Fatal(err)
		}
		if got := reserved(); got != 256 {
			t.Fatalf("%s: %d blocks reserved after a 1 MiB buffered write; want 256", s.name, got)
		}
		do := s.do
		if do == nil {
			do = func(*ext4io.File) error { return v.Unlink(name) }
		}
		if err := do(f); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := reserved(); got != s.left {
			t.Fatalf("%s: %d blocks still reserved; want %d", s.name, got, s.left)
		}
		require.NoError(t, f.Close())
		if err := v.Sync(); err != nil {
			t.Fatal(err)
		}
		if got := reserved(); got != 0 {
			t.Fatalf("%s: %d blocks reserved after Sync", s.name, got)
		}
	}
	require.NoError(t, v.Close())
	e2fs.Fsck(t, img)
}

// TestDelallocSizeOnDisk: an extending buffered write moves i_size at
// once but the on-disk size only when the data is written back; a crash
// (here: reading the image while the volume is still open) never sees a
// size covering blocks that are not on disk.
func TestDelallocSizeOnDisk(t *testing.T) {
	img := formatImage(t, 32<<20, ext4io.FormatOptions{})
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
	require.NoError(t, err)
	defer v.Close()
	f, err := v.Create("grow")
	require.NoError(t, err)
	first := bytes.Repeat([]byte{1}, 10000)
	if _, err := f.WriteAt(first, 0); err != nil {
		t.Fatal(err)
	}
	require.NoError(t, f.Sync())
	if _, err := f.WriteAt(bytes.Repeat([]byte{2}, 50000), 10000); err != nil {
		t.Fatal(err)
	}
	if f.Size() != 60000 {
		t.Fatalf("size %d after the extending write; want 60000", f.Size())
	}
	// Commit metadata (other changes) without writing this file back: the
	// on-disk size must stay at the synced 10000.
	g, err := v.Create("other")
	require.NoError(t, err)
	require.NoError(t, g.Sync())
	ro, err := ext4io.OpenImage(img, ext4io.Options{})
	require.NoError(t, err)
	fi, err := ro.Stat("grow")
	require.NoError(t, err)
	if fi.Size() != 10000 {
		t.Fatalf("on-disk size %d before write-back; want 10000", fi.Size())
	}
	checkSynced(t, ro, map[string][]byte{"grow": first})
	ro.Close()
	require.NoError(t, f.Sync())
	ro, err = ext4io.OpenImage(img, ext4io.Options{})
	require.NoError(t, err)
	defer ro.Close()
	want := append(first, bytes.Repeat([]byte{2}, 50000)...)
	checkSynced(t, ro, map[string][]byte{"grow": want})
}

// TestSyncFlushesOverwrites: Sync after buffered overwrites of allocated
// blocks, which change no metadata (nothing to commit), must still flush
// the device: a crash right after Sync keeps the new data. (Found by the
// torture harness: the journal's Sync returned early with no transaction
// to commit, so nothing flushed the written-back data.)
func TestSyncFlushesOverwrites(t *testing.T) {
	v, dev := crashableVolume(t)
	defer v.Close()
	f, err := v.Create("f")
	require.NoError(t, err)
	if _, err := f.WriteAt(bytes.Repeat([]byte{1}, 64<<10), 0); err != nil {
		t.Fatal(err)
	}
	require.NoError(t, v.Sync())
	want := bytes.Repeat([]byte{1}, 64<<10)
	copy(want[8192:], bytes.Repeat([]byte{2}, 4096))
	if _, err := f.WriteAt(want[8192:12288], 8192); err != nil {
		t.Fatal(err)
	}
	// Write the inode and commit it, so that the write-back below finds no
	// metadata to commit.
	require.NoError(t, f.Truncate(64<<10))
	g, err := v.Create("g")
	require.NoError(t, err)
	require.NoError(t, g.Sync())
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	checkAfterCrash(t, dev, 1, map[string][]byte{"f": want})
}

// TestWriteZeroesInsideDelayedSize: write-zeroes inside i_size but past
// the on-disk size (an extending buffered write not yet written back)
// allocates written blocks, so the on-disk size must move to cover them
// in the same transaction; a crash after it commits leaves an image
// e2fsck accepts. (Found by the torture harness: "i_size is 0, should be
// 262144".)
func TestWriteZeroesInsideDelayedSize(t *testing.T) {
	v, dev := crashableVolume(t)
	defer v.Close()
	f, err := v.Create("f")
	require.NoError(t, err)
	if _, err := f.WriteAt([]byte("tail"), 160000); err != nil { // delayed, size 160004 in memory only
		t.Fatal(err)
	}
	require.NoError(t, f.Fallocate(ext4io.FallocWriteZeroes, 3000, 30000))
	g, err := v.Create("g") // commit the journal without writing f back
	require.NoError(t, err)
	require.NoError(t, g.Sync())
	img, err := dev.Crash(errordev.CrashOptions{Seed: 2})
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "crashed.img")
	saveDev(t, img, path)
	exec.Command(e2fs.Tool(t, "e2fsck"), "-E", "journal_only", "-y", path).Run()
	e2fs.Fsck(t, path)
}

// TestFreedInodeNotRewritten: files with delayed extending writes are
// deleted while Volume.Sync runs, and their inode numbers are reused by
// new directories at once; a sync that looked up a deleted inode must
// never write its old state over the new one. (Found by the torture
// harness: "Entry 'd12' has deleted/unused inode".)
func TestFreedInodeNotRewritten(t *testing.T) {
	t.Parallel()
	img := formatImage(t, 64<<20, ext4io.FormatOptions{})
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
	require.NoError(t, err)
	stop := make(chan struct{})
	syncErr := make(chan error, 1)
	go func() {
		var err error
		for {
			select {
			case <-stop:
				syncErr <- err
				return
			default:
			}
			if e := v.Sync(); e != nil && err == nil {
				err = e
			}
		}
	}()
	for i := 0; i < 300; i++ {
		name := fmt.Sprintf("f%d", i)
		f, err := v.Create(name)
		require.NoError(t, err)
		if _, err := f.WriteAt([]byte("x"), int64(i)*100); err != nil {
			t.Fatal(err)
		}
		require.NoError(t, v.Unlink(name))
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		require.NoError(t, v.Mkdir(fmt.Sprintf("d%d", i), 0o755))
	}
	close(stop)
	require.NoError(t, <-syncErr)
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	e2fs.Fsck(t, img)
}

// TestConversionKeepsDelayedNeighbours: converting unwritten blocks drops
// the cached mappings of neighbours a zero-out may have converted, but
// must keep a neighbouring Delayed range (it exists only in the cache):
// otherwise its dirty page is written back as if over a hole, outside the
// reservation, which leaks and fails with ENOSPC on a full volume. (Found
// by a 23-minute torture run: "allocating 1 blocks for write-back ... no
// space left on device".)
func TestConversionKeepsDelayedNeighbours(t *testing.T) {
	img := formatImage(t, 32<<20, ext4io.FormatOptions{})
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
	require.NoError(t, err)
	f, err := v.Create("f")
	require.NoError(t, err)
	if err := f.Fallocate(ext4io.FallocKeepSize, 6*4096, 10*4096); err != nil { // unwritten 6..15
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{7}, 4096), 5*4096); err != nil { // delayed 5
		t.Fatal(err)
	}
	if got := v.Counters().ReservedBlocks; got != 1 {
		t.Fatalf("%d blocks reserved; want 1", got)
	}
	if err := f.Fallocate(ext4io.FallocWriteZeroes, 8*4096, 4096); err != nil { // converts block 8
		t.Fatal(err)
	}
	before := v.Counters().DelallocBlocks
	require.NoError(t, f.Sync())
	c := v.Counters()
	if c.ReservedBlocks != 0 || c.DelallocBlocks-before != 1 {
		t.Fatalf("after write-back: %d blocks still reserved, %d allocated from the reservation; want 0 and 1",
			c.ReservedBlocks, c.DelallocBlocks-before)
	}
	require.NoError(t, v.Close())
	e2fs.Fsck(t, img)
}

// TestNoSpaceRetriesAfterCommit: blocks freed by a transaction that has
// not committed are not allocatable yet (busy), so a write that needs them
// commits the journal and retries instead of failing with ErrNoSpace
// (ext4_should_retry_alloc). Found by `ext4io bench`, whose sequential
// write workload deletes and recreates its 1 GiB file.
func TestNoSpaceRetriesAfterCommit(t *testing.T) {
	t.Parallel()
	img := formatImage(t, 32<<20, ext4io.FormatOptions{ReservedPercent: -1})
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
	require.NoError(t, err)
	defer v.Close()
	chunk := make([]byte, 1<<20)
	fill := func(name string, direct bool) int64 {
		t.Helper()
		f, err := v.Create(name)
		require.NoError(t, err)
		if direct {
			f.Close()
			if f, err = v.OpenFile(name, os.O_RDWR|ext4io.O_DIRECT, 0); err != nil {
				t.Fatal(err)
			}
		}
		defer f.Close()
		var off int64
		for {
			n, err := f.WriteAt(chunk, off)
			off += int64(n)
			if errors.Is(err, ext4io.ErrNoSpace) {
				return off
			}
			require.NoError(t, err)
		}
	}
	for _, direct := range []bool{true, false} {
		first := fill("a", direct)
		require.NoError(t, v.Sync())
		if err := v.Unlink("a"); err != nil { // frees everything, uncommitted
			t.Fatal(err)
		}
		if second := fill("b", direct); second < first*9/10 {
			t.Fatalf("direct=%v: %d bytes fit after deleting a %d-byte file; the freed blocks were not reused", direct, second, first)
		}
		require.NoError(t, v.Sync())
		if err := v.Unlink("b"); err != nil {
			t.Fatal(err)
		}
		require.NoError(t, v.Sync())
	}
}

// checkAfterCrash crashes dev (losing what was not flushed, with seed)
// and checks that the synced files read back as given.
func checkAfterCrash(t *testing.T, dev *errordev.Crashable, seed uint64, synced map[string][]byte) {
	t.Helper()
	ro := openCrashed(t, dev, seed)
	defer ro.Close()
	checkSynced(t, ro, synced)
}

// openCrashed opens, read-only, the image a crash of dev would leave.
func openCrashed(t *testing.T, dev *errordev.Crashable, seed uint64) *ext4io.Volume {
	t.Helper()
	img, err := dev.Crash(errordev.CrashOptions{Seed: seed})
	require.NoError(t, err)
	ro, err := ext4io.Open(img, ext4io.Options{})
	require.NoError(t, err)
	return ro
}

// crashableVolume formats a 32 MiB in-memory device and opens it writable
// (no background write-back) behind a Crashable that can take the image a
// crash would leave.
func crashableVolume(t *testing.T) (*ext4io.Volume, *errordev.Crashable) {
	t.Helper()
	base := memdev.NewBlockSize(32<<20, 4096)
	require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{}))
	dev, err := errordev.NewCrashable(base)
	require.NoError(t, err)
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
	require.NoError(t, err)
	return v, dev
}

// TestDatasync: Datasync after direct overwrites commits nothing (the
// times-only inode change waits for Sync), while the data, a buffered
// extension with its size and a write into preallocated space all survive
// a crash right after it.
func TestDatasync(t *testing.T) {
	v, dev := crashableVolume(t)
	defer v.Close()
	f, err := v.Create("f")
	require.NoError(t, err)
	want := bytes.Repeat([]byte{1}, 64<<10)
	if _, err := f.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	require.NoError(t, f.Fallocate(ext4io.FallocAllocate, 64<<10, 64<<10))
	want = append(want, make([]byte, 64<<10)...)
	require.NoError(t, f.Sync())
	d, err := v.OpenFile("f", os.O_RDWR|ext4io.O_DIRECT, 0)
	require.NoError(t, err)
	over := bytes.Repeat([]byte{2}, 4096)
	if _, err := d.WriteAt(over, 8192); err != nil {
		t.Fatal(err)
	}
	copy(want[8192:], over)
	before := v.Counters()
	require.NoError(t, d.Datasync())
	after := v.Counters()
	if after.MetaUpdates != before.MetaUpdates || after.JournalCommits != before.JournalCommits {
		t.Errorf("Datasync after an overwrite: %d metadata updates, %d commits; want none",
			after.MetaUpdates-before.MetaUpdates, after.JournalCommits-before.JournalCommits)
	}
	require.NoError(t, f.Sync())
	if c := v.Counters(); c.MetaUpdates == after.MetaUpdates || c.JournalCommits == after.JournalCommits {
		t.Error("Sync after Datasync wrote and committed no inode (the times were left for it)")
	}
	// Into preallocated space (a conversion), and a buffered extension.
	if _, err := d.WriteAt(over, 80<<10); err != nil {
		t.Fatal(err)
	}
	copy(want[80<<10:], over)
	tail := []byte("buffered tail")
	if _, err := f.WriteAt(tail, 200000); err != nil {
		t.Fatal(err)
	}
	want = append(want, make([]byte, 200000-len(want))...)
	want = append(want, tail...)
	require.NoError(t, f.Datasync())
	checkAfterCrash(t, dev, 3, map[string][]byte{"f": want})
}

// TestSharedWriteTimes: a direct overwrite under the shared inode lock
// changes no metadata, yet Stat shows its mtime at once, a later exclusive
// operation's time is not replaced by the older pending one, and Sync
// makes the time durable (checked on a crashed copy of the device).
func TestSharedWriteTimes(t *testing.T) {
	v, dev := crashableVolume(t)
	defer v.Close()
	f, err := v.Create("f")
	require.NoError(t, err)
	require.NoError(t, f.Fallocate(ext4io.FallocWriteZeroes, 0, 64<<10))
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	d, err := v.OpenFile("f", os.O_RDWR|ext4io.O_DIRECT, 0)
	require.NoError(t, err)
	mtime := func() time.Time {
		t.Helper()
		fi, err := v.Stat("f")
		require.NoError(t, err)
		return fi.Mtime
	}
	buf := bytes.Repeat([]byte{7}, 4096)
	overwrite := func() time.Time {
		t.Helper()
		time.Sleep(2 * time.Millisecond)
		start := time.Now()
		before := v.Counters()
		if _, err := d.WriteAt(buf, 8192); err != nil {
			t.Fatal(err)
		}
		if c := v.Counters(); c.Overwrites != before.Overwrites+1 || c.MetaUpdates != before.MetaUpdates {
			t.Fatalf("not a metadata-free overwrite: %+v then %+v", before, c)
		}
		return start
	}
	// A directory listing shows the pending time too.
	start := overwrite()
	ents, err := fs.ReadDir(v.FS(), ".")
	require.NoError(t, err)
	for _, e := range ents {
		if fi, err := e.Info(); err != nil {
			t.Fatal(err)
		} else if e.Name() == "f" && fi.ModTime().Before(start) {
			t.Fatalf("DirEntry.Info: mtime %v after an overwrite started at %v", fi.ModTime(), start)
		}
	}
	if start, m := overwrite(), mtime(); m.Before(start) {
		t.Fatalf("mtime %v after an overwrite started at %v", m, start)
	}
	// A buffered write (exclusive lock, no inode write) after a shared
	// one: its time wins.
	overwrite()
	time.Sleep(2 * time.Millisecond)
	later := time.Now()
	if _, err := f.WriteAt([]byte("x"), 100<<10); err != nil {
		t.Fatal(err)
	}
	if m := mtime(); m.Before(later) {
		t.Fatalf("mtime %v went back before the buffered write at %v", m, later)
	}
	// Sync writes the time of an overwrite nothing else has looked at.
	last := overwrite()
	require.NoError(t, f.Sync())
	ro := openCrashed(t, dev, 1)
	defer ro.Close()
	fi, err := ro.Stat("f")
	require.NoError(t, err)
	if fi.Mtime.Before(last) || fi.Ctime.Before(last) {
		t.Fatalf("after Sync and a crash: mtime %v ctime %v, want at least %v", fi.Mtime, fi.Ctime, last)
	}
}

// TestSharedWriteTimeBounds checks the times of shared-lock overwrites
// (touchclock.go) from both sides: under 4 writers and a reader calling
// Stat, a file's mtime is never before the start of a write that completed
// before the Stat began; and a time applied long after the write (a Stat
// 200 ms later) is the write's epoch end, not the Stat's time.
func TestSharedWriteTimeBounds(t *testing.T) {
	v, _ := crashableVolume(t)
	defer v.Close()
	d := directFile(t, v, "f", ext4io.FallocWriteZeroes, 1<<20)
	var done atomic.Int64 // the latest start of a completed write, Unix ns
	var stop atomic.Bool
	var wg sync.WaitGroup
	errc := make(chan error, 5)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4096)
			for i := 0; !stop.Load(); i++ {
				start := time.Now().UnixNano()
				if _, err := d.WriteAt(buf, int64((w*64+i%64)*4096)); err != nil {
					errc <- err
					return
				}
				for old := done.Load(); old < start && !done.CompareAndSwap(old, start); old = done.Load() {
				}
				if i%64 == 0 {
					time.Sleep(time.Duration(w) * time.Millisecond) // let epochs end with and without writes
				}
			}
		}()
	}
	deadline := time.Now().Add(300 * time.Millisecond)
	for n := 0; time.Now().Before(deadline); n++ {
		before := done.Load()
		fi, err := v.Stat("f")
		require.NoError(t, err)
		if m := fi.Mtime.UnixNano(); m < before {
			t.Fatalf("Stat %d: mtime %v before the start %v of a write that had completed", n, fi.Mtime, time.Unix(0, before))
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := d.WriteAt(make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	end := time.Now()
	time.Sleep(200 * time.Millisecond)
	fi, err := v.Stat("f")
	require.NoError(t, err)
	if fi.Mtime.Before(start) || fi.Mtime.After(end.Add(100*time.Millisecond)) {
		t.Fatalf("mtime %v for a write in [%v, %v] applied 200 ms later: want within the write's epoch", fi.Mtime, start, end)
	}
}

// readCounter counts a device's reads.
type readCounter struct {
	*memdev.Device
	reads atomic.Int64
}

func (d *readCounter) ReadAt(p []byte, off int64) (int, error) {
	d.reads.Add(1)
	return d.Device.ReadAt(p, off)
}

// TestDirectReadCachedFile: a file opened Direct reads as O_DIRECT does
// even when its buffered writes left pages in the cache: dirty pages in
// the range are written back first, and the data comes from the device,
// not from the pages.
func TestDirectReadCachedFile(t *testing.T) {
	dev := &readCounter{Device: memdev.NewBlockSize(64<<20, 4096)}
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{}))
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
	require.NoError(t, err)
	defer v.Close()
	f, err := v.Create("f")
	require.NoError(t, err)
	defer f.Close()
	data := bytes.Repeat([]byte("cached pages "), 10000)[:64<<10]
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	d, err := v.OpenFile("f", os.O_RDWR|ext4io.O_DIRECT, 0)
	require.NoError(t, err)
	defer d.Close()
	read := func(off int64, what string) {
		t.Helper()
		buf := make([]byte, 4096)
		before := dev.reads.Load()
		if _, err := d.ReadAt(buf, off); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf, data[off:off+4096]) {
			t.Fatalf("%s: direct read at %d returned other bytes", what, off)
		}
		if dev.reads.Load() == before {
			t.Fatalf("%s: direct read at %d did not read the device", what, off)
		}
	}
	read(8<<10, "dirty pages") // written back by the read
	require.NoError(t, f.Sync())
	read(32<<10, "clean pages")
	// A buffered write after that is seen by the next direct read.
	copy(data[40<<10:], bytes.Repeat([]byte{0xa5}, 4096))
	if _, err := f.WriteAt(data[40<<10:44<<10], 40<<10); err != nil {
		t.Fatal(err)
	}
	read(40<<10, "rewritten page")
}
