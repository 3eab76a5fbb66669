//go:build unix

package ext4io_test

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
)

// BenchmarkDirectPaths is the engine's CPU per 4 KiB direct operation on
// each path ext4io bench's random workloads drive, through the File API:
//
//   - overwrite: a written block (overwrite-*).
//   - writezeroes: a block of a file made by FallocWriteZeroes and not
//     written since (writezeroes-*).
//   - read: a written block (randread-*).
//   - convert: the first write into a preallocated (unwritten) block, which
//     queues its conversion (fallocated-*, until every block was written).
//   - overwrite-converted: a preallocated block written before
//     (fallocated-*, afterwards).
//
// The image is on an mmap device in /dev/shm, every page of it written
// before it is formatted. Except for convert, whose conversions read and
// write metadata, the device's reads and writes do nothing once the image
// is set up, so the time is the engine's alone.
// Instructions per operation, which the machine's load does not change:
// run one sub-benchmark under callgrind with -test.benchtime 20000x and
// 60000x,
//
//	go test -c -o ext4io.test . && GODEBUG=asyncpreemptoff=1 valgrind \
//	  --tool=callgrind --callgrind-out-file=cg.20000 ./ext4io.test \
//	  -test.run XXX -test.bench 'DirectPaths$/convert$' -test.benchtime 20000x
//
// and divide the difference of the per-function counts (callgrind_annotate
// --auto=no --threshold=100) by 40000, which removes the setup
// (docs/performance.md); callgrind's --toggle-collect on directPathsLoop
// does not isolate the loop from the rest of a Go program. convert allows
// at most 262144 operations in all, over every run of it.
func BenchmarkDirectPaths(b *testing.B) {
	const size = 64 << 20
	v, dev := directPathsVolume(b, 2<<30)
	buf := make([]byte, 4096)
	written := directFile(b, v, "written", ext4io.FallocWriteZeroes, size)
	for off := int64(0); off < size; off += 4096 {
		if _, err := written.WriteAt(buf, off); err != nil {
			b.Fatal(err)
		}
	}
	zeroed := directFile(b, v, "zeroed", ext4io.FallocWriteZeroes, size)
	conv := directFile(b, v, "converted", ext4io.FallocAllocate, size)
	for _, p := range rand.New(rand.NewPCG(5, 6)).Perm(size / 4096) {
		if _, err := conv.WriteAt(buf, int64(p)*4096); err != nil {
			b.Fatal(err)
		}
	}
	const fresh = 1 << 30
	unwritten := directFile(b, v, "unwritten", ext4io.FallocAllocate, fresh)
	if err := v.Sync(); err != nil {
		b.Fatal(err)
	}
	offs := make([]int64, 1<<16)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range offs {
		offs[i] = rng.Int64N(size/4096) * 4096
	}
	perm := rand.New(rand.NewPCG(3, 4)).Perm(fresh / 4096)
	next := 0 // perm's next block: every convert writes a block not written before
	for _, c := range []struct {
		name string
		op   func(int) error
	}{
		{"overwrite", func(i int) error { _, err := written.WriteAt(buf, offs[i&(len(offs)-1)]); return err }},
		{"writezeroes", func(i int) error { _, err := zeroed.WriteAt(buf, offs[i&(len(offs)-1)]); return err }},
		{"read", func(i int) error { _, err := written.ReadAt(buf, offs[i&(len(offs)-1)]); return err }},
		{"overwrite-converted", func(i int) error { _, err := conv.WriteAt(buf, offs[i&(len(offs)-1)]); return err }},
		{"convert", func(int) error {
			if next == len(perm) {
				b.Fatal("more operations than unwritten blocks: use -benchtime 262144x or less")
			}
			_, err := unwritten.WriteAt(buf, int64(perm[next])*4096)
			next++
			return err
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			dev.discard.Store(c.name != "convert")
			defer dev.discard.Store(false)
			directPathsLoop(b, c.op)
		})
	}
}

// BenchmarkDirectPathsParallel runs the overwrite and read of
// BenchmarkDirectPaths from GOMAXPROCS goroutines (vary it with -cpu) on
// one file: the gap from -cpu 1 is what the engine's shared locks and
// counters cost when their cache lines move between CPUs.
func BenchmarkDirectPathsParallel(b *testing.B) {
	const size = 64 << 20
	v, dev := directPathsVolume(b, 256<<20)
	buf := make([]byte, 4096)
	f := directFile(b, v, "written", ext4io.FallocWriteZeroes, size)
	for off := int64(0); off < size; off += 4096 {
		if _, err := f.WriteAt(buf, off); err != nil {
			b.Fatal(err)
		}
	}
	dev.discard.Store(true)
	defer dev.discard.Store(false)
	var seed atomic.Uint64
	for _, c := range []struct {
		name string
		op   func([]byte, int64) (int, error)
	}{{"overwrite", f.WriteAt}, {"read", f.ReadAt}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.New(rand.NewPCG(seed.Add(1), 7))
				p := make([]byte, 4096)
				for pb.Next() {
					if _, err := c.op(p, rng.Int64N(size/4096)*4096); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// directPathsLoop runs op once per benchmark iteration.
//
//go:noinline
func directPathsLoop(b *testing.B, op func(int) error) {
	for i := 0; b.Loop(); i++ {
		if err := op(i); err != nil {
			b.Fatal(err)
		}
	}
}

// directPathsDev is an mmap device whose reads and writes can be switched
// to do nothing.
type directPathsDev struct {
	*blockdev.Mmap
	discard atomic.Bool
}

func (d *directPathsDev) WriteAt(p []byte, off int64) (int, error) {
	if d.discard.Load() {
		return len(p), nil
	}
	return d.Mmap.WriteAt(p, off)
}

func (d *directPathsDev) ReadAt(p []byte, off int64) (int, error) {
	if d.discard.Load() {
		return len(p), nil
	}
	return d.Mmap.ReadAt(p, off)
}

// directPathsVolume formats a new image of size bytes in /dev/shm (the
// test's temporary directory where there is none) and opens it writable
// without background commits or write-back; both go with the benchmark.
func directPathsVolume(b *testing.B, size int64) (*ext4io.Volume, *directPathsDev) {
	b.Helper()
	m := shmMmap(b, size)
	zero := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(zero)) { // the host's pages, allocated once
		if _, err := m.WriteAt(zero, off); err != nil {
			b.Fatal(err)
		}
	}
	dev := &directPathsDev{Mmap: m}
	if err := ext4io.Format(dev, ext4io.FormatOptions{NoDiscard: true}); err != nil {
		b.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { v.Close() })
	return v, dev
}
