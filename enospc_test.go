package ext4io_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestConversionsAtFullVolume: when ordinary allocations have used every
// free block, writes into preallocated (unwritten) space still succeed:
// the extent splits their conversions need draw on the reserved pool.
func TestConversionsAtFullVolume(t *testing.T) {
	img := formatImage(t, 32<<20, ext4io.FormatOptions{BlockSize: 1024, ReservedPercent: -1})
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	pre, err := v.Create("prealloc")
	if err != nil {
		t.Fatal(err)
	}
	const preSize = 4 << 20
	if err := pre.Fallocate(ext4io.FallocAllocate, 0, preSize); err != nil {
		t.Fatal(err)
	}
	fill, err := v.Create("fill")
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	var off int64
	for {
		n, err := fill.WriteAt(chunk, off)
		off += int64(n)
		if errors.Is(err, ext4io.ErrNoSpace) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := fill.WriteAt(make([]byte, 1024), off+4096); !errors.Is(err, ext4io.ErrNoSpace) {
		t.Fatalf("ordinary allocation on a full volume: %v", err)
	}
	t.Logf("volume full after %d bytes of filler; %d blocks left to ordinary allocations", off, v.Allocator().FreeBlocks())
	d, err := v.OpenFile("prealloc", ext4io.Direct)
	if err != nil {
		t.Fatal(err)
	}
	model := make([]byte, preSize)
	rng := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, 1024)
	for i := 0; i < 1500; i++ { // every other block: each write splits
		b := rng.Int64N(preSize/2048) * 2
		for j := range buf {
			buf[j] = byte(rng.Uint32()) | 1
		}
		if _, err := d.WriteAt(buf, b*1024); err != nil {
			t.Fatalf("write %d into preallocated space at a full volume: %v", i, err)
		}
		copy(model[b*1024:], buf)
	}
	got := make([]byte, preSize)
	if _, err := pre.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, model) {
		t.Fatal("preallocated file differs from the model")
	}
	exts, _ := pre.Extents()
	t.Logf("%d extents after the conversions; counters %+v", len(exts), v.Counters())
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	e2fs.Fsck(t, img)
}
