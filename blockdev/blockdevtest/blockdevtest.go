// Package blockdevtest is the conformance suite every blockdev.Device
// backend runs: round trips at aligned and unaligned offsets, io.EOF at the
// end, refused out-of-range writes, ZeroOut, Discard, concurrency, a random
// model test and Close semantics.
package blockdevtest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ext4io/ext4io/blockdev"
)

// Size is the device size the suite asks for, a multiple of 4096.
const Size = 4 << 20

// NewFunc returns a new, all-zero device of size bytes, or calls t.Skip.
// The suite closes the device; the function registers any other cleanup.
type NewFunc func(t *testing.T, size int64) blockdev.Device

// Run runs the conformance suite as subtests of t.
func Run(t *testing.T, newDevice NewFunc) {
	tests := []struct {
		name string
		fn   func(*testing.T, blockdev.Device)
	}{
		{"Geometry", testGeometry},
		{"RoundTripAligned", testRoundTripAligned},
		{"RoundTripUnaligned", testRoundTripUnaligned},
		{"ReadPastEnd", testReadPastEnd},
		{"WriteOutOfRange", testWriteOutOfRange},
		{"ZeroOut", testZeroOut},
		{"Discard", testDiscard},
		{"Concurrent", testConcurrent},
		{"Model", testModel},
		{"Close", testClose},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newDevice(t, Size)
			t.Cleanup(func() { d.Close() })
			tc.fn(t, d)
		})
	}
}

// Pattern returns n recognisable bytes for the range at off, written with
// the given seed: byte i depends on seed and off+i, so data landing at the
// wrong offset or from the wrong write is detected. No byte is zero.
func Pattern(seed uint64, off int64, n int) []byte {
	p := make([]byte, n)
	for i := range p {
		x := (uint64(off)+uint64(i))*0x9E3779B97F4A7C15 ^ seed*0xC2B2AE3D27D4EB4F
		x ^= x >> 29
		p[i] = byte(x) | 1
	}
	return p
}

func write(t *testing.T, d blockdev.Device, p []byte, off int64) {
	t.Helper()
	n, err := d.WriteAt(p, off)
	if err != nil || n != len(p) {
		t.Fatalf("WriteAt(%d bytes, %d) = %d, %v", len(p), off, n, err)
	}
}

func read(t *testing.T, d blockdev.Device, off int64, n int) []byte {
	t.Helper()
	p := make([]byte, n)
	got, err := d.ReadAt(p, off)
	if err != nil || got != n {
		t.Fatalf("ReadAt(%d bytes, %d) = %d, %v", n, off, got, err)
	}
	return p
}

func expect(t *testing.T, d blockdev.Device, want []byte, off int64, what string) {
	t.Helper()
	got := read(t, d, off, len(want))
	if i := firstDiff(got, want); i >= 0 {
		t.Fatalf("%s: byte at %d = %#x, want %#x", what, off+int64(i), got[i], want[i])
	}
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

func testGeometry(t *testing.T, d blockdev.Device) {
	if d.Size() != Size {
		t.Errorf("Size() = %d, want %d", d.Size(), Size)
	}
	if l := d.LogicalBlockSize(); l <= 0 || l&(l-1) != 0 {
		t.Errorf("LogicalBlockSize() = %d, want a positive power of two", l)
	}
	expect(t, d, make([]byte, 64<<10), 0, "new device")
	expect(t, d, make([]byte, 64<<10), Size-64<<10, "new device")
	if err := d.Flush(); err != nil {
		t.Errorf("Flush on a new device: %v", err)
	}
}

func testRoundTripAligned(t *testing.T, d blockdev.Device) {
	lbs := int64(d.LogicalBlockSize())
	cases := []struct{ off, n int64 }{
		{0, lbs}, {lbs, 4096}, {8192, 64 << 10}, {1 << 20, 1<<20 + 4096}, {Size - 4096, 4096},
	}
	for i, c := range cases {
		p := Pattern(uint64(i+1), c.off, int(c.n))
		write(t, d, p, c.off)
		expect(t, d, p, c.off, fmt.Sprintf("aligned write %d", i))
	}
	if err := d.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	// Later writes overwrote earlier ones nowhere: every range still holds its own.
	for i, c := range cases {
		expect(t, d, Pattern(uint64(i+1), c.off, int(c.n)), c.off, fmt.Sprintf("aligned write %d after flush", i))
	}
}

func testRoundTripUnaligned(t *testing.T, d blockdev.Device) {
	// Background pattern, then unaligned writes; the neighbours must keep
	// the background (read-modify-write must not clobber them).
	const base = 512 << 10
	bg := Pattern(99, base, 1<<20)
	write(t, d, bg, base)
	model := bytes.Clone(bg)
	cases := []struct{ off, n int64 }{
		{1, 1}, {511, 2}, {513, 7}, {4095, 4098}, {10000, 300001}, {777, 1}, {600000, 8191},
	}
	for i, c := range cases {
		p := Pattern(uint64(i+1000), base+c.off, int(c.n))
		write(t, d, p, base+c.off)
		copy(model[c.off:], p)
		expect(t, d, p, base+c.off, fmt.Sprintf("unaligned write %d", i))
	}
	expect(t, d, model, base, "after unaligned writes")
	// Unaligned reads of aligned data, from a buffer at an odd address.
	buf := make([]byte, 70001)
	for _, off := range []int64{3, 4097, 123457} {
		got, err := d.ReadAt(buf[1:], base+off)
		if err != nil || got != len(buf)-1 {
			t.Fatalf("ReadAt odd buffer at %d = %d, %v", base+off, got, err)
		}
		if i := firstDiff(buf[1:], model[off:]); i >= 0 {
			t.Fatalf("odd-buffer read at %d: byte %d differs", base+off, i)
		}
	}
	// Aligned offset, unaligned buffer address.
	p := Pattern(7, 0, 8193)[1:]
	write(t, d, p, 0)
	expect(t, d, p, 0, "aligned offset from odd buffer")
}

func testReadPastEnd(t *testing.T, d blockdev.Device) {
	tail := Pattern(5, Size-10, 10)
	write(t, d, tail, Size-10)
	p := make([]byte, 100)
	n, err := d.ReadAt(p, Size-10)
	if n != 10 || err != io.EOF {
		t.Fatalf("ReadAt across end = %d, %v; want 10, io.EOF", n, err)
	}
	if !bytes.Equal(p[:10], tail) {
		t.Fatalf("ReadAt across end returned wrong bytes")
	}
	for _, off := range []int64{Size, Size + 1, Size + 1<<30, math.MaxInt64} {
		if n, err := d.ReadAt(p, off); n != 0 || err != io.EOF {
			t.Errorf("ReadAt(100, %d) = %d, %v; want 0, io.EOF", off, n, err)
		}
	}
	if n, err := d.ReadAt(p, -1); n != 0 || !errors.Is(err, blockdev.ErrInvalid) {
		t.Errorf("ReadAt at -1 = %d, %v; want ErrInvalid", n, err)
	}
	if n, err := d.ReadAt(nil, Size); n != 0 || (err != nil && err != io.EOF) {
		t.Errorf("empty ReadAt at end = %d, %v", n, err)
	}
}

func testWriteOutOfRange(t *testing.T, d blockdev.Device) {
	p := Pattern(1, 0, 100)
	for _, off := range []int64{Size - 10, Size, Size + 4096, -1, math.MaxInt64 - 10, math.MinInt64} {
		n, err := d.WriteAt(p, off)
		if n != 0 || !errors.Is(err, blockdev.ErrInvalid) {
			t.Errorf("WriteAt(100, %d) = %d, %v; want 0, ErrInvalid", off, n, err)
		}
	}
	if d.Size() != Size {
		t.Errorf("Size after refused writes = %d", d.Size())
	}
	expect(t, d, make([]byte, 10), Size-10, "tail after refused write")
	for _, r := range [][2]int64{{Size - 10, 11}, {-1, 10}, {0, -1}, {math.MaxInt64, math.MaxInt64}} {
		if err := d.ZeroOut(r[0], r[1]); !errors.Is(err, blockdev.ErrInvalid) {
			t.Errorf("ZeroOut(%d, %d) = %v; want ErrInvalid", r[0], r[1], err)
		}
		if err := d.Discard(r[0], r[1]); !errors.Is(err, blockdev.ErrInvalid) {
			t.Errorf("Discard(%d, %d) = %v; want ErrInvalid", r[0], r[1], err)
		}
	}
}

func testZeroOut(t *testing.T, d blockdev.Device) {
	const n = 2 << 20
	model := Pattern(3, 0, n)
	write(t, d, model, 0)
	for _, r := range [][2]int64{{4096, 64 << 10}, {100, 1}, {511, 514}, {200001, 300007}, {n - 4096, 4096}, {0, 0}} {
		if err := d.ZeroOut(r[0], r[1]); err != nil {
			t.Fatalf("ZeroOut(%d, %d): %v", r[0], r[1], err)
		}
		clear(model[r[0] : r[0]+r[1]])
		expect(t, d, model, 0, fmt.Sprintf("after ZeroOut(%d, %d)", r[0], r[1]))
	}
	// Written again after zeroing.
	p := Pattern(4, 4096, 8192)
	write(t, d, p, 4096)
	expect(t, d, p, 4096, "write after ZeroOut")
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
}

func testDiscard(t *testing.T, d blockdev.Device) {
	const n = 1 << 20
	old := Pattern(8, 0, n)
	write(t, d, old, 0)
	lo, hi := int64(12345), int64(700001)
	if err := d.Discard(lo, hi-lo); err != nil {
		t.Fatalf("Discard: %v", err)
	}
	got := read(t, d, 0, n)
	if i := firstDiff(got[:lo], old[:lo]); i >= 0 {
		t.Fatalf("Discard changed byte %d before the range", i)
	}
	if i := firstDiff(got[hi:], old[hi:]); i >= 0 {
		t.Fatalf("Discard changed byte %d after the range", hi+int64(i))
	}
	for i := lo; i < hi; i++ {
		if got[i] != 0 && got[i] != old[i] {
			t.Fatalf("discarded byte %d = %#x: neither zero nor old %#x", i, got[i], old[i])
		}
	}
	if err := d.Discard(0, 0); err != nil {
		t.Errorf("empty Discard: %v", err)
	}
}

// testConcurrent has writers and readers on disjoint ranges whose
// boundaries fall inside logical blocks, so backends that read-modify-write
// must serialise correctly.
func testConcurrent(t *testing.T, d blockdev.Device) {
	const workers, span, rounds = 8, 3001, 30
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			off := int64(w)*span + 7
			buf := make([]byte, span)
			for r := range rounds {
				p := Pattern(uint64(w*1000+r), off, span)
				if n, err := d.WriteAt(p, off); err != nil || n != span {
					errc <- fmt.Errorf("worker %d write: %d, %v", w, n, err)
					return
				}
				if n, err := d.ReadAt(buf, off); err != nil || n != span {
					errc <- fmt.Errorf("worker %d read: %d, %v", w, n, err)
					return
				}
				if i := firstDiff(buf, p); i >= 0 {
					errc <- fmt.Errorf("worker %d round %d: byte %d lost (neighbour clobbered it)", w, r, i)
					return
				}
				if r%10 == 0 {
					if err := d.Flush(); err != nil {
						errc <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	for w := range workers {
		off := int64(w)*span + 7
		expect(t, d, Pattern(uint64(w*1000+rounds-1), off, span), off, fmt.Sprintf("worker %d final", w))
	}
}

// testModel applies random writes, zero-outs and reads and compares with a
// byte slice.
func testModel(t *testing.T, d blockdev.Device) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	const region = 256 << 10
	model := make([]byte, region)
	for i := range 300 {
		off := rng.Int64N(region)
		n := rng.Int64N(min(region-off, 20000) + 1)
		switch rng.IntN(4) {
		case 0, 1:
			p := Pattern(uint64(i), off, int(n))
			write(t, d, p, off)
			copy(model[off:], p)
		case 2:
			if err := d.ZeroOut(off, n); err != nil {
				t.Fatalf("seed %d op %d: ZeroOut(%d, %d): %v", seed, i, off, n, err)
			}
			clear(model[off : off+n])
		case 3:
			got := read(t, d, off, int(n))
			if j := firstDiff(got, model[off:off+n]); j >= 0 {
				t.Fatalf("seed %d op %d: byte %d differs from model", seed, i, off+int64(j))
			}
		}
	}
	expect(t, d, model, 0, fmt.Sprintf("seed %d: final", seed))
}

func testClose(t *testing.T, d blockdev.Device) {
	write(t, d, Pattern(1, 0, 4096), 0)
	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	p := make([]byte, 512)
	if _, err := d.ReadAt(p, 0); !errors.Is(err, blockdev.ErrClosed) {
		t.Errorf("ReadAt after Close = %v, want ErrClosed", err)
	}
	if _, err := d.WriteAt(p, 0); !errors.Is(err, blockdev.ErrClosed) {
		t.Errorf("WriteAt after Close = %v, want ErrClosed", err)
	}
	if err := d.Flush(); !errors.Is(err, blockdev.ErrClosed) {
		t.Errorf("Flush after Close = %v, want ErrClosed", err)
	}
	if err := d.ZeroOut(0, 512); !errors.Is(err, blockdev.ErrClosed) {
		t.Errorf("ZeroOut after Close = %v, want ErrClosed", err)
	}
	if err := d.Discard(0, 512); !errors.Is(err, blockdev.ErrClosed) {
		t.Errorf("Discard after Close = %v, want ErrClosed", err)
	}
	if err := d.Close(); err != nil && !errors.Is(err, blockdev.ErrClosed) {
		t.Errorf("second Close = %v, want nil or ErrClosed", err)
	}
}
