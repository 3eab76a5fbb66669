package memdev_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/blockdevtest"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

func TestConformance(t *testing.T) {
	blockdevtest.Run(t, func(t *testing.T, size int64) blockdev.Device { return memdev.New(size) })
}

func TestSparse(t *testing.T) {
	d := memdev.New(1 << 40) // 1 TiB costs nothing until written
	if d.Allocated() != 0 {
		t.Fatalf("new device holds %d bytes", d.Allocated())
	}
	p := blockdevtest.Pattern(1, 1<<39, 10)
	if _, err := d.WriteAt(p, 1<<39+memdev.ChunkSize-5); err != nil {
		t.Fatal(err)
	}
	if got := d.Allocated(); got != 2*memdev.ChunkSize {
		t.Fatalf("10-byte write across a chunk boundary holds %d bytes, want %d", got, 2*memdev.ChunkSize)
	}
	if err := d.ZeroOut(1<<39, 4*memdev.ChunkSize); err != nil {
		t.Fatal(err)
	}
	if got := d.Allocated(); got != 0 {
		t.Fatalf("after ZeroOut holds %d bytes", got)
	}
}

func TestCloneIsolation(t *testing.T) {
	d := memdev.New(1 << 20)
	a := blockdevtest.Pattern(1, 0, 3*memdev.ChunkSize)
	if _, err := d.WriteAt(a, 0); err != nil {
		t.Fatal(err)
	}
	c, err := d.Clone()
	if err != nil {
		t.Fatal(err)
	}
	// Writes to either side after the clone stay on that side.
	b := blockdevtest.Pattern(2, 100, 5000)
	if _, err := d.WriteAt(b, 100); err != nil {
		t.Fatal(err)
	}
	cb := blockdevtest.Pattern(3, 6000, 10)
	if _, err := c.WriteAt(cb, 6000); err != nil {
		t.Fatal(err)
	}
	if err := c.ZeroOut(0, 50); err != nil {
		t.Fatal(err)
	}
	wantD := bytes.Clone(a)
	copy(wantD[100:], b)
	wantC := bytes.Clone(a)
	copy(wantC[6000:], cb)
	clear(wantC[:50])
	for _, x := range []struct {
		name string
		d    *memdev.Device
		want []byte
	}{{"original", d, wantD}, {"clone", c, wantC}} {
		got := make([]byte, len(x.want))
		if _, err := x.d.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, x.want) {
			t.Errorf("%s has the other side's writes", x.name)
		}
	}
}

func BenchmarkRandom4K(b *testing.B) {
	blockdevtest.BenchRandom4K(b, memdev.New(256<<20))
}

// FuzzOps decodes the input as a stream of 6-byte operations (kind, 3-byte
// offset, 2-byte length) on a 64 KiB device and checks every read against
// a byte-slice model; out-of-range operations must fail with ErrInvalid and
// change nothing.
func FuzzOps(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 0, 16, 2, 0, 0, 0, 0, 32})
	f.Add([]byte{0, 0, 15, 255, 16, 0, 1, 0, 16, 0, 1, 0, 2, 0, 0, 0, 255, 255})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const size = 64 << 10
		d := memdev.New(size)
		model := make([]byte, size)
		for i := 0; i+6 <= len(ops); i += 6 {
			o := ops[i : i+6]
			off := int64(o[1])<<16 | int64(o[2])<<8 | int64(o[3])
			n := int64(o[4])<<8 | int64(o[5])
			inRange := off+n <= size
			var err error
			switch o[0] % 4 {
			case 0:
				p := blockdevtest.Pattern(uint64(i), off, int(n))
				_, err = d.WriteAt(p, off)
				if inRange {
					copy(model[off:], p)
				}
			case 1:
				err = d.ZeroOut(off, n)
				if inRange {
					clear(model[off : off+n])
				}
			case 2:
				err = d.Discard(off, n)
				if inRange {
					clear(model[off : off+n])
				}
			case 3:
				p := make([]byte, n)
				var got int
				got, err = d.ReadAt(p, off)
				want := max(0, min(n, size-off))
				if int64(got) != want || (want > 0 && !bytes.Equal(p[:got], model[off:off+want])) {
					t.Fatalf("op %d: read %d at %d = %d bytes, wrong contents or count", i/6, n, off, got)
				}
				if !inRange && err == nil {
					t.Fatalf("op %d: read past end without io.EOF", i/6)
				}
				continue
			}
			if inRange != (err == nil) {
				t.Fatalf("op %d kind %d at %d len %d: err %v, in range %v", i/6, o[0]%4, off, n, err, inRange)
			}
			if err != nil && !errors.Is(err, blockdev.ErrInvalid) {
				t.Fatalf("op %d: %v, want ErrInvalid", i/6, err)
			}
		}
		all := make([]byte, size)
		if _, err := d.ReadAt(all, 0); err != nil || !bytes.Equal(all, model) {
			t.Fatalf("final contents differ from the model (%v)", err)
		}
	})
}
