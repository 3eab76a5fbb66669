//go:build unix

package ext4io_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/iomap"
)

// rawAt does a file's I/O on its device directly: offset off of the file
// is byte phys[off/4096] of the device.
type rawAt struct {
	dev  blockdev.Device
	phys []int64
}

func (r rawAt) WriteAt(p []byte, off int64) (int, error) { return r.dev.WriteAt(p, r.phys[off/4096]) }
func (r rawAt) ReadAt(p []byte, off int64) (int, error)  { return r.dev.ReadAt(p, r.phys[off/4096]) }

// rawFor returns raw I/O on dev at the blocks the first size bytes of f
// map to (found with Fiemap).
func rawFor(b testing.TB, dev blockdev.Device, f *ext4io.File, size int64) rawAt {
	b.Helper()
	phys := make([]int64, size/4096)
	err := f.Fiemap(0, size, func(e iomap.Extent) error {
		for o := int64(0); o < e.Length; o += 4096 {
			phys[(e.Logical+o)/4096] = e.Physical + o
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return rawAt{dev, phys}
}

// BenchmarkFileIO measures the engine's own CPU per 4 KiB operation on an
// in-memory device: each File API workload next to the raw device doing
// the same I/O (raw-*). The difference is what ext4io adds per operation
// (mapping lookup, locks, iomap Begin/End, counters).
//
//	go test -run XXX -bench BenchmarkFileIO -benchtime 200000x .
func BenchmarkFileIO(b *testing.B) {
	const size = 64 << 20
	dev := memdev.NewBlockSize(256<<20, 4096)
	// 64 MiB written, 16 MiB cached, 64 MiB fallocated, 32 MiB buffered.
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		b.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer v.Close()
	prep := func(name string, mode ext4io.FallocMode) *ext4io.File {
		return directFile(b, v, name, mode, size)
	}
	written := prep("written", ext4io.FallocWriteZeroes)
	for off := int64(0); off < size; off += 1 << 20 { // give memdev its pages
		if _, err := written.WriteAt(make([]byte, 1<<20), off); err != nil {
			b.Fatal(err)
		}
	}
	buf := make([]byte, 4096)
	offs := make([]int64, 1<<16)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range offs {
		offs[i] = rng.Int64N(size/4096) * 4096
	}
	run := func(name string, op func(off int64) error) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(4096)
			for i := 0; b.Loop(); i++ {
				if err := op(offs[i&(len(offs)-1)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	// raw: the same device doing the same I/O at the blocks the written
	// file maps to, so both sides touch the same memory.
	raw := rawFor(b, dev, written, size)
	run("raw-write", func(off int64) error { _, err := raw.WriteAt(buf, off); return err })
	run("overwrite", func(off int64) error { _, err := written.WriteAt(buf, off); return err })
	run("raw-read", func(off int64) error { _, err := raw.ReadAt(buf, off); return err })
	run("read", func(off int64) error { _, err := written.ReadAt(buf, off); return err })
	// The same file after buffered writes left 16 MiB of clean pages in the
	// cache: direct writes check their range against it on every write.
	cachedf, err := v.Create("cached")
	if err != nil {
		b.Fatal(err)
	}
	for off := int64(0); off < 16<<20; off += 1 << 20 {
		if _, err := cachedf.WriteAt(make([]byte, 1<<20), off); err != nil {
			b.Fatal(err)
		}
	}
	if err := cachedf.Sync(); err != nil {
		b.Fatal(err)
	}
	cached, err := v.OpenFile("cached", os.O_RDWR|ext4io.O_DIRECT, 0)
	if err != nil {
		b.Fatal(err)
	}
	run("overwrite-cached", func(off int64) error { _, err := cached.WriteAt(buf, off%(16<<20)); return err })
	falloc := prep("fallocated", ext4io.FallocKeepSize)
	run("write-fallocated", func(off int64) error { _, err := falloc.WriteAt(buf, off); return err })
	buffered, err := v.Create("buffered")
	if err != nil {
		b.Fatal(err)
	}
	var pos int64
	run("buffered-append", func(int64) error {
		if _, err := buffered.WriteAt(buf, pos); err != nil {
			return err
		}
		if pos = (pos + 4096) % (32 << 20); pos == 0 {
			return buffered.Sync() // write-back of 32 MiB, then overwrites
		}
		return nil
	})
}

// BenchmarkConvertScattered measures direct 4 KiB writes into a 1 GiB
// preallocated file at offsets in random order, each write a conversion
// of a block no earlier write touched: the extent tree and the
// extent-status cache grow to ~100k extents, as in ext4io bench's
// fallocated workloads. overwrite then writes the same offsets again.
// Run it with -benchtime at most 262144x.
//
//	go test -run XXX -bench ConvertScattered -benchtime 200000x .
func BenchmarkConvertScattered(b *testing.B) {
	const size = 1 << 30
	dev := shmMmap(b, 2<<30)
	for off := int64(0); off < 2<<30; off += 1 << 20 { // allocate the pages
		if _, err := dev.WriteAt(make([]byte, 1<<20), off); err != nil {
			b.Fatal(err)
		}
	}
	if err := ext4io.Format(dev, ext4io.FormatOptions{NoDiscard: true}); err != nil {
		b.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer v.Close()
	perm := rand.New(rand.NewPCG(3, 4)).Perm(size / 4096)
	buf := make([]byte, 4096)
	var d *ext4io.File
	write := func(b *testing.B) {
		b.SetBytes(4096)
		i := 0
		for b.Loop() {
			if i == len(perm) {
				b.Fatal("more iterations than blocks: use -benchtime 262144x or less")
			}
			if _, err := d.WriteAt(buf, int64(perm[i])*4096); err != nil {
				b.Fatal(err)
			}
			i++
		}
	}
	// Each write converts a block no earlier write touched, in a new file
	// for each run of the benchmark.
	b.Run("convert", func(b *testing.B) {
		if d != nil {
			d.Close()
			if err := v.Unlink("f"); err != nil {
				b.Fatal(err)
			}
		}
		d = directFile(b, v, "f", ext4io.FallocAllocate, size)
		c := v.Counters().Conversions
		write(b)
		b.ReportMetric(float64(v.Counters().Conversions-c)/float64(b.N), "conv/op")
	})
	// The same offsets again: overwrites, with the tree and the cache as
	// large as the conversions left them.
	b.Run("overwrite", write)
}

// BenchmarkParallelIO runs 4 KiB direct overwrites and reads from
// GOMAXPROCS goroutines (b.RunParallel; vary it with -cpu) on one file of
// an mmap-backed image in /dev/shm (the test's temporary directory where
// there is none), next to raw I/O on the same device at the file's blocks.
// The mmap device is a memcpy, so the gap is the engine's cost, including
// the cache lines its shared locks and counters move between CPUs.
//
//	go test -run XXX -bench BenchmarkParallelIO -cpu 1,2 .
func BenchmarkParallelIO(b *testing.B) {
	const size = 64 << 20
	dev := shmMmap(b, 256<<20)
	f, raw, _ := writtenFile(b, dev, size)
	var seed atomic.Uint64
	run := func(name string, op func(buf []byte, off int64) error) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(4096)
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.New(rand.NewPCG(seed.Add(1), 3))
				buf := make([]byte, 4096)
				for pb.Next() {
					if err := op(buf, rng.Int64N(size/4096)*4096); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
	run("raw-write", func(p []byte, off int64) error { _, err := raw.WriteAt(p, off); return err })
	run("overwrite", func(p []byte, off int64) error { _, err := f.WriteAt(p, off); return err })
	run("raw-read", func(p []byte, off int64) error { _, err := raw.ReadAt(p, off); return err })
	run("read", func(p []byte, off int64) error { _, err := f.ReadAt(p, off); return err })
}

// writtenFile formats dev, opens it writable (closed with the benchmark)
// and returns a file of size bytes of written zeroes opened with O_DIRECT,
// with raw I/O on dev at its blocks.
func writtenFile(b *testing.B, dev blockdev.Device, size int64) (*ext4io.File, rawAt, *ext4io.Volume) {
	b.Helper()
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		b.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { v.Close() })
	f := directFile(b, v, "written", ext4io.FallocWriteZeroes, size)
	return f, rawFor(b, dev, f, size), v
}

// shmMmap returns an mmap device on a new image of size bytes in /dev/shm
// (the test's temporary directory where there is none), removed and
// closed with the benchmark.
func shmMmap(b testing.TB, size int64) *blockdev.Mmap {
	b.Helper()
	dir := "/dev/shm"
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		dir = b.TempDir()
	}
	tmp, err := os.CreateTemp(dir, "ext4io-bench-*.img")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.Remove(tmp.Name()) })
	err = tmp.Truncate(size)
	tmp.Close()
	if err != nil {
		b.Fatal(err)
	}
	dev, err := blockdev.OpenMmap(tmp.Name(), false)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { dev.Close() })
	return dev
}

// shmFile returns a file device on a new image of size bytes in /dev/shm
// (the test's temporary directory where there is none), removed and
// closed with the benchmark.
func shmFile(b testing.TB, size int64) *blockdev.File {
	b.Helper()
	dir := "/dev/shm"
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		dir = b.TempDir()
	}
	img, err := os.CreateTemp(dir, "ext4io-bench-*.img")
	if err != nil {
		b.Fatal(err)
	}
	path := img.Name()
	img.Close()
	b.Cleanup(func() { os.Remove(path) })
	dev, err := blockdev.CreateFile(path, size)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { dev.Close() })
	return dev
}

// discardDev is an mmap device whose reads and writes can be switched to
// do nothing, so a benchmark can set an image up and then time the engine
// alone.
type discardDev struct {
	*blockdev.Mmap
	discard atomic.Bool
}

func (d *discardDev) WriteAt(p []byte, off int64) (int, error) {
	if d.discard.Load() {
		return len(p), nil
	}
	return d.Mmap.WriteAt(p, off)
}

func (d *discardDev) ReadAt(p []byte, off int64) (int, error) {
	if d.discard.Load() {
		return len(p), nil
	}
	return d.Mmap.ReadAt(p, off)
}

// BenchmarkEngineOverwrite is the engine's own CPU per 4 KiB direct
// overwrite of a written block through the File API (inode lock, mapping
// lookup, iomap Begin/End, counters, the time stamp), and per 4 KiB
// direct read: the image is set up on an mmap device in /dev/shm whose
// reads and writes then do nothing. raw-null is the empty write issued on
// the device directly; the difference is what ext4io adds.
// overwrite-converted overwrites a file whose preallocated blocks were all
// written by earlier direct writes.
//
//	go test -run XXX -bench BenchmarkEngineOverwrite -count 5 .
func BenchmarkEngineOverwrite(b *testing.B) {
	const size = 64 << 20
	dev := &discardDev{Mmap: shmMmap(b, 256<<20)}
	f, raw, v := writtenFile(b, dev, size)
	// A preallocated file whose every block was then written by a direct
	// write in random order, the conversions applied by a Sync: the cache
	// keeps its unwritten entries and answers "written" from the queued
	// writes' bitmap (convbits.go).
	conv := directFile(b, v, "converted", ext4io.FallocAllocate, size)
	buf := make([]byte, 4096)
	for _, p := range rand.New(rand.NewPCG(5, 6)).Perm(size / 4096) {
		if _, err := conv.WriteAt(buf, int64(p)*4096); err != nil {
			b.Fatal(err)
		}
	}
	if err := v.Sync(); err != nil {
		b.Fatal(err)
	}
	dev.discard.Store(true)
	defer dev.discard.Store(false)
	offs := make([]int64, 1<<16)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range offs {
		offs[i] = rng.Int64N(size/4096) * 4096
	}
	for _, c := range []struct {
		name string
		w    func([]byte, int64) (int, error)
	}{{"raw-null", raw.WriteAt}, {"overwrite", f.WriteAt}, {"overwrite-converted", conv.WriteAt}, {"read", f.ReadAt}} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if _, err := c.w(buf, offs[i&(len(offs)-1)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkParallelBufferedWrite has 16 goroutines each overwrite 4 KiB
// blocks of its own file through the page cache (File.WriteAt without
// O_DIRECT), cycling over the file's first 64 written blocks, with a
// File.Sync every 256 writes; -cpu changes GOMAXPROCS, not the 16
// goroutines. The image is on a memdev, so this is the engine's cost,
// with the contention of its shared locks (the page cache's among them).
//
//	go test -run XXX -bench BenchmarkParallelBufferedWrite -cpu 1,2,16 .
func BenchmarkParallelBufferedWrite(b *testing.B) {
	const (
		files  = 16
		blocks = 64
	)
	dev := memdev.NewBlockSize(256<<20, 4096)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		b.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer v.Close()
	var fs [files]*ext4io.File
	for i := range fs {
		name := fmt.Sprintf("f%d", i)
		directFile(b, v, name, ext4io.FallocWriteZeroes, blocks*4096).Close()
		if fs[i], err = v.OpenFile(name, os.O_RDWR, 0); err != nil {
			b.Fatal(err)
		}
		defer fs[i].Close()
	}
	b.SetBytes(4096)
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for g, f := range fs {
		n := b.N / files
		if g < b.N%files {
			n++
		}
		wg.Go(func() {
			buf := make([]byte, 4096)
			for i := range n {
				if _, err := f.WriteAt(buf, int64(i%blocks)*4096); err != nil {
					b.Error(err)
					return
				}
				if i%256 == 255 {
					if err := f.Sync(); err != nil {
						b.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkBufferedSequential is the bench's buffered-4k and seqwrite-1m
// workloads as Go benchmarks, on an image file (in /dev/shm when it
// exists, as the bench's RAM runs): sequential writes of a new file
// through the page cache (buffered-4k, 64 MiB cache, a Sync each time
// the file reaches 256 MiB, then a truncate) or with O_DIRECT
// (seqwrite-1m), next to raw doing the same writes on the device. The
// image's blocks are written once first, so neither side fills host
// holes. CPU profiles of these runs show the engine's cost per write.
//
//	go test -run XXX -bench BenchmarkBufferedSequential -benchtime 2s -cpuprofile cpu.out .
func BenchmarkBufferedSequential(b *testing.B) {
	const (
		imgSize = 1 << 30
		wrap    = 256 << 20
	)
	dev := shmFile(b, imgSize)
	fill := make([]byte, 1<<20)
	for i := range fill {
		fill[i] = byte(i)
	}
	for off := int64(0); off < imgSize; off += int64(len(fill)) {
		if _, err := dev.WriteAt(fill, off); err != nil {
			b.Fatal(err)
		}
	}
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		b.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, PageCacheBytes: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer v.Close()
	seq := func(b *testing.B, f *ext4io.File, size int) {
		buf := make([]byte, size)
		b.SetBytes(int64(size))
		b.ReportAllocs()
		defer reportCPU(b)()
		var pos int64
		for b.Loop() {
			if _, err := f.WriteAt(buf, pos); err != nil {
				b.Fatal(err)
			}
			if pos += int64(size); pos == wrap {
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
				if err := f.Truncate(0); err != nil {
					b.Fatal(err)
				}
				pos = 0
			}
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	raw := func(b *testing.B, size int) {
		buf := make([]byte, size)
		b.SetBytes(int64(size))
		b.ReportAllocs()
		defer reportCPU(b)()
		var pos int64
		for b.Loop() {
			if _, err := dev.WriteAt(buf, imgSize-wrap+pos); err != nil {
				b.Fatal(err)
			}
			if pos = (pos + int64(size)) % wrap; pos == 0 {
				if err := dev.Flush(); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := dev.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("raw-4k", func(b *testing.B) { raw(b, 4096) })
	b.Run("buffered-4k", func(b *testing.B) {
		f, err := v.Create("buffered")
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		seq(b, f, 4096)
	})
	b.Run("raw-1m", func(b *testing.B) { raw(b, 1<<20) })
	b.Run("seqwrite-1m", func(b *testing.B) {
		f, err := v.OpenFile("direct", os.O_RDWR|os.O_CREATE|ext4io.O_DIRECT, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		seq(b, f, 1<<20)
	})
}

// reportCPU starts measuring the process's CPU time (user and system, all
// threads, as ext4io bench's "cpu" column) and returns a function that
// reports it per operation as the cpu-ns/op metric: on a shared machine
// the CPU an operation costs varies less than its wall time.
func reportCPU(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64(cpu()-start)/float64(b.N), "cpu-ns/op")
		}
	}
}
