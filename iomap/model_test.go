package iomap_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/iomap"
)

// vectorDev is a device with vectored writes (blockdev.VectorWriter): it
// joins the buffers and writes them with one WriteAt, and counts its
// vectored writes.
type vectorDev struct {
	blockdev.Device
	writes atomic.Int64
}

func (d *vectorDev) WriteVAt(bufs [][]byte, off int64) (int, error) {
	d.writes.Add(1)
	return d.WriteAt(bytes.Join(bufs, nil), off)
}

// pattern fills the device so missing zeroing shows up as 0xA5 bytes.
func patternDev(t testing.TB, size int64) *memdev.Device {
	dev := memdev.New(size)
	buf := bytes.Repeat([]byte{0xA5}, 1<<16)
	for off := int64(0); off < size; off += int64(len(buf)) {
		if _, err := dev.WriteAt(buf[:min(int64(len(buf)), size-off)], off); err != nil {
			t.Fatal(err)
		}
	}
	return dev
}

func testSeed(t *testing.T) uint64 {
	if s := os.Getenv("IOMAP_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	return uint64(time.Now().UnixNano())
}

// TestModel is an fsx-like test: random buffered and direct writes, reads,
// write-back, punch (invalidate), zero range and fallocate on one file,
// checked byte for byte against a []byte model, with a cache small enough
// to force eviction write-back. It runs over a plain device (write-back
// copies each run into one buffer) and over a blockdev.VectorWriter
// (write-back hands the pages to the device). IOMAP_SEED replays a run;
// IOMAP_OPS sets the number of operations.
func TestModel(t *testing.T) {
	for _, tc := range []struct {
		bs       int64
		vectored bool
	}{{1024, false}, {4096, false}, {1024, true}, {4096, true}} {
		bs := tc.bs
		t.Run(fmt.Sprintf("bs%d/vectored=%v", bs, tc.vectored), func(t *testing.T) {
			seed := testSeed(t)
			nops := 3000
			if testing.Short() {
				nops = 500
			}
			if s := os.Getenv("IOMAP_OPS"); s != "" {
				nops, _ = strconv.Atoi(s)
			}
			var log []string
			defer func() {
				if t.Failed() {
					start := max(0, len(log)-30)
					t.Logf("seed %d (IOMAP_SEED=%d); last ops:\n%s", seed, seed, fmt.Sprint(log[start:]))
				}
			}()
			runModel(t, seed, bs, nops, tc.vectored, &log)
		})
	}
}

func runModel(t *testing.T, seed uint64, bs int64, nops int, vectored bool, log *[]string) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	const maxSize = 256 << 10
	devSize := int64(64 << 20)
	var dev blockdev.Device = patternDev(t, devSize)
	var vdev *vectorDev
	if vectored {
		vdev = &vectorDev{Device: dev}
		dev = vdev
	}
	fs := newTinyFS(bs, 0, devSize/bs)
	c, err := iomap.NewPageCache(dev, iomap.PageCacheOptions{PageSize: int(bs), MaxPages: 8 + r.IntN(8), MaxRunBytes: int(bs) * 4})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if vdev != nil {
		defer func() {
			if !t.Failed() && vdev.writes.Load() == 0 {
				t.Errorf("write-back made no vectored write in %d operations", nops)
			}
		}()
	}
	const key = 1
	model := make([]byte, maxSize+64<<10)
	var size int64
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("op %d: "+format, append([]any{len(*log)}, args...)...)
	}
	check := func(what string, got []byte, off int64) {
		t.Helper()
		want := model[off : off+int64(len(got))]
		if !bytes.Equal(got, want) {
			i := 0
			for got[i] == want[i] {
				i++
			}
			fail("%s at %d: byte %d (file %d) = %#x, want %#x", what, off, i, off+int64(i), got[i], want[i])
		}
	}
	randData := func(n int64) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32()) | 1 // never zero, so zeroing bugs show
		}
		return b
	}
	for range nops {
		switch op := r.IntN(100); {
		case op < 30: // buffered write
			off := r.Int64N(maxSize)
			n := 1 + r.Int64N(3*bs)
			*log = append(*log, fmt.Sprintf("bwrite(%d,%d)", off, n))
			data := randData(n)
			if got, err := iomap.BufferedWrite(c, fs, key, data, off, size); err != nil || int64(got) != n {
				fail("buffered write: %d, %v", got, err)
			}
			copy(model[off:], data)
			size = max(size, off+n)
		case op < 45: // direct write, aligned to 512
			off := r.Int64N(maxSize/512) * 512
			n := (1 + r.Int64N(int64(4*bs/512))) * 512
			*log = append(*log, fmt.Sprintf("dwrite(%d,%d)", off, n))
			if err := c.Writeback(key, off, off+n); err != nil {
				fail("writeback before dio: %v", err)
			}
			c.Invalidate(key, off, off+n)
			data := randData(n)
			if got, err := iomap.DirectWrite(dev, fs, data, off, fs.dio()); err != nil || int64(got) != n {
				fail("direct write: %d, %v", got, err)
			}
			copy(model[off:], data)
			size = max(size, off+n)
		case op < 65: // buffered read
			off := r.Int64N(maxSize)
			n := 1 + r.Int64N(4*bs)
			*log = append(*log, fmt.Sprintf("bread(%d,%d)", off, n))
			buf := make([]byte, n)
			got, err := iomap.BufferedRead(c, fs, key, buf, off, size)
			wantN := max(0, min(n, size-off))
			if int64(got) != wantN || (err != nil && !(errors.Is(err, io.EOF) && wantN < n)) {
				fail("buffered read (%d,%d) size %d: %d, %v", off, n, size, got, err)
			}
			check("buffered read", buf[:got], off)
		case op < 72: // direct read
			off := r.Int64N(maxSize/512) * 512
			n := (1 + r.Int64N(int64(4*bs/512))) * 512
			*log = append(*log, fmt.Sprintf("dread(%d,%d)", off, n))
			if err := c.Writeback(key, off, off+n); err != nil {
				fail("writeback before dio read: %v", err)
			}
			buf := make([]byte, n)
			if got, err := iomap.DirectRead(dev, fs, buf, off, nil); err != nil || int64(got) != n {
				fail("direct read: %d, %v", got, err)
			}
			check("direct read", buf, off)
		case op < 80: // write-back
			off := r.Int64N(maxSize)
			n := r.Int64N(maxSize)
			*log = append(*log, fmt.Sprintf("writeback(%d,%d)", off, n))
			if err := c.Writeback(key, off, off+n); err != nil {
				fail("writeback: %v", err)
			}
		case op < 86: // punch: invalidate + remove blocks
			off := r.Int64N(maxSize/bs) * bs
			n := (1 + r.Int64N(4)) * bs
			*log = append(*log, fmt.Sprintf("punch(%d,%d)", off, n))
			c.Invalidate(key, off, off+n)
			fs.punch(off, off+n)
			clear(model[off : off+n])
		case op < 93: // zero range inside the file
			if size == 0 {
				continue
			}
			off := r.Int64N(size)
			n := min(1+r.Int64N(3*bs), size-off)
			*log = append(*log, fmt.Sprintf("zero(%d,%d)", off, n))
			if err := iomap.ZeroRange(c, fs, key, off, n, size); err != nil {
				fail("zero range: %v", err)
			}
			clear(model[off : off+n])
		case op < 97: // fallocate keep-size
			off := r.Int64N(maxSize/bs) * bs
			n := (1 + r.Int64N(4)) * bs
			*log = append(*log, fmt.Sprintf("falloc(%d,%d)", off, n))
			if err := fs.fallocate(off, off+n); err != nil {
				fail("fallocate: %v", err)
			}
		default: // sync and drop the cache: the device must hold everything
			*log = append(*log, "sync+forget")
			if err := c.Sync(); err != nil {
				fail("sync: %v", err)
			}
			c.Forget(key)
			if p, d := c.Len(); p != 0 || d != 0 {
				fail("after forget: %d pages, %d dirty", p, d)
			}
		}
		if p, _ := c.Len(); p > 16 {
			fail("cache holds %d pages, bound %d", p, 16)
		}
	}
	// Final: everything written back, cache dropped, whole file compared.
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
	c.Forget(key)
	buf := make([]byte, size)
	if got, err := iomap.BufferedRead(c, fs, key, buf, 0, size); err != nil || int64(got) != size {
		t.Fatalf("final read: %d, %v", got, err)
	}
	check("final buffered read", buf, 0)
	al := (size + 511) &^ 511
	dbuf := make([]byte, al)
	if _, err := iomap.DirectRead(dev, fs, dbuf, 0, nil); err != nil {
		t.Fatal(err)
	}
	check("final direct read", dbuf, 0)
	// No delalloc may survive a sync.
	for lb := int64(0); lb < (size+bs-1)/bs; lb++ {
		if fs.state(lb) == bDelalloc {
			t.Fatalf("block %d still delalloc after sync", lb)
		}
	}
}
