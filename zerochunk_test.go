package ext4io_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/ext4io/ext4io/iomap"
)

// stale is what the tests put in preallocated blocks behind ext4io's back:
// what a deleted file left there. No read may ever return it.
const stale = 0xAB

// fillPhysical writes stale bytes to every block the file's extents map.
func fillPhysical(t *testing.T, f *ext4io.File, dev interface {
	WriteAt([]byte, int64) (int, error)
}) {
	t.Helper()
	err := f.Fiemap(0, 1<<40, func(e iomap.Extent) error {
		_, err := dev.WriteAt(bytes.Repeat([]byte{stale}, int(e.Length)), e.Physical)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestZeroOutChunk: with Options.Tuning.ZeroOutChunk the first direct write into
// a chunk of preallocated space zeroes and converts the chunk (one
// conversion, the chunk's blocks zeroed), later writes into it are
// overwrites, the chunk stops at the on-disk size, writes past it convert
// exactly, and nothing reads the blocks' stale contents; e2fsck is clean.
func TestZeroOutChunk(t *testing.T) {
	t.Parallel()
	const chunk = 64 << 10
	img := formatImage(t, 64<<20, ext4io.FormatOptions{})
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true, Tuning: ext4io.Tuning{ZeroOutChunk: chunk}})
	if err != nil {
		t.Fatal(err)
	}
	f, err := v.Create("f")
	if err != nil {
		t.Fatal(err)
	}
	// 1 MiB + 36 KiB inside i_size (the last chunk cut by EOF at block
	// 265), preallocated on to 2 MiB past it.
	const size = 1<<20 + 36<<10
	if err := f.Fallocate(ext4io.FallocAllocate, 0, size); err != nil {
		t.Fatal(err)
	}
	if err := f.Fallocate(ext4io.FallocKeepSize, size, 2<<20-size); err != nil {
		t.Fatal(err)
	}
	raw, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fillPhysical(t, f, raw)
	raw.Close()
	d, err := v.OpenFile("f", os.O_RDWR|ext4io.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	model := make([]byte, 2<<20)
	write := func(off int64, n int, wantConv, wantZeroed uint64) {
		t.Helper()
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(off/4096) + byte(i/4096) + 1
		}
		before := v.Counters()
		if _, err := d.WriteAt(p, off); err != nil {
			t.Fatal(err)
		}
		copy(model[off:], p)
		c := diff(v.Counters(), before)
		if c.Conversions != wantConv || c.ZeroOutBlocks != wantZeroed {
			t.Errorf("write of %d at %d: %d conversions, %d blocks zeroed; want %d, %d", n, off, c.Conversions, c.ZeroOutBlocks, wantConv, wantZeroed)
		}
	}
	write(5*4096, 4096, 1, 16)      // chunk 0: zeroed and converted whole
	write(9*4096, 4096, 0, 0)       // an overwrite now
	write(60<<10, 8192, 1, 16)      // ends in chunk 1
	write(20*4096, 4096, 0, 0)      // chunk 1 is written
	write(1<<20+8192, 4096, 1, 9)   // the last chunk stops at EOF (block 265)
	write(size+8192, 4096, 1, 0)    // past EOF: converted exactly, nothing zeroed
	write(1<<20+40<<10, 4096, 1, 2) // i_size moved on: blocks 265-266 of the EOF chunk
	// The two writes into converted chunks are overwrites; the ones that
	// converted a chunk are not.
	if got := v.Counters().Overwrites; got != 2 {
		t.Errorf("Overwrites = %d, want 2", got)
	}
	check := func(f *ext4io.File) {
		t.Helper()
		got := make([]byte, len(model))
		n, err := f.ReadAt(got, 0)
		if err != nil && n != int(f.Size()) {
			t.Fatal(err)
		}
		if !bytes.Equal(got[:n], model[:n]) {
			i := 0
			for got[i] == model[i] {
				i++
			}
			t.Fatalf("byte %d is %#x, want %#x", i, got[i], model[i])
		}
	}
	check(d)
	// Chunks 0 and 1 are one written extent now.
	var first iomap.Extent
	if err := d.Fiemap(0, 1, func(e iomap.Extent) error { first = e; return nil }); err != nil {
		t.Fatal(err)
	}
	if first.Length != 2*chunk || first.Flags&iomap.ExtentUnwritten != 0 {
		t.Errorf("first extent %v, want 128 KiB written", first)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	check(fsckOpen(t, img, "f"))
}

// TestZeroOutChunkOption: ZeroOutChunk must be a multiple of the block
// size within bounds.
func TestZeroOutChunkOption(t *testing.T) {
	img := formatImage(t, 16<<20, ext4io.FormatOptions{})
	for _, c := range []int64{-4096, 1000, 64<<20 + 4096} {
		v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true, Tuning: ext4io.Tuning{ZeroOutChunk: c}})
		if !errors.Is(err, ext4io.ErrInvalid) {
			t.Errorf("ZeroOutChunk %d: %v, want ErrInvalid", c, err)
		}
		if err == nil {
			v.Close()
		}
	}
}

// TestZeroOutChunkCrash: a crash at any point of chunk conversions leaves
// each block of the file reading its data (once synced) or zeroes, never
// the stale bytes the preallocated blocks held: the zeroes reach the
// device before the conversion that exposes them is committed.
func TestZeroOutChunkCrash(t *testing.T) {
	t.Parallel()
	preallocCrash(t, ext4io.Options{Tuning: ext4io.Tuning{ZeroOutChunk: 32 << 10}})
}

// TestQueuedConversionCrash is TestZeroOutChunkCrash for the default
// path, whose writes into preallocated space queue their conversions for
// the next commit: crashes keep what Sync made durable, may keep later
// writes, and never expose the blocks' stale contents.
func TestQueuedConversionCrash(t *testing.T) {
	t.Parallel()
	preallocCrash(t, ext4io.Options{})
}

// preallocCrash crashes a volume opened with opts during random direct
// writes into a preallocated file, with and without Sync, and checks the
// crashed images (checkCrashedChunks).
func preallocCrash(t *testing.T, opts ext4io.Options) {
	base := memdev.NewBlockSize(32<<20, 4096)
	if err := ext4io.Format(base, ext4io.FormatOptions{}); err != nil {
		t.Fatal(err)
	}
	dev, err := errordev.NewCrashable(base)
	if err != nil {
		t.Fatal(err)
	}
	opts.Writable, opts.WritebackAge = true, -1
	v, err := ext4io.Open(dev, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	f, err := v.Create("f")
	if err != nil {
		t.Fatal(err)
	}
	const size = 4 << 20
	if err := f.Fallocate(ext4io.FallocAllocate, 0, size); err != nil {
		t.Fatal(err)
	}
	fillPhysical(t, f, dev)
	if err := v.Sync(); err != nil {
		t.Fatal(err)
	}
	d, err := v.OpenFile("f", os.O_RDWR|ext4io.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	synced := make([]byte, size)  // what a crash must keep
	written := make([]byte, size) // what the file holds now
	for round := 0; round < 6; round++ {
		for i := 0; i < 40; i++ {
			off := int64(rng.IntN(size/4096)) * 4096
			p := bytes.Repeat([]byte{byte(1 + rng.IntN(200))}, 4096)
			if _, err := d.WriteAt(p, off); err != nil {
				t.Fatal(err)
			}
			copy(written[off:], p)
		}
		if round%2 == 0 {
			if err := d.Sync(); err != nil {
				t.Fatal(err)
			}
			copy(synced, written)
		}
		for seed := uint64(0); seed < 4; seed++ {
			img, err := dev.Crash(errordev.CrashOptions{Seed: seed + uint64(round)*10, KeepProb: 0.5, TearLast: seed%2 == 1})
			if err != nil {
				t.Fatal(err)
			}
			checkCrashedChunks(t, img, synced, written, fmt.Sprintf("round %d seed %d", round, seed))
		}
	}
}

func checkCrashedChunks(t *testing.T, img blockdev.Device, synced, written []byte, what string) {
	t.Helper()
	ro, err := ext4io.Open(img, ext4io.Options{})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	defer ro.Close()
	g, err := ro.Open("f")
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	got := make([]byte, len(written))
	if _, err := g.ReadAt(got, 0); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	for b := 0; b < len(got); b += 4096 {
		blk := got[b : b+4096]
		switch {
		case bytes.Equal(blk, written[b:b+4096]) && blk[0] != 0:
		case bytes.Equal(blk, synced[b:b+4096]):
		case synced[b] == 0 && bytes.Count(blk, []byte{0}) == 4096:
		default:
			t.Fatalf("%s: block %d holds %#x...; synced %#x, written %#x", what, b/4096, blk[0], synced[b], written[b])
		}
	}
}

// TestZeroOutChunkModel runs random block-aligned direct writes into
// preallocated space with ZeroOutChunk beside buffered writes (whose dirty
// pages keep a chunk from being zeroed), fallocate (allocate, keep-size,
// punch-hole, zero-range), truncate, sync and reopen, checking the file
// against a model after every step, the extent tree each time and e2fsck
// at each reopen.
func TestZeroOutChunkModel(t *testing.T) {
	t.Parallel()
	const bs, maxSize = 4096, 2 << 20
	img := formatImage(t, 64<<20, ext4io.FormatOptions{})
	opts := ext4io.Options{Writable: true, Tuning: ext4io.Tuning{ZeroOutChunk: 32 << 10}, WritebackAge: -1, CommitInterval: -1}
	v, err := ext4io.OpenImage(img, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { v.Close() }()
	f, err := v.Create("f")
	if err != nil {
		t.Fatal(err)
	}
	d, err := v.OpenFile("f", os.O_RDWR|ext4io.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	m := &fsxModel{name: "f"}
	rng := rand.New(rand.NewPCG(11, 3))
	var chunks, partial uint64
	steps := sized(200, 300, 3000)
	for step := 0; step < steps; step++ {
		off := rng.Int64N(maxSize/bs) * bs
		n := (1 + rng.Int64N(6)) * bs
		switch op := rng.IntN(20); {
		case op < 10: // direct, mostly inside the file
			if size := int64(len(m.data)); size > n && rng.IntN(4) > 0 {
				off = rng.Int64N((size-n)/bs+1) * bs
			}
			p := bytes.Repeat([]byte{byte(step) | 1}, int(n))
			before := v.Counters()
			if _, err := d.WriteAt(p, off); err != nil {
				t.Fatalf("step %d: direct write [%d,+%d): %v", step, off, n, err)
			}
			m.write(off, p)
			if c := diff(v.Counters(), before); c.ZeroOutBlocks > 0 {
				chunks++
				if c.ZeroOutBlocks < 8 {
					partial++
				}
			}
		case op < 13: // buffered, unaligned
			p := bytes.Repeat([]byte{byte(step) | 1}, 1+rng.IntN(9000))
			off += rng.Int64N(bs)
			if _, err := f.WriteAt(p, off); err != nil {
				t.Fatalf("step %d: buffered write: %v", step, err)
			}
			m.write(off, p)
		case op < 18:
			modes := []ext4io.FallocMode{ext4io.FallocAllocate, ext4io.FallocKeepSize, ext4io.FallocPunchHole, ext4io.FallocZeroRange}
			mode := modes[rng.IntN(len(modes))]
			n *= 8
			if err := f.Fallocate(mode, off, n); err != nil {
				t.Fatalf("step %d: fallocate %v [%d,+%d): %v", step, mode, off, n, err)
			}
			switch mode {
			case ext4io.FallocAllocate:
				m.zero(off, 0, false)
				if end := off + n; end > int64(len(m.data)) {
					m.truncate(end)
				}
			case ext4io.FallocPunchHole:
				m.zero(off, n, false)
			case ext4io.FallocZeroRange:
				m.zero(off, n, true)
			}
		case op == 18:
			size := rng.Int64N(maxSize)
			if err := f.Truncate(size); err != nil {
				t.Fatalf("step %d: truncate %d: %v", step, size, err)
			}
			m.truncate(size)
		default:
			if rng.IntN(2) == 0 {
				if err := v.Sync(); err != nil {
					t.Fatal(err)
				}
				break
			}
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			e2fs.Fsck(t, img)
			if v, err = ext4io.OpenImage(img, opts); err != nil {
				t.Fatal(err)
			}
			if f, err = v.OpenFile("f", os.O_RDWR, 0); err != nil {
				t.Fatal(err)
			}
			if d, err = v.OpenFile("f", os.O_RDWR|ext4io.O_DIRECT, 0); err != nil {
				t.Fatal(err)
			}
		}
		if f.Size() != int64(len(m.data)) {
			t.Fatalf("step %d: size %d, model %d", step, f.Size(), len(m.data))
		}
		got := make([]byte, len(m.data))
		if k, err := f.ReadAt(got, 0); k != len(got) {
			t.Fatalf("step %d: read %d of %d: %v", step, k, len(got), err)
		}
		if !bytes.Equal(got, m.data) {
			i := 0
			for got[i] == m.data[i] {
				i++
			}
			t.Fatalf("step %d: byte %d (block %d) is %#x, want %#x", step, i, i/bs, got[i], m.data[i])
		}
		if err := f.CheckTree(); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
	t.Logf("%d chunk conversions, %d of them cut short (EOF, dirty pages, other data)", chunks, partial)
	if chunks < 20 {
		t.Errorf("only %d chunk conversions: the test no longer exercises ZeroOutChunk", chunks)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	e2fs.Fsck(t, img)
}
