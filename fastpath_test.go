package ext4io_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestFastPathCounters proves the seed threads' fast paths with counters:
// aligned direct overwrites of written blocks take the shared lock and make
// no metadata update; aligned in-EOF writes into unwritten blocks take the
// shared lock and convert; unaligned, extending and allocating writes take
// the exclusive lock.
func TestFastPathCounters(t *testing.T) {
	img := formatImage(t, 128<<20, ext4io.FormatOptions{})
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	const size = 8 << 20
	f, err := v.Create("over")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Fallocate(ext4io.FallocWriteZeroes, 0, size); err != nil {
		t.Fatal(err)
	}
	g, err := v.Create("prealloc")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Fallocate(ext4io.FallocAllocate, 0, size); err != nil {
		t.Fatal(err)
	}
	df, err := v.OpenFile("over", os.O_RDWR|ext4io.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	dg, err := v.OpenFile("prealloc", os.O_RDWR|ext4io.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	buf := bytes.Repeat([]byte{0xAB}, 4096)
	const n = 500

	before := v.Counters()
	for i := 0; i < n; i++ {
		if _, err := df.WriteAt(buf, rng.Int64N(size/4096)*4096); err != nil {
			t.Fatal(err)
		}
	}
	d := diff(v.Counters(), before)
	if d.MetaUpdates != 0 || d.SharedLocks != n || d.ExclusiveLocks != 0 || d.Overwrites != n {
		t.Fatalf("overwrites: %+v; want 0 metadata updates and %d shared locks", d, n)
	}

	before = v.Counters()
	for i := 0; i < n; i++ {
		if _, err := dg.WriteAt(buf, rng.Int64N(size/4096)*4096); err != nil {
			t.Fatal(err)
		}
	}
	d = diff(v.Counters(), before)
	if d.SharedLocks != n || d.ExclusiveLocks != 0 || d.Conversions == 0 {
		t.Fatalf("writes into unwritten blocks: %+v; want %d shared locks and conversions", d, n)
	}

	before = v.Counters()
	if _, err := df.WriteAt(buf[:512], 512); err != nil { // unaligned to the block
		t.Fatal(err)
	}
	if _, err := df.WriteAt(buf, size); err != nil { // extending
		t.Fatal(err)
	}
	d = diff(v.Counters(), before)
	if d.ExclusiveLocks != 2 || d.SharedLocks != 0 {
		t.Fatalf("unaligned and extending direct writes: %+v; want 2 exclusive locks", d)
	}

	// Buffered writes (delayed allocation): no metadata update, no journal
	// handle, until write-back; then the new blocks come from the
	// reservation, mapped in one run.
	before = v.Counters()
	for i := 0; i < n; i++ {
		if _, err := f.WriteAt(buf[:1000], size+4096+int64(i)*1000); err != nil { // appends, unaligned
			t.Fatal(err)
		}
		if _, err := f.WriteAt(buf[:100], rng.Int64N(size)); err != nil { // overwrites, unaligned
			t.Fatal(err)
		}
	}
	d = diff(v.Counters(), before)
	if d.MetaUpdates != 0 || d.BufferedWrites != 2*n || d.JournalCommits != 0 || d.DelallocBlocks != 0 {
		t.Fatalf("buffered writes: %+v; want %d buffered writes and no metadata update", d, 2*n)
	}
	if c := v.Counters(); c.ReservedBlocks == 0 {
		t.Fatalf("buffered appends reserved no blocks: %+v", c)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	d = diff(v.Counters(), before)
	wantBlocks := uint64((4096+n*1000+4095)/4096 - 1) // the first appended block was written directly above
	if d.DelallocBlocks != wantBlocks || d.MetaUpdates == 0 || v.Counters().ReservedBlocks != 0 {
		t.Fatalf("after write-back: %+v (reserved %d); want %d delalloc blocks, metadata updated, no reservation left",
			d, v.Counters().ReservedBlocks, wantBlocks)
	}
	if ext, err := f.Extents(); err != nil || len(ext) > 3 {
		t.Fatalf("extents after write-back: %v, %v; want the appended blocks in one extent", ext, err)
	}

	// Direct I/O alignment is enforced.
	if _, err := df.WriteAt(buf[:100], 0); !errors.Is(err, ext4io.ErrInvalid) {
		t.Fatalf("misaligned direct write: %v", err)
	}
	if _, err := df.ReadAt(buf, 3); !errors.Is(err, ext4io.ErrInvalid) {
		t.Fatalf("misaligned direct read: %v", err)
	}
	t.Logf("counters: %+v", v.Counters())
}

func diff(a, b ext4io.Counters) ext4io.Counters {
	return ext4io.Counters{
		MetaUpdates: a.MetaUpdates - b.MetaUpdates, SharedLocks: a.SharedLocks - b.SharedLocks,
		ExclusiveLocks: a.ExclusiveLocks - b.ExclusiveLocks, Conversions: a.Conversions - b.Conversions,
		ZeroOutBlocks: a.ZeroOutBlocks - b.ZeroOutBlocks, Overwrites: a.Overwrites - b.Overwrites,
		JournalCommits: a.JournalCommits - b.JournalCommits, BufferedWrites: a.BufferedWrites - b.BufferedWrites,
		DelallocBlocks: a.DelallocBlocks - b.DelallocBlocks,
	}
}

// TestConcurrentDirectWrites: 16 goroutines write at random, some to one
// shared file (overwrites and into unwritten blocks, each goroutine on its
// own blocks) and some appending to files of their own; afterwards every
// byte matches the model and e2fsck is clean.
// Both split modes: at submission (default) and at completion; and with
// ZeroOutChunk, whose 64 KiB chunks hold a block of every goroutine, so a
// chunk's zeroing would destroy other goroutines' data if it ever raced
// with their writes.
func TestConcurrentDirectWrites(t *testing.T) {
	t.Parallel()
	for _, o := range []ext4io.Tuning{{}, {EagerConversions: true}, {DeferSplits: true}, {ZeroOutChunk: 64 << 10}, {ZeroOutChunk: 64 << 10, DeferSplits: true}} {
		t.Run(fmt.Sprintf("eager=%v,defer=%v,zerochunk=%d", o.EagerConversions, o.DeferSplits, o.ZeroOutChunk), func(t *testing.T) {
			concurrentDirectWrites(t, ext4io.Options{Tuning: o})
		})
	}
}

func concurrentDirectWrites(t *testing.T, opts ext4io.Options) {
	img := formatImage(t, 256<<20, ext4io.FormatOptions{})
	opts.Writable = true
	v, err := ext4io.OpenImage(img, opts)
	if err != nil {
		t.Fatal(err)
	}
	const shared = 16 << 20
	f, err := v.Create("shared")
	if err != nil {
		t.Fatal(err)
	}
	// First half written, second half unwritten.
	if err := f.Fallocate(ext4io.FallocWriteZeroes, 0, shared/2); err != nil {
		t.Fatal(err)
	}
	if err := f.Fallocate(ext4io.FallocAllocate, shared/2, shared/2); err != nil {
		t.Fatal(err)
	}
	model := make([]byte, shared)
	const workers = 16
	iters := sized(40, 80, 300) // writes per goroutine
	appendModels := make([][]byte, workers)
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			df, err := v.OpenFile("shared", os.O_RDWR|ext4io.O_DIRECT, 0)
			if err != nil {
				errc <- err
				return
			}
			own, err := v.Create(fmt.Sprintf("own%d", w))
			if err != nil {
				errc <- err
				return
			}
			blocks := shared / 4096
			for i := 0; i < iters; i++ {
				buf := make([]byte, 4096)
				for j := range buf {
					buf[j] = byte(rng.Uint32())
				}
				if w%4 == 3 { // appender
					off := int64(len(appendModels[w]))
					if _, err := own.WriteAt(buf, off); err != nil {
						errc <- err
						return
					}
					appendModels[w] = append(appendModels[w], buf...)
					continue
				}
				// Blocks b with b % workers == w belong to this goroutine.
				b := rng.IntN(blocks/workers)*workers + w
				if _, err := df.WriteAt(buf, int64(b)*4096); err != nil {
					errc <- err
					return
				}
				copy(model[b*4096:], buf)
			}
		}(w)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	check := func(v *ext4io.Volume) {
		got := make([]byte, shared)
		g, err := v.Open("shared")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, model) {
			t.Fatal("shared file differs from the model")
		}
		for w, want := range appendModels {
			if want == nil {
				continue
			}
			o, err := v.Open(fmt.Sprintf("own%d", w))
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(want))
			if _, err := o.ReadAt(got, 0); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) || o.Size() != int64(len(want)) {
				t.Fatalf("own%d differs from the model", w)
			}
		}
	}
	check(v)
	t.Logf("counters: %+v", v.Counters())
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	e2fs.Fsck(t, img)
	ro, err := ext4io.OpenImage(img, ext4io.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	check(ro)
}

// TestSharedVersusExclusive runs shared-lock direct overwrites and reads
// of a file opened with O_DIRECT (the inode lock's reader stripes) beside
// exclusive operations on the same file: appends that extend it, truncates
// back and punched holes past the overwritten region. -race sees any
// access of the inode the exclusive side does not exclude; afterwards the
// data matches the model and e2fsck is clean.
func TestSharedVersusExclusive(t *testing.T) {
	img := formatImage(t, 128<<20, ext4io.FormatOptions{})
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	const base = 4 << 20 // overwritten region; the exclusive side works past it
	f, err := v.Create("f")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Fallocate(ext4io.FallocWriteZeroes, 0, base); err != nil {
		t.Fatal(err)
	}
	df, err := v.OpenFile("f", os.O_RDWR|ext4io.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	model := make([]byte, base)
	const workers = 4
	var wg sync.WaitGroup
	errc := make(chan error, workers+1)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			buf, got := make([]byte, 4096), make([]byte, 4096)
			for range 400 {
				b := rng.IntN(base/4096/workers)*workers + w // this goroutine's blocks
				if rng.IntN(3) == 0 {
					if _, err := df.ReadAt(got, int64(b)*4096); err != nil {
						errc <- err
						return
					}
					if !bytes.Equal(got, model[b*4096:(b+1)*4096]) {
						errc <- fmt.Errorf("block %d reads other data than written", b)
						return
					}
					continue
				}
				for j := range buf {
					buf[j] = byte(rng.Uint32())
				}
				if _, err := df.WriteAt(buf, int64(b)*4096); err != nil {
					errc <- err
					return
				}
				copy(model[b*4096:], buf)
			}
		}()
	}
	wg.Add(1)
	go func() { // the exclusive side, past base
		defer wg.Done()
		rng := rand.New(rand.NewPCG(99, 7))
		buf := make([]byte, 8192)
		for i := range 60 {
			size := df.Size()
			var err error
			switch i % 3 {
			case 0, 1:
				_, err = df.WriteAt(buf, size) // extending: exclusive
			default:
				if size > base+8192 && rng.IntN(2) == 0 {
					err = df.Fallocate(ext4io.FallocPunchHole, base, 8192)
				} else {
					err = df.Truncate(base + int64(rng.IntN(4))*4096)
				}
			}
			if err != nil {
				errc <- err
				return
			}
		}
	}()
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	got := make([]byte, base)
	if _, err := df.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, model) {
		t.Fatal("file differs from the model")
	}
	for _, c := range []interface{ Close() error }{df, f, v} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	e2fs.Fsck(t, img)
}

// TestOverwriteDeviceError: a device error in an aligned direct overwrite
// (the path outside any operation) fails that write with ErrIO and leaves
// the volume writable, as no metadata changed; the next write of the block
// lands and the image stays clean.
func TestOverwriteDeviceError(t *testing.T) {
	img := formatImage(t, 64<<20, ext4io.FormatOptions{})
	file, err := blockdev.OpenFile(img, false)
	if err != nil {
		t.Fatal(err)
	}
	toggle := errordev.NewToggle(errordev.Kinds(errordev.Always(), errordev.Write))
	v, err := ext4io.Open(errordev.New(file, toggle), ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	d := directFile(t, v, "f", ext4io.FallocWriteZeroes, 1<<20)
	if err := v.Sync(); err != nil {
		t.Fatal(err)
	}
	before := v.Counters()
	toggle.Enable()
	if _, err := d.WriteAt(bytes.Repeat([]byte{1}, 4096), 64<<10); !errors.Is(err, ext4io.ErrIO) {
		t.Fatalf("overwrite on a failing device: %v, want ErrIO", err)
	}
	toggle.Disable()
	want := bytes.Repeat([]byte{2}, 4096)
	if _, err := d.WriteAt(want, 64<<10); err != nil {
		t.Fatalf("overwrite after the device recovered: %v", err)
	}
	if c := v.Counters(); c.MetaUpdates != before.MetaUpdates || c.SharedLocks-before.SharedLocks != 2 || c.Overwrites-before.Overwrites != 2 {
		t.Fatalf("two overwrites moved metadata updates %d -> %d, shared locks %d -> %d, overwrites %d -> %d; want 0, +2, +2",
			before.MetaUpdates, c.MetaUpdates, before.SharedLocks, c.SharedLocks, before.Overwrites, c.Overwrites)
	}
	if _, err := v.Create("g"); err != nil { // metadata still commits
		t.Fatal(err)
	}
	for _, c := range []interface{ Close() error }{d, v, file} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	r := fsckOpen(t, img, "f")
	got := make([]byte, 4096)
	if _, err := r.ReadAt(got, 64<<10); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("block after reopen: %v, data equal %v", err, bytes.Equal(got, want))
	}
}
