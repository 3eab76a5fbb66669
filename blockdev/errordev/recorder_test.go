package errordev_test

import (
	"bytes"
	"testing"

	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

func TestRecorderCrashAt(t *testing.T) {
	const bs = 512
	dev := memdev.NewBlockSize(8*bs, bs)
	dev.WriteAt(bytes.Repeat([]byte{9}, bs), 0) // the start image
	r, err := errordev.NewRecorder(dev)
	if err != nil {
		t.Fatal(err)
	}
	blk := func(c byte, n int) []byte { return bytes.Repeat([]byte{c}, n*bs) }
	r.WriteAt(blk(1, 1), 0)    // 0
	r.Flush()                  // 1: covers 0
	r.WriteAt(blk(2, 1), bs)   // 2
	r.WriteAt(blk(3, 2), 2*bs) // 3
	r.Flush()                  // 4: covers 2, 3
	r.ZeroOut(0, bs)           // 5
	if r.Len() != 6 {
		t.Fatalf("Len %d", r.Len())
	}
	if fl := r.Flushes(); len(fl) != 2 || fl[0] != 1 || fl[1] != 4 {
		t.Fatalf("Flushes %v", fl)
	}
	byteAt := func(img *memdev.Device, off int64) byte {
		var b [1]byte
		img.ReadAt(b[:], off)
		return b[0]
	}
	cases := []struct {
		p         int
		keep      float64
		want      [4]byte // first byte of blocks 0-3
		durable   int
		unflushed int
	}{
		{-1, 1, [4]byte{9, 0, 0, 0}, 0, 0},
		{0, 0, [4]byte{1, 0, 0, 0}, 0, 1}, // the point itself is kept
		{1, 0, [4]byte{1, 0, 0, 0}, 1, 0}, // flushed
		{3, 0, [4]byte{1, 0, 3, 3}, 1, 2}, // 2 dropped, 3 kept (the point)
		{3, 1, [4]byte{1, 2, 3, 3}, 1, 2}, // 2 kept
		{4, 0, [4]byte{1, 2, 3, 3}, 4, 0}, // all flushed
		{5, 0, [4]byte{0, 2, 3, 3}, 4, 1}, // the zero-out at the point
	}
	for _, c := range cases {
		img, rep, err := r.CrashAt(c.p, errordev.CrashAtOptions{KeepProb: c.keep})
		if err != nil {
			t.Fatal(err)
		}
		var got [4]byte
		for i := range got {
			got[i] = byteAt(img, int64(i)*bs)
		}
		if got != c.want || rep.Durable != c.durable || rep.Unflushed != c.unflushed {
			t.Errorf("CrashAt(%d, keep %v) = %v (%v), want %v durable %d unflushed %d", c.p, c.keep, got, rep, c.want, c.durable, c.unflushed)
		}
	}
	// A torn point keeps a subset of its units: over many seeds, both
	// halves of the two-block write at 3 are seen kept and dropped.
	seen := map[[2]byte]bool{}
	for s := range uint64(64) {
		img, _, err := r.CrashAt(3, errordev.CrashAtOptions{Seed: s, Tear: true})
		if err != nil {
			t.Fatal(err)
		}
		seen[[2]byte{byteAt(img, 2*bs), byteAt(img, 3*bs)}] = true
	}
	if len(seen) != 4 {
		t.Errorf("torn write outcomes %v, want all four", seen)
	}
	if _, _, err := r.CrashAt(6, errordev.CrashAtOptions{}); err == nil {
		t.Error("CrashAt past the log succeeded")
	}
}
