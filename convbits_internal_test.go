package ext4io

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestConvBits checks convBits against a bool per block over random sets
// and clears across four regions, including a clear past the largest file:
// in the first leaf of the region directory (not region 0), across two of
// its leaves, and at the end of the 32-bit block space.
func TestConvBits(t *testing.T) {
	t.Parallel()
	for _, base := range []uint32{3 * escRegion, (convLeafLen - 2) * escRegion, 1<<32 - 4*escRegion} {
		t.Run(fmt.Sprint(base), func(t *testing.T) { testConvBits(t, base) })
	}
}

func testConvBits(t *testing.T, base uint32) {
	const span = 4 * escRegion
	rng := rand.New(rand.NewPCG(7, uint64(base)))
	var c convBits
	model := make([]bool, span)
	check := func(step int) {
		t.Helper()
		for i := 0; i < 64; i++ {
			b := rng.IntN(span)
			limit := uint32(1 + rng.IntN(3*escRegion))
			w, n := c.run(base+uint32(b), limit)
			if w != model[b] {
				t.Fatalf("step %d: block %d written=%v, model %v", step, b, w, model[b])
			}
			want := uint32(0)
			regionEnd := (b/escRegion + 1) * escRegion
			for j := b; j < regionEnd && want < limit && model[j] == w; j++ {
				want++
			}
			if n != want {
				t.Fatalf("step %d: run at %d (limit %d) = %d blocks, want %d", step, b, limit, n, want)
			}
		}
	}
	if w, n := c.run(base, 10); w || n != 10 {
		t.Fatalf("empty: run = %v %d", w, n)
	}
	for step := range sizedInternal(1000, 1000, 3000) {
		lo := rng.IntN(span)
		n := 1 + rng.IntN(min(span-lo, []int{1, 7, 70, 700, 9000}[rng.IntN(5)]))
		on := rng.IntN(3) > 0
		if on {
			c.set(base+uint32(lo), uint32(n))
		} else {
			c.clear(uint64(base)+uint64(lo), uint64(n))
		}
		for i := lo; i < lo+n; i++ {
			model[i] = on
		}
		check(step)
	}
	c.clear(uint64(base)+escRegion, maxFileBlocks) // past the largest file: every region visited
	for i := escRegion; i < span; i++ {
		model[i] = false
	}
	check(-1)
}

// TestConvBitsTinyCache runs queued writes into two preallocated files
// with an extent-status cache budget of 4 KiB, so that the shrinker keeps
// dropping the entries the bitmaps sit beside: lookups refill from the
// tree and the queue. Reads, punches (which apply the queue first),
// truncates, Syncs and the queue's full batches are checked against a
// model, then the image passes e2fsck and reads back the same.
func TestConvBitsTinyCache(t *testing.T) {
	t.Parallel()
	dev := memdev.NewBlockSize(64<<20, 4096)
	if err := Format(dev, FormatOptions{BlockSize: 4096}); err != nil {
		t.Fatal(err)
	}
	v, err := Open(dev, Options{Writable: true, WritebackAge: -1, CommitInterval: -1, CacheBudget: 4096})
	if err != nil {
		t.Fatal(err)
	}
	const blocks = 2048 // 8 MiB each
	names := []string{"a", "b"}
	var files []*File
	models := make([][]byte, len(names))
	for i, name := range names {
		f, d := preallocated(t, v, name, blocks*4096)
		f.Close()
		files = append(files, d)
		models[i] = make([]byte, blocks*4096)
	}
	rng := rand.New(rand.NewPCG(11, 12))
	checkBlock := func(i, b int, what string) {
		t.Helper()
		got := make([]byte, 4096)
		if _, err := files[i].ReadAt(got, int64(b)*4096); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		if want := models[i][b*4096 : (b+1)*4096]; !bytes.Equal(got, want) {
			t.Fatalf("%s: %s block %d holds %#x, want %#x", what, names[i], b, got[0], want[0])
		}
	}
	before := v.Counters()
	for step := 0; step < 6000; step++ {
		i := rng.IntN(len(files))
		b := rng.IntN(blocks)
		switch r := rng.IntN(100); {
		case r < 75:
			n := 1 + rng.IntN(4)
			n = min(n, blocks-b)
			p := bytes.Repeat([]byte{byte(1 + rng.IntN(250))}, n*4096)
			if int64(b+n)*4096 > files[i].Size() {
				continue // extending writes take another path
			}
			if _, err := files[i].WriteAt(p, int64(b)*4096); err != nil {
				t.Fatalf("step %d: write: %v", step, err)
			}
			copy(models[i][b*4096:], p)
		case r < 93:
			checkBlock(i, b, fmt.Sprintf("step %d", step))
		case r < 96:
			n := min(1+rng.IntN(16), blocks-b)
			if err := files[i].Fallocate(FallocPunchHole, int64(b)*4096, int64(n)*4096); err != nil {
				t.Fatalf("step %d: punch: %v", step, err)
			}
			clear(models[i][b*4096 : (b+n)*4096])
		case r < 98:
			if err := v.Sync(); err != nil {
				t.Fatalf("step %d: sync: %v", step, err)
			}
		default:
			// Preallocate again what a punch freed: reallocated blocks
			// must read as zeroes, whatever the bitmaps said before.
			if err := files[i].Fallocate(FallocKeepSize, 0, blocks*4096); err != nil {
				t.Fatalf("step %d: fallocate: %v", step, err)
			}
		}
	}
	c := v.Counters()
	if q := c.ConversionsQueued - before.ConversionsQueued; q < 1000 {
		t.Fatalf("only %d conversions queued", q)
	}
	if st := v.CacheStats(); st.Reclaimed == 0 {
		t.Fatalf("the cache never reclaimed: %+v", st)
	}
	for i := range files {
		for b := 0; b < blocks; b++ {
			checkBlock(i, b, "at the end")
		}
		files[i].Close()
	}
	ro := reopenChecked(t, v, dev, names[0]).v
	for i, name := range names {
		f, err := ro.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, blocks*4096)
		if _, err := f.ReadAt(got, 0); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		if !bytes.Equal(got, models[i]) {
			t.Fatalf("reopened %s differs from the model", name)
		}
	}
}
