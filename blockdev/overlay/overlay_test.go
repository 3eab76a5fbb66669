package overlay_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/blockdevtest"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/blockdev/overlay"
)

// TestConformance runs the suite over a base that reads as zeroes, as the
// suite's NewFunc asks.
func TestConformance(t *testing.T) {
	blockdevtest.Run(t, func(t *testing.T, size int64) blockdev.Device {
		return overlay.New(memdev.New(size))
	})
}

// TestShortLastChunk: on a base whose size is not a multiple of
// ChunkSize, copying the last chunk reads past the base's end, and reads
// across the end stop there.
func TestShortLastChunk(t *testing.T) {
	const size = 2*overlay.ChunkSize + 512
	base, want := patterned(t, size)
	o := overlay.New(base)
	w := blockdevtest.Pattern(4, size-100, 100)
	if _, err := o.WriteAt(w, size-100); err != nil {
		t.Fatal(err)
	}
	copy(want[size-100:], w)
	if got := readAll(t, o); !bytes.Equal(got, want) {
		t.Error("overlay contents differ from the model")
	}
	p := make([]byte, 200)
	if n, err := o.ReadAt(p, size-50); n != 50 || err != io.EOF || !bytes.Equal(p[:50], w[50:]) {
		t.Errorf("ReadAt across the end = %d, %v", n, err)
	}
	if _, err := o.WriteAt(w, size-99); !errors.Is(err, blockdev.ErrInvalid) {
		t.Errorf("WriteAt across the end = %v, want ErrInvalid", err)
	}
}

// patterned returns a memdev of n bytes filled with pattern seed 9.
func patterned(t *testing.T, n int64) (*memdev.Device, []byte) {
	t.Helper()
	base := memdev.New(n)
	want := blockdevtest.Pattern(9, 0, int(n))
	if _, err := base.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	return base, want
}

func readAll(t *testing.T, d blockdev.Device) []byte {
	t.Helper()
	p := make([]byte, d.Size())
	if n, err := d.ReadAt(p, 0); n != len(p) || err != nil {
		t.Fatalf("ReadAt: %d, %v", n, err)
	}
	return p
}

// TestCopyOnWrite: the overlay shows the base with its own writes and
// zeroed ranges over it; the base never changes.
func TestCopyOnWrite(t *testing.T) {
	const size = 64 << 10
	base, orig := patterned(t, size)
	o := overlay.New(base)
	if got := readAll(t, o); !bytes.Equal(got, orig) {
		t.Fatal("fresh overlay does not read as its base")
	}
	want := bytes.Clone(orig)
	w := blockdevtest.Pattern(2, 5000, 7000) // across two chunk boundaries
	if _, err := o.WriteAt(w, 5000); err != nil {
		t.Fatal(err)
	}
	copy(want[5000:], w)
	for _, r := range [][2]int64{{16384, 8192}, {30000, 10}, {size - 100, 100}} {
		if err := o.ZeroOut(r[0], r[1]); err != nil {
			t.Fatal(err)
		}
		clear(want[r[0] : r[0]+r[1]])
	}
	w2 := blockdevtest.Pattern(3, 20000, 50) // into a chunk zeroed whole
	if _, err := o.WriteAt(w2, 20000); err != nil {
		t.Fatal(err)
	}
	copy(want[20000:], w2)
	if err := o.Discard(0, size); err != nil {
		t.Fatal(err)
	}
	if err := o.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, o); !bytes.Equal(got, want) {
		t.Error("overlay contents differ from the model")
	}
	if got := readAll(t, base); !bytes.Equal(got, orig) {
		t.Error("the base changed")
	}
	// Chunks 1-2 (write), 4-5 (zeroed whole, 5 then written), 7 (partly
	// zeroed) and 15 (the tail): 6 chunks, of which chunk 4 holds nothing.
	if got, want := o.Allocated(), int64(5*overlay.ChunkSize); got != want {
		t.Errorf("Allocated = %d, want %d", got, want)
	}
}

// TestReadOnlyBase: an overlay never writes its base, so a base refusing
// writes is no obstacle.
func TestReadOnlyBase(t *testing.T) {
	base, orig := patterned(t, 16<<10)
	ro := errordev.New(base, errordev.Kinds(errordev.Always(), errordev.Write, errordev.ZeroOut, errordev.Discard, errordev.Flush))
	o := overlay.New(ro)
	if _, err := o.WriteAt([]byte("x"), 4095); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{o.ZeroOut(0, 10), o.Discard(0, 10), o.Flush()} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := readAll(t, base); !bytes.Equal(got, orig) {
		t.Error("the base changed")
	}
}

// TestBaseReadError: a write that must copy a chunk from the base fails
// with the base's error and leaves nothing behind.
func TestBaseReadError(t *testing.T) {
	base, _ := patterned(t, 16<<10)
	ed := errordev.New(base, errordev.Kinds(errordev.Always(), errordev.Read))
	o := overlay.New(ed)
	if _, err := o.WriteAt([]byte("x"), 10); !errors.Is(err, blockdev.ErrIO) {
		t.Fatalf("WriteAt over a failing base = %v, want ErrIO", err)
	}
	if o.Allocated() != 0 {
		t.Errorf("failed write left %d bytes", o.Allocated())
	}
	// A chunk zeroed whole needs no base read.
	if err := o.ZeroOut(4096, 4096); err != nil {
		t.Fatal(err)
	}
}

// TestCloseClosesBase: Close drops the overlay and closes the base.
func TestCloseClosesBase(t *testing.T) {
	base := memdev.New(8192)
	o := overlay.New(base)
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if err := base.Flush(); !errors.Is(err, blockdev.ErrClosed) {
		t.Errorf("base Flush after overlay Close = %v, want ErrClosed", err)
	}
}
