package iomap_test

import (
	"sync"
	"testing"

	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/iomap"
)

// linearOps maps every file offset to the same device offset, written: the
// overwrite fast path with no lookup cost, so benchmarks measure iomap.
type linearOps struct{}

func (linearOps) Begin(off, length int64, f iomap.Flags) (iomap.Mapping, error) {
	return iomap.Mapping{Offset: off &^ 4095, Length: (off&4095 + length + 4095) &^ 4095, Type: iomap.Mapped, Addr: off &^ 4095}, nil
}
func (linearOps) End(off, length, written int64, f iomap.Flags, m iomap.Mapping) error { return nil }

const benchDev = 64 << 20

// touchedDev returns a memdev whose chunks are all allocated, so
// benchmarks do not measure first-touch page faults.
func touchedDev(b *testing.B, size int64) *memdev.Device {
	dev := memdev.New(size)
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; off += 1 << 20 {
		buf[0] = 1
		if _, err := dev.WriteAt(buf, off); err != nil {
			b.Fatal(err)
		}
	}
	return dev
}

func BenchmarkDirectOverwrite4K(b *testing.B) {
	dev := touchedDev(b, benchDev)
	buf := make([]byte, 4096)
	b.Run("raw", func(b *testing.B) {
		b.SetBytes(4096)
		for i := 0; b.Loop(); i++ {
			if _, err := dev.WriteAt(buf, int64(i*4096)%benchDev); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("iomap", func(b *testing.B) {
		b.SetBytes(4096)
		b.ReportAllocs()
		opt := &iomap.DioOptions{BlockSize: 4096}
		for i := 0; b.Loop(); i++ {
			if _, err := iomap.DirectWrite(dev, linearOps{}, buf, int64(i*4096)%benchDev, opt); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("null", func(b *testing.B) {
		b.ReportAllocs()
		opt := &iomap.DioOptions{BlockSize: 4096, EndIO: func(off, n int64, m iomap.Mapping) error { return nil }}
		null := nullDev{dev}
		for i := 0; b.Loop(); i++ {
			if _, err := iomap.DirectWrite(null, linearOps{}, buf, int64(i*4096)%benchDev, opt); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// nullDev discards writes: BenchmarkDirectOverwrite4K/null is iomap's
// own cost per direct write.
type nullDev struct{ *memdev.Device }

func (nullDev) WriteAt(p []byte, off int64) (int, error) { return len(p), nil }

func BenchmarkIterBeginEnd(b *testing.B) {
	b.ReportAllocs()
	fn := func(m iomap.Mapping, off, n int64) (int64, error) { return n, nil }
	for i := 0; b.Loop(); i++ {
		if _, err := iomap.Iter(linearOps{}, int64(i&1023)*4096, 4096, iomap.Write|iomap.Direct, fn); err != nil {
			b.Fatal(err)
		}
	}
}

// Buffered 4 KiB sequential writes into delalloc space of the test-double
// filesystem, with a write-back every 256 writes (1 MiB).
func BenchmarkBufferedSeqWrite4K(b *testing.B) {
	buf := make([]byte, 4096)
	b.SetBytes(4096)
	b.ReportAllocs()
	dev := touchedDev(b, benchDev)
	fs := newTinyFS(4096, 0, benchDev/4096)
	c, err := iomap.NewPageCache(dev, iomap.PageCacheOptions{PageSize: 4096, MaxPages: 1024})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var off int64
	for i := 0; b.Loop(); i++ {
		if off+4096 > benchDev {
			b.StopTimer()
			if err := c.Sync(); err != nil {
				b.Fatal(err)
			}
			c.Forget(1)
			fs = newTinyFS(4096, 0, benchDev/4096)
			off = 0
			b.StartTimer()
		}
		if _, err := iomap.BufferedWrite(c, fs, 1, buf, off, off); err != nil {
			b.Fatal(err)
		}
		off += 4096
		if i%256 == 255 {
			if err := c.Writeback(1, off-1<<20, off); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := c.Sync(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPageCacheParallelWrite has 16 goroutines write 4 KiB pages
// into 16 files (keys 1 to 16) of one PageCache over a device that
// discards writes, so it measures the cache's own locking. One op is one
// page written. Run it with -cpu 1,2,16: the goroutines stay 16.
//
//   - fit: each file cycles over 64 pages, all of which fit in the cache;
//     every 64 writes the goroutine writes its file back.
//   - evict: each file cycles over 1024 pages through a 256-page cache,
//     so every new page evicts, mostly after writing back a dirty run.
func BenchmarkPageCacheParallelWrite(b *testing.B) {
	for _, bc := range []struct {
		name             string
		maxPages, filePg int64
		wbEvery          int
	}{
		{"fit", 2048, 64, 64},
		{"evict", 256, 1024, 0},
	} {
		b.Run(bc.name, func(b *testing.B) {
			const files = 16
			b.SetBytes(4096)
			b.ReportAllocs()
			dev := nullDev{memdev.New(benchDev)}
			c, err := iomap.NewPageCache(dev, iomap.PageCacheOptions{PageSize: 4096, MaxPages: int(bc.maxPages)})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			var wg sync.WaitGroup
			errc := make(chan error, files)
			b.ResetTimer()
			for g := range files {
				n := b.N / files
				if g < b.N%files {
					n++
				}
				wg.Go(func() {
					buf := make([]byte, 4096)
					key := iomap.Key(g + 1)
					for i := range n {
						off := int64(i) % bc.filePg * 4096
						if _, err := iomap.BufferedWrite(c, linearOps{}, key, buf, off, bc.filePg*4096); err != nil {
							errc <- err
							return
						}
						if bc.wbEvery > 0 && i%bc.wbEvery == bc.wbEvery-1 {
							if err := c.Writeback(key, 0, bc.filePg*4096); err != nil {
								errc <- err
								return
							}
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			close(errc)
			for err := range errc {
				b.Fatal(err)
			}
		})
	}
}
