//go:build unix

package ext4io_test

import (
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
)

// dataNullDev is a device that drops writes of at least drop bytes (the
// data writes of a benchmark or test) and does every other I/O: metadata
// and journal blocks stay real, and the data's copy costs nothing.
type dataNullDev struct {
	blockdev.Device
	drop    int
	dropped atomic.Int64
}

func (d *dataNullDev) WriteAt(p []byte, off int64) (int, error) {
	if len(p) >= d.drop {
		d.dropped.Add(1)
		return len(p), nil
	}
	return d.Device.WriteAt(p, off)
}

// BenchmarkSeqWriteEngine is the engine's own CPU per 1 MiB sequential
// direct write into a new file (the bench's seqwrite-1m) with the data
// write itself dropped by the device: allocation, the extent and status
// cache inserts, the inode, bitmap and descriptor updates in the running
// transaction, the completion. Every 256 MiB the file is truncated and
// the truncate committed (Sync), as the bench starts its file over.
//
//	go test -run XXX -bench BenchmarkSeqWriteEngine -benchtime 20000x .
func BenchmarkSeqWriteEngine(b *testing.B) {
	sw := newSeqWriter(b)
	b.SetBytes(seqWriteSize)
	b.ReportAllocs()
	stop := reportCPU(b)
	for b.Loop() {
		sw.write(b)
	}
	stop()
	sw.checkDropped(b)
}

// BenchmarkSeqWriteEngineCold is BenchmarkSeqWriteEngine with the CPU's
// caches evicted before each write (an 8 MiB buffer written, outside the
// timed write), as a real 1 MiB write evicts them: the kernel's copy of
// the data in RAM, or the thread's sleep through the device's write on a
// disk while other work runs. It reports the write's own time
// (write-ns/op); ns/op includes the eviction.
//
//	go test -run XXX -bench BenchmarkSeqWriteEngineCold -benchtime 5000x .
func BenchmarkSeqWriteEngineCold(b *testing.B) {
	sw := newSeqWriter(b)
	evict := make([]byte, 8<<20)
	var took time.Duration
	for b.Loop() {
		for i := 0; i < len(evict); i += 64 {
			evict[i]++
		}
		took += sw.write(b)
	}
	b.ReportMetric(float64(took.Nanoseconds())/float64(b.N), "write-ns/op")
	sw.checkDropped(b)
}

const (
	seqWriteSize = 1 << 20   // one sequential write
	seqWriteWrap = 256 << 20 // the file starts over at this size
)

// seqWriter is the file of the BenchmarkSeqWriteEngine benchmarks: a new
// file in a 1 GiB image whose data writes are dropped.
type seqWriter struct {
	dev *dataNullDev
	f   *ext4io.File
	buf []byte
	pos int64
}

func newSeqWriter(b *testing.B) *seqWriter {
	dev := &dataNullDev{Device: shmMmap(b, 1<<30), drop: seqWriteSize}
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		b.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { v.Close() })
	f, err := v.OpenFile("seq", os.O_RDWR|os.O_CREATE|ext4io.O_DIRECT, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return &seqWriter{dev: dev, f: f, buf: make([]byte, seqWriteSize)}
}

// write writes the next 1 MiB and returns how long the write took; at
// seqWriteWrap it truncates the file and commits the truncate (Sync), as
// the bench starts its file over.
func (sw *seqWriter) write(b *testing.B) time.Duration {
	t0 := time.Now()
	if _, err := sw.f.WriteAt(sw.buf, sw.pos); err != nil {
		b.Fatal(err)
	}
	took := time.Since(t0)
	if sw.pos += seqWriteSize; sw.pos == seqWriteWrap {
		if err := sw.f.Truncate(0); err != nil {
			b.Fatal(err)
		}
		if err := sw.f.Sync(); err != nil {
			b.Fatal(err)
		}
		sw.pos = 0
	}
	return took
}

func (sw *seqWriter) checkDropped(b *testing.B) {
	if n := sw.dev.dropped.Load(); n < int64(b.N) {
		b.Fatalf("%d data writes dropped, want %d: the data no longer goes through WriteAt", n, b.N)
	}
}

// BenchmarkSeqWriteSameBlocks separates the engine's cost of a 1 MiB
// sequential direct write from the cost of the memory the data lands in:
// each iteration writes a new 256 MiB file through the engine (1 MiB
// direct writes, then a truncate and a Sync, as the bench starts its file
// over) and then has raw write the same 256 MiB with 1 MiB pwrites at the
// device blocks the engine's pass used (split where the file's extents
// are, so raw issues a few more, shorter writes). The image (in /dev/shm when it
// exists) is written whole first, so neither side fills host holes. It
// reports the process CPU per MiB of each side (engine-cpu-ns/MiB,
// raw-cpu-ns/MiB) and their ratio; on the same pages the difference is
// the engine's own work.
//
//	go test -run XXX -bench BenchmarkSeqWriteSameBlocks -benchtime 20x .
func BenchmarkSeqWriteSameBlocks(b *testing.B) {
	const (
		imgSize = 1 << 30
		size    = 1 << 20
		pass    = 256 << 20
	)
	dev := shmFile(b, imgSize)
	buf := make([]byte, size)
	for off := int64(0); off < imgSize; off += size {
		if _, err := dev.WriteAt(buf, off); err != nil {
			b.Fatal(err)
		}
	}
	if err := ext4io.Format(dev, ext4io.FormatOptions{NoDiscard: true}); err != nil {
		b.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		b.Fatal(err)
	}
	defer v.Close()
	f, err := v.OpenFile("seq", os.O_RDWR|os.O_CREATE|ext4io.O_DIRECT, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	bs := int64(v.BlockSize())
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var engCPU, rawCPU time.Duration
	b.SetBytes(2 * pass)
	for b.Loop() {
		c0 := cpu()
		for off := int64(0); off < pass; off += size {
			if _, err := f.WriteAt(buf, off); err != nil {
				b.Fatal(err)
			}
		}
		c1 := cpu()
		exts, err := f.Extents()
		if err != nil {
			b.Fatal(err)
		}
		c2 := cpu()
		if err := f.Truncate(0); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		engCPU += c1 - c0 + cpu() - c2
		var done int64
		c3 := cpu()
		for _, e := range exts {
			for o := int64(0); o < int64(e.Length)*bs; o += size {
				n := min(size, int64(e.Length)*bs-o)
				if _, err := dev.WriteAt(buf[:n], int64(e.Physical)*bs+o); err != nil {
					b.Fatal(err)
				}
				done += n
			}
		}
		rawCPU += cpu() - c3
		if done != pass {
			b.Fatalf("raw wrote %d bytes at the engine's blocks, want %d", done, pass)
		}
	}
	mib := float64(b.N) * pass / (1 << 20)
	b.ReportMetric(float64(engCPU.Nanoseconds())/mib, "engine-cpu-ns/MiB")
	b.ReportMetric(float64(rawCPU.Nanoseconds())/mib, "raw-cpu-ns/MiB")
	b.ReportMetric(float64(engCPU)/float64(rawCPU), "engine/raw")
}
