package blockdevtest

import (
	"math/rand/v2"
	"testing"

	"github.com/ext4io/ext4io/blockdev"
)

// BenchRandom4K benchmarks 4 KiB ReadAt and WriteAt at random 4 KiB-aligned
// offsets over the whole of d, after filling d with data so reads do not
// hit holes. d is closed at the end.
func BenchRandom4K(b *testing.B, d blockdev.Device) {
	defer d.Close()
	const bs = 4096
	blocks := d.Size() / bs
	fill := Pattern(1, 0, 1<<20)
	for off := int64(0); off < d.Size(); off += int64(len(fill)) {
		n := min(int64(len(fill)), d.Size()-off)
		if _, err := d.WriteAt(fill[:n], off); err != nil {
			b.Fatal(err)
		}
	}
	if err := d.Flush(); err != nil {
		b.Fatal(err)
	}
	// A 4096-byte allocation is 4096-aligned in Go's allocator, so direct
	// I/O takes its zero-copy path.
	buf := make([]byte, bs)
	b.Run("ReadAt", func(b *testing.B) {
		rng := rand.New(rand.NewPCG(1, 2))
		b.SetBytes(bs)
		for b.Loop() {
			if _, err := d.ReadAt(buf, rng.Int64N(blocks)*bs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("WriteAt", func(b *testing.B) {
		rng := rand.New(rand.NewPCG(3, 4))
		b.SetBytes(bs)
		for b.Loop() {
			if _, err := d.WriteAt(buf, rng.Int64N(blocks)*bs); err != nil {
				b.Fatal(err)
			}
		}
	})
}
