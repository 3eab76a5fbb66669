package memdev_test

import (
	"bytes"
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
