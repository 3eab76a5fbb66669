package ext4io_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// fullVolume formats a 32 MiB volume with 1 KiB blocks, preallocates a
// 4 MiB file "prealloc" (one unwritten extent in the inode) and fills the
// rest with a file written until ErrNoSpace.
func fullVolume(t *testing.T, opts ext4io.Options) (img string, v *ext4io.Volume) {
	t.Helper()
	img = formatImage(t, 32<<20, ext4io.FormatOptions{BlockSize: 1024, ReservedPercent: -1})
	opts.Writable = true
	v, err := ext4io.OpenImage(img, opts)
	if err != nil {
		t.Fatal(err)
	}
	pre, err := v.Create("prealloc")
	if err != nil {
		t.Fatal(err)
	}
	if err := pre.Fallocate(ext4io.FallocAllocate, 0, 4<<20); err != nil {
		t.Fatal(err)
	}
	if f, err := v.Create("fill"); err != nil {
		t.Fatal(err)
	} else {
		f.Close()
	}
	// Direct writes allocate as they go: the file's tree blocks too, so
	// that the filler leaves no write-back to fail for them at Close
	// (with ReservedPool -1 there is no pool for it).
	fill, err := v.OpenFile("fill", os.O_RDWR|ext4io.O_DIRECT, 0)
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
	return img, v
}

// TestConversionsAtFullVolume: when ordinary allocations have used every
// free block, writes into preallocated (unwritten) space still succeed:
// the extent splits they need draw on the reserved pool, at submission by
// default and at I/O completion with DeferSplits.
func TestConversionsAtFullVolume(t *testing.T) {
	t.Parallel()
	for _, deferSplits := range []bool{false, true} {
		t.Run(fmt.Sprintf("defer=%v", deferSplits), func(t *testing.T) {
			img, v := fullVolume(t, ext4io.Options{Tuning: ext4io.Tuning{DeferSplits: deferSplits}})
			const preSize = 4 << 20
			d, err := v.OpenFile("prealloc", os.O_RDWR|ext4io.O_DIRECT, 0)
			if err != nil {
				t.Fatal(err)
			}
			model := make([]byte, preSize)
			rng := rand.New(rand.NewPCG(3, 4))
			buf := make([]byte, 1024)
			const writes = 1500
			for i := 0; i < writes; i++ { // every other block: each write splits
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
			if _, err := d.ReadAt(got, 0); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, model) {
				t.Fatal("preallocated file differs from the model")
			}
			exts, _ := d.Extents()
			c := v.Counters()
			t.Logf("%d extents after the conversions; counters %+v", len(exts), c)
			if want := map[bool]uint64{false: 0, true: c.Conversions}[deferSplits]; c.SplitsDeferred != want || c.Conversions == 0 {
				t.Errorf("SplitsDeferred = %d after %d conversions with DeferSplits %v; want %d", c.SplitsDeferred, c.Conversions, deferSplits, want)
			}
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			e2fs.Fsck(t, img)
		})
	}
}

// TestSplitsWithoutReservedPool: with no reserved pool, a write into
// preallocated space whose extent split needs a tree block the full volume
// does not have fails with ErrNoSpace. By default it fails before any data
// is written; with DeferSplits the data reached the device but the range
// stays unwritten. Either way the write reports 0 bytes, the range reads
// as zeroes, the volume stays writable and e2fsck finds nothing to fix.
func TestSplitsWithoutReservedPool(t *testing.T) {
	for _, deferSplits := range []bool{false, true} {
		t.Run(fmt.Sprintf("defer=%v", deferSplits), func(t *testing.T) {
			img, v := fullVolume(t, ext4io.Options{Tuning: ext4io.Tuning{DeferSplits: deferSplits, ReservedPool: -1}})
			d, err := v.OpenFile("prealloc", os.O_RDWR|ext4io.O_DIRECT, 0)
			if err != nil {
				t.Fatal(err)
			}
			data := bytes.Repeat([]byte{0xa5}, 1024)
			// Three extents fit in the inode: the first write splits
			// without a tree block.
			if _, err := d.WriteAt(data, 100*1024); err != nil {
				t.Fatalf("first write (no tree block needed): %v", err)
			}
			// Five do not: the second needs a leaf block.
			n, err := d.WriteAt(data, 2000*1024)
			if !errors.Is(err, ext4io.ErrNoSpace) || n != 0 {
				t.Fatalf("write needing a tree block on a full volume without a pool: n=%d err=%v; want 0, ErrNoSpace", n, err)
			}
			got := make([]byte, 1024)
			if _, err := d.ReadAt(got, 2000*1024); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, make([]byte, 1024)) {
				t.Fatal("the failed write's range does not read as zeroes")
			}
			if c := v.Counters(); deferSplits != (c.SplitsDeferred > 0) {
				t.Errorf("SplitsDeferred = %d with DeferSplits %v", c.SplitsDeferred, deferSplits)
			}
			// Overwrites and writes whose split fits in the inode go on.
			if _, err := d.WriteAt(data, 100*1024); err != nil {
				t.Fatalf("overwrite after the failure: %v", err)
			}
			if _, err := d.WriteAt(data, 101*1024); err != nil {
				t.Fatalf("write next to the written block after the failure: %v", err)
			}
			if err := d.CheckTree(); err != nil {
				t.Fatal(err)
			}
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			e2fs.Fsck(t, img)
			v, err = ext4io.OpenImage(img, ext4io.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			f, err := v.Open("prealloc")
			if err != nil {
				t.Fatal(err)
			}
			all := make([]byte, 4<<20)
			if _, err := f.ReadAt(all, 0); err != nil {
				t.Fatal(err)
			}
			want := make([]byte, 4<<20)
			copy(want[100*1024:], data)
			copy(want[101*1024:], data)
			if !bytes.Equal(all, want) {
				t.Fatal("file after reopen differs from the accepted writes")
			}
		})
	}
}
