package errordev_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/blockdevtest"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

func TestConformance(t *testing.T) {
	t.Run("Device", func(t *testing.T) {
		blockdevtest.Run(t, func(t *testing.T, size int64) blockdev.Device {
			return errordev.New(memdev.New(size), errordev.NewToggle(errordev.Always()))
		})
	})
	t.Run("Crashable", func(t *testing.T) {
		blockdevtest.Run(t, func(t *testing.T, size int64) blockdev.Device {
			c, err := errordev.NewCrashable(memdev.New(size))
			if err != nil {
				t.Fatal(err)
			}
			return c
		})
	})
}

func mustWrite(t *testing.T, d blockdev.Device, p []byte, off int64) {
	t.Helper()
	if _, err := d.WriteAt(p, off); err != nil {
		t.Fatalf("WriteAt(%d): %v", off, err)
	}
}

func contents(t *testing.T, d blockdev.Device, off int64, n int) []byte {
	t.Helper()
	p := make([]byte, n)
	if _, err := d.ReadAt(p, off); err != nil {
		t.Fatalf("ReadAt(%d): %v", off, err)
	}
	return p
}

func TestOnIndexReachesCaller(t *testing.T) {
	mem := memdev.New(1 << 20)
	cnt := errordev.NewCounter(errordev.OnIndex(errordev.Write, 2))
	d := errordev.New(mem, cnt)
	for i := range 5 {
		p := blockdevtest.Pattern(uint64(i), int64(i)*4096, 4096)
		_, err := d.WriteAt(p, int64(i)*4096)
		if i == 2 {
			if !errors.Is(err, errordev.ErrInjected) || !errors.Is(err, blockdev.ErrIO) {
				t.Fatalf("write 2 = %v, want ErrInjected wrapping ErrIO", err)
			}
			if !bytes.Equal(contents(t, mem, 2*4096, 4096), make([]byte, 4096)) {
				t.Fatal("failed write reached the device")
			}
			continue
		}
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		if !bytes.Equal(contents(t, mem, int64(i)*4096, 4096), p) {
			t.Fatalf("write %d did not reach the device", i)
		}
	}
	if cnt.Count(errordev.Write) != 5 || cnt.Failed(errordev.Write) != 1 || cnt.Count(errordev.Read) != 0 {
		t.Errorf("counter: %d writes, %d failed, %d reads", cnt.Count(errordev.Write), cnt.Failed(errordev.Write), cnt.Count(errordev.Read))
	}
}

func TestCombinators(t *testing.T) {
	mem := memdev.New(1 << 20)
	buf := make([]byte, 512)
	tog := errordev.NewToggle(errordev.Kinds(errordev.InRange(errordev.Always(), 8192, 4096), errordev.Read, errordev.ZeroOut))
	d := errordev.New(mem, errordev.Any(tog, errordev.After(errordev.Flush, 2)))
	// Disabled toggle: everything passes.
	if _, err := d.ReadAt(buf, 8192); err != nil {
		t.Fatal(err)
	}
	tog.Enable()
	if !tog.Enabled() {
		t.Fatal("toggle not enabled")
	}
	if _, err := d.ReadAt(buf, 8192+4000); !errors.Is(err, blockdev.ErrIO) {
		t.Errorf("read in range = %v, want ErrIO", err)
	}
	if _, err := d.ReadAt(buf, 8192-512); err != nil {
		t.Errorf("read just before range = %v", err)
	}
	if _, err := d.ReadAt(buf, 8192+4096); err != nil {
		t.Errorf("read just after range = %v", err)
	}
	if err := d.ZeroOut(0, 1<<20); !errors.Is(err, errordev.ErrInjected) {
		t.Errorf("zero out over range = %v, want ErrInjected", err)
	}
	if _, err := d.WriteAt(buf, 8192); err != nil {
		t.Errorf("write in range, kind not selected = %v", err)
	}
	tog.Disable()
	if _, err := d.ReadAt(buf, 8192); err != nil {
		t.Errorf("read after Disable = %v", err)
	}
	for i := range 4 {
		err := d.Flush()
		if (i >= 2) != errors.Is(err, blockdev.ErrIO) {
			t.Errorf("flush %d = %v", i, err)
		}
	}
	// Random is deterministic per seed and roughly honours p.
	run := func(seed uint64) []bool {
		inj := errordev.Random(seed, 0.3)
		out := make([]bool, 1000)
		for i := range out {
			out[i] = inj.MaybeError(errordev.Op{Kind: errordev.Read}) != nil
		}
		return out
	}
	a, b := run(7), run(7)
	fails := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatal("Random is not deterministic for a seed")
		}
		if a[i] {
			fails++
		}
	}
	if fails < 200 || fails > 400 {
		t.Errorf("Random(0.3) failed %d of 1000", fails)
	}
}

func newCrashable(t testing.TB, size int64) *errordev.Crashable {
	c, err := errordev.NewCrashable(memdev.New(size))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func crash(t *testing.T, c *errordev.Crashable, o errordev.CrashOptions) *memdev.Device {
	t.Helper()
	img, err := c.Crash(o)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestCrashKeepsExactlyFlushed(t *testing.T) {
	const bs = 4096
	c := newCrashable(t, 1<<20)
	a := blockdevtest.Pattern(1, 0, 10*bs)
	mustWrite(t, c, a, 0)
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	b := blockdevtest.Pattern(2, 10*bs, 10*bs)
	mustWrite(t, c, b, 10*bs)
	cc := blockdevtest.Pattern(3, 0, bs)
	mustWrite(t, c, cc, 0)
	if err := c.ZeroOut(5*bs, bs); err != nil {
		t.Fatal(err)
	}
	if c.Unflushed() != 3 {
		t.Fatalf("Unflushed = %d, want 3", c.Unflushed())
	}
	img := crash(t, c, errordev.CrashOptions{})
	if !bytes.Equal(contents(t, img, 0, 20*bs), append(bytes.Clone(a), make([]byte, 10*bs)...)) {
		t.Fatal("crash image with KeepProb 0 is not exactly the flushed state")
	}
	all := crash(t, c, errordev.CrashOptions{KeepProb: 1})
	if !bytes.Equal(contents(t, all, 0, 1<<20), contents(t, c, 0, 1<<20)) {
		t.Fatal("crash image with KeepProb 1 differs from the live device")
	}
	// The crash images are independent of the live device and each other.
	mustWrite(t, img, b, 0)
	if bytes.Equal(contents(t, c, 0, bs), b[:bs]) {
		t.Fatal("writing a crash image changed the live device")
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if c.Unflushed() != 0 {
		t.Fatalf("Unflushed after Flush = %d", c.Unflushed())
	}
	if !bytes.Equal(contents(t, crash(t, c, errordev.CrashOptions{}), 0, 1<<20), contents(t, c, 0, 1<<20)) {
		t.Fatal("after Flush the crash image differs from the live device")
	}
}

func TestCrashFailedFlushKeepsNothing(t *testing.T) {
	c := newCrashable(t, 1<<20)
	d := errordev.New(c, errordev.OnIndex(errordev.Flush, 0))
	p := blockdevtest.Pattern(1, 0, 8192)
	mustWrite(t, d, p, 0)
	if err := d.Flush(); !errors.Is(err, blockdev.ErrIO) {
		t.Fatalf("flush = %v, want injected ErrIO", err)
	}
	if !bytes.Equal(contents(t, crash(t, c, errordev.CrashOptions{}), 0, 8192), make([]byte, 8192)) {
		t.Fatal("a write before a failed flush survived the crash")
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(contents(t, crash(t, c, errordev.CrashOptions{}), 0, 8192), p) {
		t.Fatal("a write before a successful flush was lost")
	}
}

func TestCrashRandomSubset(t *testing.T) {
	const bs, n = 512, 200
	c := newCrashable(t, 1<<20)
	for i := range n {
		mustWrite(t, c, blockdevtest.Pattern(uint64(i), int64(i)*bs, bs), int64(i)*bs)
	}
	kept := func(seed uint64) []bool {
		img := crash(t, c, errordev.CrashOptions{Seed: seed, KeepProb: 0.5})
		out := make([]bool, n)
		for i := range n {
			got := contents(t, img, int64(i)*bs, bs)
			switch {
			case bytes.Equal(got, blockdevtest.Pattern(uint64(i), int64(i)*bs, bs)):
				out[i] = true
			case !bytes.Equal(got, make([]byte, bs)):
				t.Fatalf("seed %d: write %d is neither absent nor whole", seed, i)
			}
		}
		return out
	}
	a, b, other := kept(1), kept(1), kept(2)
	count, differ := 0, false
	for i := range a {
		if a[i] != b[i] {
			t.Fatal("same seed, different crash image")
		}
		if a[i] {
			count++
		}
		differ = differ || a[i] != other[i]
	}
	if count < n/4 || count > 3*n/4 {
		t.Errorf("KeepProb 0.5 kept %d of %d", count, n)
	}
	if !differ {
		t.Error("different seeds gave the same subset")
	}
}

func TestCrashTearLast(t *testing.T) {
	const lbs, blocks = 512, 8
	c := newCrashable(t, 1<<20)
	old := blockdevtest.Pattern(1, 0, 64<<10)
	mustWrite(t, c, old, 0)
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	// Unaligned start: the first "block" is a partial one.
	const off = 3*lbs + 100
	size := blocks*lbs - 100
	nw := blockdevtest.Pattern(2, off, size)
	mustWrite(t, c, nw, off)
	seen := map[int]bool{}
	for seed := range uint64(64) {
		img := crash(t, c, errordev.CrashOptions{Seed: seed, KeepProb: 1, TearLast: true})
		got := contents(t, img, off, size)
		cut := 0
		for cut < size && got[cut] == nw[cut] && got[cut] != old[off+cut] {
			cut++
		}
		if !bytes.Equal(got[cut:], old[off+cut:off+size]) {
			t.Fatalf("seed %d: torn write is not a prefix of new data then old data", seed)
		}
		if (off+cut)%lbs != 0 && cut != 0 {
			t.Fatalf("seed %d: tear at byte %d is not on a logical block boundary", seed, off+cut)
		}
		if cut == size {
			t.Fatalf("seed %d: the torn write was kept whole", seed)
		}
		seen[cut] = true
	}
	if len(seen) < blocks/2 {
		t.Errorf("only %d distinct tear points in 64 seeds", len(seen))
	}
}

// TestCrashModel runs random writes, zero-outs and flushes and checks, at
// random points, that a crash keeping nothing unflushed equals the state at
// the last flush and one keeping everything equals the live state.
func TestCrashModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	const size = 256 << 10
	c := newCrashable(t, size)
	live, durable := make([]byte, size), make([]byte, size)
	for i := range 2000 {
		off := rng.Int64N(size)
		n := rng.Int64N(min(size-off, 2*4096) + 1)
		switch r := rng.IntN(20); {
		case r < 14:
			p := blockdevtest.Pattern(uint64(i), off, int(n))
			mustWrite(t, c, p, off)
			copy(live[off:], p)
		case r < 16:
			if err := c.ZeroOut(off, n); err != nil {
				t.Fatal(err)
			}
			clear(live[off : off+n])
		case r < 19:
			if err := c.Flush(); err != nil {
				t.Fatal(err)
			}
			copy(durable, live)
		default:
			if !bytes.Equal(contents(t, crash(t, c, errordev.CrashOptions{Seed: uint64(i)}), 0, size), durable) {
				t.Fatalf("seed %d op %d: crash image differs from the last flushed state", seed, i)
			}
			if !bytes.Equal(contents(t, crash(t, c, errordev.CrashOptions{Seed: uint64(i), KeepProb: 1}), 0, size), live) {
				t.Fatalf("seed %d op %d: full crash image differs from the live state", seed, i)
			}
		}
	}
}

// BenchmarkCrashEveryFlush measures a crash image per flush in a workload
// of 4 KiB writes over a few thousand blocks, flushing every 8 writes.
func BenchmarkCrashEveryFlush(b *testing.B) {
	const blocks = 4096
	c, err := errordev.NewCrashable(memdev.New(blocks * 4096))
	if err != nil {
		b.Fatal(err)
	}
	p := blockdevtest.Pattern(1, 0, 4096)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range blocks {
		c.WriteAt(p, int64(i)*4096)
	}
	for b.Loop() {
		for range 8 {
			c.WriteAt(p, rng.Int64N(blocks)*4096)
		}
		if err := c.Flush(); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Crash(errordev.CrashOptions{KeepProb: 0.5, TearLast: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCrashableOverFile wraps a file device that already holds data: its
// contents at wrap time are the durable state.
func TestCrashableOverFile(t *testing.T) {
	f, err := blockdev.CreateFile(t.TempDir()+"/img", 3<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	old := blockdevtest.Pattern(1, 1<<20+7, 5000)
	mustWrite(t, f, old, 1<<20+7)
	c, err := errordev.NewCrashable(f)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, c, blockdevtest.Pattern(2, 1<<20, 100), 1<<20+100)
	want := make([]byte, 3<<20)
	copy(want[1<<20+7:], old)
	if !bytes.Equal(contents(t, crash(t, c, errordev.CrashOptions{}), 0, 3<<20), want) {
		t.Fatal("crash image of a wrapped file is not its contents at wrap time")
	}
}
