package iomap_test

// Tests of the PageCache options and helpers added for filesystems whose
// write-back takes locks: NoInlineWriteback with WritebackOldest,
// NoReadCache, WritebackLocker, and ZeroCached/Dirty/Cached.
//
// This file is in package iomap_test (not iomap) like the other test files
// of the package, because the tinyFS test filesystem it reuses lives there.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/iomap"
)

// optData returns n bytes of seeded data that are never zero, so missing
// data and missing zeroing both show.
func optData(seed uint64, n int64) []byte {
	r := rand.New(rand.NewPCG(seed, 77))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32()) | 1
	}
	return b
}

// firstDiff describes the first byte where got and want differ.
func firstDiff(got, want []byte) string {
	if len(got) != len(want) {
		return fmt.Sprintf("length %d, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Sprintf("byte %d = %#x, want %#x", i, got[i], want[i])
		}
	}
	return "equal"
}

// readFresh reads [0, size) of key through a new, unbounded cache over dev,
// so it sees only what reached the device.
func readFresh(t *testing.T, dev *memdev.Device, ops iomap.Ops, key iomap.Key, size, bs int64) []byte {
	t.Helper()
	c, err := iomap.NewPageCache(dev, iomap.PageCacheOptions{PageSize: int(bs), MaxPages: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, size)
	if n, err := iomap.BufferedRead(c, ops, key, buf, 0, size); err != nil || int64(n) != size {
		t.Fatalf("fresh read of %d bytes: %d, %v", size, n, err)
	}
	return buf
}

// callCache runs f (a call into the PageCache made from inside an Ops or
// unlock callback) with a deadline, so that a PageCache that holds its own
// lock across the callback makes the test fail instead of hang.
func callCache(f func() int) (int, bool) {
	ch := make(chan int, 1)
	go func() { ch <- f() }()
	select {
	case n := <-ch:
		return n, true
	case <-time.After(2 * time.Second):
		return 0, false
	}
}

// wbGuard wraps tinyFS and counts Begin(Writeback) calls made while the
// test did not allow write-back (inline write-back inside a request).
type wbGuard struct {
	*tinyFS
	allow  atomic.Bool
	inline atomic.Int32
}

func (g *wbGuard) Begin(off, length int64, flags iomap.Flags) (iomap.Mapping, error) {
	if flags&iomap.Writeback != 0 && !g.allow.Load() {
		g.inline.Add(1)
	}
	return g.tinyFS.Begin(off, length, flags)
}

// A NoInlineWriteback cache fails a write that needs a page when every page
// is dirty with ErrCacheFull and the bytes done, never writing back inside
// the request; WritebackOldest frees the oldest dirty cluster, a retry
// makes progress, and after Sync the device holds the whole write.
func TestNoInlineWriteback(t *testing.T) {
	const maxPages = 4
	for _, tc := range []struct {
		name     string
		bs       int64
		maxRun   int // pages per write-back run; 0 = default (1 MiB)
		off, n   int64
		readPage int64 // an uncached, written page read while the cache is full of dirty pages
	}{
		{name: "aligned", bs: 4096, off: 0, n: 10 * 4096, readPage: 8},
		{name: "unaligned", bs: 4096, off: 100, n: 9*4096 + 777, readPage: 8},
		{name: "bs1024-run2", bs: 1024, maxRun: 2, off: 1000, n: 12*1024 + 3, readPage: 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bs := tc.bs
			dev := patternDev(t, 1<<20)
			fs := &wbGuard{tinyFS: newTinyFS(bs, 0, (1<<20)/bs)}
			c, err := iomap.NewPageCache(dev, iomap.PageCacheOptions{PageSize: int(bs), MaxPages: maxPages,
				MaxRunBytes: tc.maxRun * int(bs), NoInlineWriteback: true})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			maxRun := tc.maxRun
			if maxRun == 0 {
				maxRun = (1 << 20) / int(bs)
			}
			if ok, err := c.WritebackOldest(); ok || err != nil {
				t.Fatalf("WritebackOldest on an empty cache: %v, %v; want false, nil", ok, err)
			}

			const key = 1
			data := optData(1, tc.n)
			var done int64
			var size int64 // file size before each call
			fulls := 0
			for calls := 0; done < tc.n; calls++ {
				if calls > 100 {
					t.Fatalf("no end after %d calls, %d of %d bytes written", calls, done, tc.n)
				}
				n, err := iomap.BufferedWrite(c, fs, key, data[done:], tc.off+done, size)
				if n < 0 || int64(n) > tc.n-done {
					t.Fatalf("call %d: wrote %d of %d remaining", calls, n, tc.n-done)
				}
				if calls == 0 && err != nil {
					// The empty cache takes maxPages pages, then fails.
					if want := maxPages*bs - tc.off; int64(n) != want {
						t.Fatalf("first write: %d bytes done, want %d (%d pages)", n, want, maxPages)
					}
				}
				done += int64(n)
				size = max(size, tc.off+done)
				if p, _ := c.Len(); p > maxPages {
					t.Fatalf("call %d: %d pages cached, bound %d", calls, p, maxPages)
				}
				if err == nil {
					if done != tc.n {
						t.Fatalf("call %d: nil error after %d of %d bytes", calls, done, tc.n)
					}
					break
				}
				if !errors.Is(err, iomap.ErrCacheFull) {
					t.Fatalf("call %d: %v, want ErrCacheFull", calls, err)
				}
				if calls > 0 && n == 0 {
					t.Fatalf("call %d: retry after WritebackOldest made no progress", calls)
				}
				if (tc.off+done)%bs != 0 {
					t.Fatalf("call %d: stopped at %d, not a page boundary", calls, tc.off+done)
				}
				fulls++
				p, before := c.Len()
				if p != maxPages || before != p {
					t.Fatalf("call %d: ErrCacheFull with %d pages, %d dirty; want %d, all dirty", calls, p, before, maxPages)
				}
				fs.allow.Store(true)
				ok, err := c.WritebackOldest()
				fs.allow.Store(false)
				if !ok || err != nil {
					t.Fatalf("call %d: WritebackOldest = %v, %v; want true, nil", calls, ok, err)
				}
				if _, after := c.Len(); after != before-min(before, maxRun) {
					t.Fatalf("call %d: WritebackOldest left %d of %d dirty pages, want %d (cluster of %d)",
						calls, after, before, before-min(before, maxRun), maxRun)
				}
			}
			if fulls == 0 {
				t.Fatal("the write never hit ErrCacheFull")
			}
			if n := fs.inline.Load(); n != 0 {
				t.Fatalf("%d write-back Begins inside BufferedWrite", n)
			}

			// A read that needs a page fails the same way; cached pages
			// still read; WritebackOldest makes room for it.
			if err := func() error { fs.allow.Store(true); defer fs.allow.Store(false); return c.Sync() }(); err != nil {
				t.Fatal(err)
			}
			if ok, err := c.WritebackOldest(); ok || err != nil {
				t.Fatalf("WritebackOldest on a clean cache: %v, %v; want false, nil", ok, err)
			}
			model := make([]byte, size)
			copy(model[tc.off:], data)
			fill := optData(2, maxPages*bs)
			if n, err := iomap.BufferedWrite(c, fs, key, fill, 0, size); err != nil || int64(n) != maxPages*bs {
				t.Fatalf("rewriting the first %d pages: %d, %v", maxPages, n, err)
			}
			copy(model, fill)
			if p, d := c.Len(); p != maxPages || d != maxPages {
				t.Fatalf("%d pages, %d dirty; want %d dirty", p, d, maxPages)
			}
			buf := make([]byte, bs)
			roff := tc.readPage * bs
			if n, err := iomap.BufferedRead(c, fs, key, buf, roff, size); !errors.Is(err, iomap.ErrCacheFull) || n != 0 {
				t.Fatalf("read of uncached page %d in a full cache: %d, %v; want 0, ErrCacheFull", tc.readPage, n, err)
			}
			if n, err := iomap.BufferedRead(c, fs, key, buf, bs, size); err != nil || int64(n) != bs || !bytes.Equal(buf, model[bs:2*bs]) {
				t.Fatalf("read of cached page 1 in a full cache: %d, %v", n, err)
			}
			fs.allow.Store(true)
			if ok, err := c.WritebackOldest(); !ok || err != nil {
				t.Fatalf("WritebackOldest = %v, %v; want true, nil", ok, err)
			}
			fs.allow.Store(false)
			if n, err := iomap.BufferedRead(c, fs, key, buf, roff, size); err != nil || int64(n) != bs || !bytes.Equal(buf, model[roff:roff+bs]) {
				t.Fatalf("read of page %d after WritebackOldest: %d, %v, %s", tc.readPage, n, err, firstDiff(buf, model[roff:roff+bs]))
			}
			if n := fs.inline.Load(); n != 0 {
				t.Fatalf("%d write-back Begins inside BufferedWrite/BufferedRead", n)
			}

			fs.allow.Store(true)
			if err := c.Sync(); err != nil {
				t.Fatal(err)
			}
			if _, d := c.Len(); d != 0 {
				t.Fatalf("%d dirty pages after Sync", d)
			}
			if got := readFresh(t, dev, fs, key, size, bs); !bytes.Equal(got, model) {
				t.Fatalf("device content after Sync: %s", firstDiff(got, model))
			}
			for lb := int64(0); lb < (size+bs-1)/bs; lb++ {
				if st := fs.state(lb); st != bWritten {
					t.Fatalf("block %d in state %d after Sync, want written", lb, st)
				}
			}
		})
	}
}

// WritebackOldest is documented to write back around the least recently
// used dirty page not in use and to report whether there was one: clean
// pages older than that dirty page must not hide it.
func TestWritebackOldestPastCleanPages(t *testing.T) {
	const bs = 4096
	dev := patternDev(t, 1<<20)
	fs := newTinyFS(bs, 0, 256)
	c, err := iomap.NewPageCache(dev, iomap.PageCacheOptions{PageSize: bs, MaxPages: 8, NoInlineWriteback: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const key = 1
	data := optData(3, 3*bs)
	if _, err := iomap.BufferedWrite(c, fs, key, data[:2*bs], 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Sync(); err != nil { // pages 0 and 1: clean, least recently used
		t.Fatal(err)
	}
	if _, err := iomap.BufferedWrite(c, fs, key, data[2*bs:], 2*bs, 2*bs); err != nil {
		t.Fatal(err)
	}
	if p, d := c.Len(); p != 3 || d != 1 {
		t.Fatalf("%d pages, %d dirty; want 3, 1", p, d)
	}
	ok, err := c.WritebackOldest()
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Errorf("WritebackOldest = false with a dirty unpinned page cached behind clean ones")
	}
	if _, d := c.Len(); d != 0 && ok {
		t.Errorf("WritebackOldest reported true but left %d dirty pages", d)
	}
}

// A failing WritebackOldest returns the error, keeps the pages dirty, and
// leaves the error for the file's next Writeback, once.
func TestWritebackOldestError(t *testing.T) {
	const bs = 4096
	mem := memdev.New(1 << 20)
	tog := errordev.NewToggle(errordev.Always())
	dev := errordev.New(mem, errordev.Kinds(tog, errordev.Write))
	fs := newTinyFS(bs, 0, 256)
	c, err := iomap.NewPageCache(dev, iomap.PageCacheOptions{PageSize: bs, MaxPages: 4, NoInlineWriteback: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const key = 1
	data := optData(4, 6*bs)
	n, err := iomap.BufferedWrite(c, fs, key, data, 0, 0)
	if !errors.Is(err, iomap.ErrCacheFull) || n != 4*bs {
		t.Fatalf("write: %d, %v; want %d, ErrCacheFull", n, err, 4*bs)
	}
	tog.Enable()
	ok, err := c.WritebackOldest()
	if !ok || !errors.Is(err, errordev.ErrInjected) {
		t.Fatalf("WritebackOldest = %v, %v; want true, injected error", ok, err)
	}
	if d := c.Dirty(key, 0, math.MaxInt64); d != 4 {
		t.Fatalf("%d dirty pages after failed write-back, want 4", d)
	}
	if n, err := iomap.BufferedWrite(c, fs, key, data[4*bs:], 4*bs, 4*bs); !errors.Is(err, iomap.ErrCacheFull) || n != 0 {
		t.Fatalf("retry after failed WritebackOldest: %d, %v; want 0, ErrCacheFull", n, err)
	}
	tog.Disable()
	if err := c.Writeback(key, 0, math.MaxInt64); !errors.Is(err, errordev.ErrInjected) {
		t.Fatalf("Writeback after failed WritebackOldest: %v, want the kept injected error", err)
	}
	if d := c.Dirty(key, 0, math.MaxInt64); d != 0 {
		t.Fatalf("%d dirty pages after Writeback, want 0", d)
	}
	if err := c.Writeback(key, 0, math.MaxInt64); err != nil {
		t.Fatalf("second Writeback: %v, want nil (error reported once)", err)
	}
	if got, err := iomap.BufferedWrite(c, fs, key, data[4*bs:], 4*bs, 4*bs); err != nil || got != 2*bs {
		t.Fatalf("write after Writeback: %d, %v", got, err)
	}
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if _, err := iomap.DirectRead(mem, fs, got, 0, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("device content: %s", firstDiff(got, data))
	}
}

// A NoReadCache cache reads uncached written pages straight from the
// device, one read per run of them, without caching them, and copies
// cached (dirty or clean) pages; holes and delalloc read as zeroes.
func TestNoReadCache(t *testing.T) {
	const bs = 4096
	dev := patternDev(t, 1<<20)
	fs := newTinyFS(bs, 0, 256)
	const key = 1
	size0 := int64(6*bs + 1000) // pages 0..6, the last one partial
	model := make([]byte, 9*bs)
	copy(model, optData(5, size0))
	{
		w, err := iomap.NewPageCache(dev, iomap.PageCacheOptions{PageSize: bs})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := iomap.BufferedWrite(w, fs, key, model[:size0], 0, 0); err != nil || int64(n) != size0 {
			t.Fatalf("write: %d, %v", n, err)
		}
		if err := w.Sync(); err != nil {
			t.Fatal(err)
		}
		w.Close()
	}

	c, err := iomap.NewPageCache(dev, iomap.PageCacheOptions{PageSize: bs, MaxPages: 8, NoReadCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Dirty the middle of page 3 (read in from the device) and all of page
	// 8, leaving page 7 a hole; the file grows to 9 pages.
	mid := optData(6, 200)
	if n, err := iomap.BufferedWrite(c, fs, key, mid, 3*bs+100, size0); err != nil || n != len(mid) {
		t.Fatalf("write into page 3: %d, %v", n, err)
	}
	copy(model[3*bs+100:], mid)
	last := optData(7, bs)
	if n, err := iomap.BufferedWrite(c, fs, key, last, 8*bs, size0); err != nil || n != bs {
		t.Fatalf("write of page 8: %d, %v", n, err)
	}
	copy(model[8*bs:], last)
	size := int64(9 * bs)
	cached := map[int64]bool{3: true, 8: true}
	if fs.state(7) != 0 || fs.state(8) != bDelalloc || fs.state(6) != bWritten {
		t.Fatalf("setup: block states 6,7,8 = %d,%d,%d", fs.state(6), fs.state(7), fs.state(8))
	}

	// wantReads is the number of device reads for [off, off+n): one per run
	// of uncached pages of the written extent (pages 0..6).
	wantReads := func(off, n int64) int64 {
		var reads int64
		in := false
		for idx := off / bs; idx*bs < min(off+n, size); idx++ {
			uncachedWritten := idx <= 6 && !cached[idx]
			if uncachedWritten && !in {
				reads++
			}
			in = uncachedWritten
		}
		return reads
	}
	ranges := []struct{ off, n int64 }{
		{0, 9 * bs},
		{0, bs},
		{bs, 2 * bs},
		{100, 3 * bs},
		{3*bs + 50, 300},
		{2*bs - 1, 2*bs + 2},
		{4*bs + 7, 3 * bs},
		{6*bs + 500, 2 * bs},
		{5 * bs, 4*bs - 1},
		{8*bs + 10, 2 * bs},
		{9 * bs, 10},
		{5 * bs, 0},
	}
	check := func(phase string, wantDirty int) {
		t.Helper()
		for _, r := range ranges {
			buf := make([]byte, r.n)
			before := c.Counters()
			n, err := iomap.BufferedRead(c, fs, key, buf, r.off, size)
			reads := c.Counters().Sub(before).DeviceReads
			wantN := max(0, min(r.n, size-r.off))
			if int64(n) != wantN || (wantN < r.n) != errors.Is(err, io.EOF) || (err != nil && !errors.Is(err, io.EOF)) {
				t.Fatalf("%s: read(%d, %d): %d, %v; want %d", phase, r.off, r.n, n, err, wantN)
			}
			if !bytes.Equal(buf[:n], model[r.off:r.off+int64(n)]) {
				t.Fatalf("%s: read(%d, %d): %s", phase, r.off, r.n, firstDiff(buf[:n], model[r.off:r.off+int64(n)]))
			}
			if want := wantReads(r.off, r.n); reads != want {
				t.Errorf("%s: read(%d, %d): %d device reads, want %d (one per uncached run)", phase, r.off, r.n, reads, want)
			}
			if p, d := c.Len(); p != len(cached) || d != wantDirty {
				t.Fatalf("%s: after read(%d, %d): %d pages, %d dirty; want %d, %d", phase, r.off, r.n, p, d, len(cached), wantDirty)
			}
		}
	}
	check("dirty", 2)
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
	check("clean", 0)

	// The device now holds the model; a caching cache reads the same bytes
	// and does cache them (so the page counts above do test NoReadCache).
	rc, err := iomap.NewPageCache(dev, iomap.PageCacheOptions{PageSize: bs, MaxPages: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	buf := make([]byte, size)
	if n, err := iomap.BufferedRead(rc, fs, key, buf, 0, size); err != nil || int64(n) != size || !bytes.Equal(buf, model[:size]) {
		t.Fatalf("caching read: %d, %v, %s", n, err, firstDiff(buf, model[:size]))
	}
	if p, _ := rc.Len(); p != 8 { // pages 0..6 and 8; the hole is not cached
		t.Fatalf("caching cache holds %d pages after a full read, want 8", p)
	}
}

// lockOps wraps tinyFS with a WritebackLocker that checks that write-back
// maps blocks only while locked, that lock and unlock pair up, and that
// unlock comes after the written pages were released.
type lockOps struct {
	*tinyFS
	c   *iomap.PageCache
	key iomap.Key

	lockErr error // returned by LockWriteback when set; set only between operations

	held           atomic.Bool
	locks, unlocks atomic.Int32
	wbBegins       atomic.Int32
	mu             sync.Mutex
	ranges         [][2]int64 // Begin(Writeback) ranges under the current lock
	problems       []string
}

func (o *lockOps) problem(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.problems = append(o.problems, fmt.Sprintf(format, args...))
}

func (o *lockOps) Begin(off, length int64, flags iomap.Flags) (iomap.Mapping, error) {
	if flags&iomap.Writeback != 0 {
		o.wbBegins.Add(1)
		if !o.held.Load() {
			o.problem("Begin(Writeback) at %d outside LockWriteback", off)
		}
		o.mu.Lock()
		o.ranges = append(o.ranges, [2]int64{off, off + length})
		o.mu.Unlock()
	}
	return o.tinyFS.Begin(off, length, flags)
}

func (o *lockOps) LockWriteback() (func(), error) {
	if o.lockErr != nil {
		return nil, o.lockErr
	}
	if !o.held.CompareAndSwap(false, true) {
		o.problem("LockWriteback while already locked")
	}
	o.locks.Add(1)
	var once atomic.Bool
	return func() {
		if !once.CompareAndSwap(false, true) {
			o.problem("unlock called twice")
			return
		}
		o.mu.Lock()
		ranges := o.ranges
		o.ranges = nil
		o.mu.Unlock()
		// Every page written back under this lock must be released (not
		// under write-back any more, and clean: no device errors here).
		for _, r := range ranges {
			n, ok := callCache(func() int { return o.c.Dirty(o.key, r[0], r[1]) })
			if !ok {
				o.problem("unlock: Dirty blocked (page cache lock held across unlock)")
			} else if n != 0 {
				o.problem("unlock: %d pages of [%d, %d) still dirty or under write-back", n, r[0], r[1])
			}
		}
		o.unlocks.Add(1)
		o.held.Store(false)
	}, nil
}

var _ iomap.WritebackLocker = (*lockOps)(nil)

func TestWritebackLocker(t *testing.T) {
	const bs, maxPages, key = 4096, 4, 1
	dev := patternDev(t, 1<<20)
	c, err := iomap.NewPageCache(dev, iomap.PageCacheOptions{PageSize: bs, MaxPages: maxPages})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ops := &lockOps{tinyFS: newTinyFS(bs, 0, 256), c: c, key: key}
	model := make([]byte, 16*bs)
	var size int64
	write := func(off, n int64, seed uint64) (int, error) {
		d := optData(seed, n)
		got, err := iomap.BufferedWrite(c, ops, key, d, off, size)
		copy(model[off:], d[:got])
		size = max(size, off+int64(got))
		return got, err
	}
	// step runs f and checks the locker's invariants; lock says whether f
	// must lock and write back (yes), must not lock (no), or may (maybe).
	const (
		no = iota
		yes
		maybe
	)
	step := func(name string, lock int, f func() error) {
		t.Helper()
		l0, b0 := ops.locks.Load(), ops.wbBegins.Load()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ops.mu.Lock()
		problems := ops.problems
		ops.mu.Unlock()
		if len(problems) > 0 {
			t.Fatalf("%s: %q", name, problems)
		}
		if l, u := ops.locks.Load(), ops.unlocks.Load(); l != u || ops.held.Load() {
			t.Fatalf("%s: %d locks, %d unlocks, held %v", name, l, u, ops.held.Load())
		}
		locked := ops.locks.Load() > l0
		if (lock == yes && !locked) || (lock == no && locked) {
			t.Fatalf("%s: locked %v", name, locked)
		}
		if lock == yes && ops.wbBegins.Load() == b0 {
			t.Fatalf("%s: locked but wrote nothing back", name)
		}
	}
	step("write", no, func() error { _, err := write(0, 3*bs, 1); return err })
	step("writeback", yes, func() error { return c.Writeback(key, 0, math.MaxInt64) })
	if d := c.Dirty(key, 0, math.MaxInt64); d != 0 {
		t.Fatalf("%d dirty after Writeback", d)
	}
	step("evicting write", yes, func() error { _, err := write(3*bs, 8*bs, 2); return err })
	step("WritebackOldest", yes, func() error {
		ok, err := c.WritebackOldest()
		if !ok {
			return errors.New("WritebackOldest found nothing")
		}
		return err
	})
	step("sync", yes, func() error {
		if _, err := write(0, bs, 5); err != nil {
			return err
		}
		return c.Sync()
	})
	if d := c.Dirty(key, 0, math.MaxInt64); d != 0 {
		t.Fatalf("%d dirty after Sync", d)
	}

	// A LockWriteback error fails the write-back and leaves pages dirty.
	c.Forget(key)
	step("write 4", no, func() error { _, err := write(0, maxPages*bs, 3); return err })
	errLock := errors.New("test: lock refused")
	ops.lockErr = errLock
	b0 := ops.wbBegins.Load()
	if err := c.Writeback(key, 0, math.MaxInt64); !errors.Is(err, errLock) {
		t.Fatalf("Writeback with failing LockWriteback: %v, want %v", err, errLock)
	}
	if d := c.Dirty(key, 0, math.MaxInt64); d != maxPages {
		t.Fatalf("%d dirty after failed Writeback, want %d", d, maxPages)
	}
	if ok, err := c.WritebackOldest(); !ok || !errors.Is(err, errLock) {
		t.Fatalf("WritebackOldest with failing LockWriteback: %v, %v; want true, %v", ok, err, errLock)
	}
	if err := c.Sync(); !errors.Is(err, errLock) {
		t.Fatalf("Sync with failing LockWriteback: %v, want %v", err, errLock)
	}
	// Without NoInlineWriteback, the eviction write-back fails the write.
	if n, err := write(maxPages*bs, bs, 4); !errors.Is(err, errLock) || n != 0 {
		t.Fatalf("evicting write with failing LockWriteback: %d, %v; want 0, %v", n, err, errLock)
	}
	if d := c.Dirty(key, 0, math.MaxInt64); d != maxPages {
		t.Fatalf("%d dirty after failed write-backs, want %d", d, maxPages)
	}
	if ops.wbBegins.Load() != b0 || ops.locks.Load() != ops.unlocks.Load() {
		t.Fatalf("failed LockWriteback: %d write-back Begins, %d locks, %d unlocks",
			ops.wbBegins.Load()-b0, ops.locks.Load(), ops.unlocks.Load())
	}
	ops.lockErr = nil
	step("writeback after lock error", yes, func() error {
		if err := c.Writeback(key, 0, math.MaxInt64); err != nil && !errors.Is(err, errLock) {
			return err
		}
		return nil
	})
	if d := c.Dirty(key, 0, math.MaxInt64); d != 0 {
		t.Fatalf("%d dirty after Writeback, want 0", d)
	}
	step("clean writeback", maybe, func() error { return c.Writeback(key, 0, math.MaxInt64) })
	if n := ops.wbBegins.Load(); n != b0+1 {
		t.Fatalf("%d write-back Begins after the lock error, want 1 (one run of %d pages)", n-b0, maxPages)
	}
	if got := readFresh(t, dev, ops.tinyFS, key, size, bs); !bytes.Equal(got, model[:size]) {
		t.Fatalf("device content: %s", firstDiff(got, model[:size]))
	}
}

// hookOps wraps tinyFS and calls onWriteback at each Begin(Writeback).
type hookOps struct {
	*tinyFS
	onWriteback func(off, length int64)
}

func (h *hookOps) Begin(off, length int64, flags iomap.Flags) (iomap.Mapping, error) {
	if flags&iomap.Writeback != 0 && h.onWriteback != nil {
		h.onWriteback(off, length)
	}
	return h.tinyFS.Begin(off, length, flags)
}

func TestZeroCachedDirtyCached(t *testing.T) {
	const bs, key = 4096, 1
	dev := patternDev(t, 1<<20)
	c, err := iomap.NewPageCache(dev, iomap.PageCacheOptions{PageSize: bs, MaxPages: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ops := &hookOps{tinyFS: newTinyFS(bs, 0, 256)}

	// Unknown files.
	if c.Cached(key) || c.Dirty(key, 0, math.MaxInt64) != 0 {
		t.Fatal("empty cache reports a cached or dirty file")
	}
	c.ZeroCached(key, 0, bs) // no file: nothing to do
	if c.Cached(key) {
		t.Fatal("ZeroCached created pages")
	}

	size := int64(4 * bs)
	model := optData(8, size)
	if n, err := iomap.BufferedWrite(c, ops, key, model, 0, 0); err != nil || int64(n) != size {
		t.Fatalf("write: %d, %v", n, err)
	}
	if !c.Cached(key) || c.Cached(key+1) {
		t.Fatalf("Cached(%d) = %v, Cached(%d) = %v", key, c.Cached(key), key+1, c.Cached(key+1))
	}
	for _, tc := range []struct {
		from, to int64
		want     int
	}{
		{0, math.MaxInt64, 4},
		{0, size, 4},
		{bs, 2 * bs, 1},
		{bs - 1, bs + 1, 2},
		{bs + 1, bs + 2, 1},
		{bs, bs, 0},
		{size, 10 * bs, 0},
		{3*bs + 1, math.MaxInt64, 1},
	} {
		if got := c.Dirty(key, tc.from, tc.to); got != tc.want {
			t.Errorf("Dirty(%d, %d) = %d, want %d", tc.from, tc.to, got, tc.want)
		}
	}
	if got := c.Dirty(key+1, 0, math.MaxInt64); got != 0 {
		t.Errorf("Dirty of another file = %d", got)
	}

	// Pages under write-back count as dirty; after it they do not.
	var during []int
	ops.onWriteback = func(off, length int64) {
		n, ok := callCache(func() int { return c.Dirty(key, 0, math.MaxInt64) })
		if !ok {
			n = -1
		}
		during = append(during, n)
	}
	if err := c.Writeback(key, bs, 3*bs); err != nil {
		t.Fatal(err)
	}
	ops.onWriteback = nil
	if len(during) == 0 || during[0] != 4 {
		t.Errorf("Dirty during write-back of pages 1..2 = %v, want 4 (2 dirty + 2 under write-back)", during)
	}
	if got := c.Dirty(key, 0, math.MaxInt64); got != 2 {
		t.Errorf("Dirty after writing back pages 1..2 = %d, want 2", got)
	}
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := c.Dirty(key, 0, math.MaxInt64); got != 0 || !c.Cached(key) {
		t.Fatalf("after Sync: Dirty %d, Cached %v; want 0, true", got, c.Cached(key))
	}
	onDev := bytes.Clone(model)

	// ZeroCached on clean pages zeroes the cached copy only and leaves the
	// pages clean; Sync writes nothing, so the device keeps the old bytes.
	c.ZeroCached(key, 100, bs)
	clear(model[100 : 100+bs])
	if p, d := c.Len(); p != 4 || d != 0 {
		t.Fatalf("after ZeroCached of clean pages: %d pages, %d dirty; want 4, 0", p, d)
	}
	buf := make([]byte, size)
	if _, err := iomap.BufferedRead(c, ops, key, buf, 0, size); err != nil || !bytes.Equal(buf, model) {
		t.Fatalf("read after ZeroCached: %v, %s", err, firstDiff(buf, model))
	}
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := readFresh(t, dev, ops, key, size, bs); !bytes.Equal(got, onDev) {
		t.Fatalf("ZeroCached of clean pages reached the device: %s", firstDiff(got, onDev))
	}

	// ZeroCached on a dirty page keeps it dirty: the zeroes go out with it.
	d2 := optData(9, bs)
	if _, err := iomap.BufferedWrite(c, ops, key, d2, 2*bs, size); err != nil {
		t.Fatal(err)
	}
	copy(model[2*bs:], d2)
	c.ZeroCached(key, 2*bs+10, 20)
	clear(model[2*bs+10 : 2*bs+30])
	if got := c.Dirty(key, 0, math.MaxInt64); got != 1 {
		t.Fatalf("Dirty after ZeroCached of a dirty page = %d, want 1", got)
	}
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
	copy(onDev[2*bs:3*bs], model[2*bs:3*bs])
	if got := readFresh(t, dev, ops, key, size, bs); !bytes.Equal(got, onDev) {
		t.Fatalf("after write-back of a zeroed dirty page: %s", firstDiff(got, onDev))
	}

	// ZeroCached does not create pages for uncached ranges, and n <= 0 is
	// a no-op.
	c.Invalidate(key, 3*bs, 4*bs)
	c.ZeroCached(key, 3*bs, bs)
	c.ZeroCached(key, 0, 0)
	c.ZeroCached(key, 0, -5)
	if p, d := c.Len(); p != 3 || d != 0 {
		t.Fatalf("after ZeroCached of an uncached page: %d pages, %d dirty; want 3, 0", p, d)
	}
	copy(model[3*bs:], onDev[3*bs:]) // the uncached page reads from the device again
	if _, err := iomap.BufferedRead(c, ops, key, buf, 0, size); err != nil || !bytes.Equal(buf, model) {
		t.Fatalf("final read: %v, %s", err, firstDiff(buf, model))
	}

	// A file whose pages were all invalidated is not cached.
	c.Invalidate(key, 0, math.MaxInt64)
	if c.Cached(key) {
		t.Fatal("Cached after invalidating every page")
	}
	c.Forget(key)
	if c.Cached(key) || c.Dirty(key, 0, math.MaxInt64) != 0 {
		t.Fatal("Forget left the file cached or dirty")
	}
}

// TestInvalidateClean: a range with a dirty page is left alone (false);
// after write-back the same range's pages are dropped (true), and pages
// outside it stay.
func TestInvalidateClean(t *testing.T) {
	const bs, key = 4096, 1
	dev := patternDev(t, 1<<20)
	c, err := iomap.NewPageCache(dev, iomap.PageCacheOptions{PageSize: bs, MaxPages: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ops := &hookOps{tinyFS: newTinyFS(bs, 0, 256)}
	if !c.InvalidateClean(key, 0, bs) {
		t.Fatal("InvalidateClean of an unknown file: false")
	}
	if _, err := iomap.BufferedWrite(c, ops, key, optData(9, 4*bs), 0, 0); err != nil {
		t.Fatal(err)
	}
	if c.InvalidateClean(key, bs, 2*bs) {
		t.Fatal("InvalidateClean dropped a dirty range")
	}
	if pages, dirty := c.Len(); pages != 4 || dirty != 4 {
		t.Fatalf("after a refused InvalidateClean: %d pages, %d dirty; want 4, 4", pages, dirty)
	}
	if err := c.Writeback(key, 0, 4*bs); err != nil {
		t.Fatal(err)
	}
	if !c.InvalidateClean(key, bs, 3*bs) {
		t.Fatal("InvalidateClean refused a clean range")
	}
	if pages, _ := c.Len(); pages != 2 {
		t.Fatalf("%d pages left; want the 2 outside the range", pages)
	}
}

// TestDropClean: DropClean refuses while any page of the file is dirty,
// then drops all of the file's pages and leaves other files alone.
func TestDropClean(t *testing.T) {
	const bs = 4096
	dev := patternDev(t, 1<<20)
	c, err := iomap.NewPageCache(dev, iomap.PageCacheOptions{PageSize: bs, MaxPages: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ops := &hookOps{tinyFS: newTinyFS(bs, 0, 256)}
	if !c.DropClean(1) {
		t.Fatal("DropClean of an unknown file: false")
	}
	if _, err := iomap.BufferedWrite(c, ops, 1, optData(9, 4*bs), 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := iomap.BufferedWrite(c, ops, 2, optData(3, 2*bs), 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Writeback(1, 0, 3*bs); err != nil { // page 3 stays dirty
		t.Fatal(err)
	}
	if c.DropClean(1) {
		t.Fatal("DropClean dropped a file with a dirty page")
	}
	if pages, dirty := c.Len(); pages != 6 || dirty != 3 {
		t.Fatalf("after a refused DropClean: %d pages, %d dirty; want 6, 3", pages, dirty)
	}
	if err := c.Writeback(1, 0, 4*bs); err != nil {
		t.Fatal(err)
	}
	if !c.DropClean(1) {
		t.Fatal("DropClean refused a clean file")
	}
	if pages, dirty := c.Len(); pages != 2 || dirty != 2 {
		t.Fatalf("after DropClean: %d pages, %d dirty; want file 2's 2 dirty pages", pages, dirty)
	}
	if c.Cached(1) {
		t.Fatal("file 1 still cached")
	}
}

// TestWritebackRunsAligned checks that write-back cuts its runs at
// multiples of MaxRunBytes in the file, in Sync and in WritebackOldest, so
// that a file placed at an aligned offset is written in aligned runs.
func TestWritebackRunsAligned(t *testing.T) {
	const bs, run = 4096, 8 // pages per run
	var mu sync.Mutex
	var lens []int64
	mem := patternDev(t, 1<<20)
	dev := errordev.New(mem, errordev.Func(func(op errordev.Op) error {
		if op.Kind == errordev.Write {
			mu.Lock()
			lens = append(lens, op.Len/bs)
			mu.Unlock()
		}
		return nil
	}))
	fs := newTinyFS(bs, 0, (1<<20)/bs)
	c, err := iomap.NewPageCache(dev, iomap.PageCacheOptions{PageSize: bs, MaxPages: 64, MaxRunBytes: run * bs})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const key = 1
	// Pages 3 to 29 dirty, written in order (page 3 is the oldest).
	if _, err := iomap.BufferedWrite(c, fs, key, optData(3, 27*bs), 3*bs, 0); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.WritebackOldest(); !ok || err != nil {
		t.Fatalf("WritebackOldest: %v, %v", ok, err)
	}
	if _, dirty := c.Len(); dirty != 27-5 {
		t.Fatalf("WritebackOldest left %d dirty pages, want 22 (pages 3-7 written)", dirty)
	}
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
	want := []int64{5, 8, 8, 6} // [3,8) [8,16) [16,24) [24,30)
	if fmt.Sprint(lens) != fmt.Sprint(want) {
		t.Fatalf("write-back runs of %v pages, want %v", lens, want)
	}
	if got := readFresh(t, mem, fs, key, 30*bs, bs)[3*bs:]; !bytes.Equal(got, optData(3, 27*bs)) {
		t.Fatalf("data after write-back: %s", firstDiff(got, optData(3, 27*bs)))
	}
}
