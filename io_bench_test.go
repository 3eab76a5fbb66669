package ext4io_test

import (
	"math/rand/v2"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

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
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, WritebackAge: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer v.Close()
	prep := func(name string, mode ext4io.FallocMode) *ext4io.File {
		f, err := v.Create(name)
		if err != nil {
			b.Fatal(err)
		}
		if err := f.Fallocate(mode, 0, size); err != nil {
			b.Fatal(err)
		}
		d, err := v.OpenFile(name, ext4io.Direct)
		if err != nil {
			b.Fatal(err)
		}
		return d
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
	// raw: a second in-memory device of the same kind, every page touched
	// (as the file's blocks are), doing the same I/O.
	raw := memdev.NewBlockSize(size, 4096)
	for off := int64(0); off < size; off += 1 << 20 {
		if _, err := raw.WriteAt(make([]byte, 1<<20), off); err != nil {
			b.Fatal(err)
		}
	}
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
	cached, err := v.OpenFile("cached", ext4io.Direct)
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
