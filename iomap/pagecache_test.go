package iomap_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/iomap"
)

// A writer of 10x the cache capacity: the bound holds after every write,
// eviction writes dirty data back first, and nothing is lost.
func TestPageCacheBound(t *testing.T) {
	const bs, maxPages = 4096, 16
	dev := patternDev(t, 4<<20)
	fs := newTinyFS(bs, 0, 1024)
	c, err := iomap.NewPageCache(dev, iomap.PageCacheOptions{PageSize: bs, MaxPages: maxPages})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := c.Counters()
	total := int64(10 * maxPages * bs)
	want := make([]byte, total)
	for i := range want {
		want[i] = byte(i*7 + i>>12)
	}
	for off := int64(0); off < total; off += 3000 { // unaligned chunks
		n := min(3000, total-off)
		if _, err := iomap.BufferedWrite(c, fs, 1, want[off:off+n], off, off); err != nil {
			t.Fatal(err)
		}
		if p, _ := c.Len(); p > maxPages {
			t.Fatalf("at %d: %d pages cached, bound %d", off, p, maxPages)
		}
	}
	d := c.Counters().Sub(before)
	if d.EvictionWritebacks == 0 || d.PagesEvicted == 0 || d.PagesWrittenBack < 9*maxPages {
		t.Fatalf("counters %+v: want eviction write-backs", d)
	}
	// Pages still cached are dirty: read them back through the cache, then
	// drop the cache without write-back to check what eviction wrote.
	got := make([]byte, total)
	if _, err := iomap.BufferedRead(c, fs, 1, got, 0, total); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("read through cache differs")
	}
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
	c.Forget(1)
	if _, err := iomap.DirectRead(dev, fs, got, 0, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("device contents differ")
	}
}

// Write-back errors keep pages dirty and are reported; the background
// flusher writes old dirty pages and stops on Close without leaking.
func TestWritebackErrorAndFlusher(t *testing.T) {
	const bs = 4096
	mem := memdev.New(1 << 20)
	tog := errordev.NewToggle(errordev.Always())
	dev := errordev.New(mem, errordev.Kinds(tog, errordev.Write))
	fs := newTinyFS(bs, 0, 256)
	c, err := iomap.NewPageCache(dev, iomap.PageCacheOptions{PageSize: bs, MaxPages: 8})
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte{5}, 2*bs)
	if _, err := iomap.BufferedWrite(c, fs, 1, data, 0, 0); err != nil {
		t.Fatal(err)
	}
	tog.Enable()
	if err := c.Writeback(1, 0, 2*bs); !errors.Is(err, errordev.ErrInjected) {
		t.Fatalf("writeback: %v, want injected", err)
	}
	if _, d := c.Len(); d != 2 {
		t.Fatalf("%d dirty pages after failed write-back, want 2", d)
	}
	tog.Disable()
	g := runtime.NumGoroutine()
	if err := c.StartFlusher(5*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	// Pages turn clean when their write-back starts (as the kernel clears
	// a page's dirty bit before its I/O); the conversion comes with the
	// mapping's End, after the write. Wait for both.
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, d := c.Len()
		if d == 0 && fs.state(0) == bWritten && fs.state(1) == bWritten {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("flusher did not write back: %d dirty pages, block states %v %v", d, fs.state(0), fs.state(1))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// Close waits for the flusher's close(done); the goroutine still has
	// to return after that, which a loaded machine can delay by more than
	// a scheduler slice: wait for it (a leaked flusher never returns).
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() >= g+1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines %d 5 s after Close, %d before flusher", runtime.NumGoroutine(), g)
		}
	}
	if _, err := iomap.BufferedWrite(c, fs, 1, data, 0, 0); !errors.Is(err, iomap.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
}

// 16 goroutines do buffered and direct I/O to disjoint ranges of one file
// through one small cache; each checks its range at the end.
func TestConcurrentDisjoint(t *testing.T) {
	const bs, G, per = 4096, 16, 8 * 4096
	dev := patternDev(t, 16<<20)
	fs := newTinyFS(bs, 0, 4096)
	c, err := iomap.NewPageCache(dev, iomap.PageCacheOptions{PageSize: bs, MaxPages: 24})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const size = G * per // the file is pre-sized; nobody extends
	var wg sync.WaitGroup
	errc := make(chan error, G)
	for g := range G {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			base := int64(g) * per
			model := make([]byte, per)
			for i := range 150 {
				switch r.IntN(4) {
				case 0, 1:
					off := r.Int64N(per - 100)
					n := 1 + r.Int64N(min(per-off, 2*bs))
					b := bytes.Repeat([]byte{byte(g + i)}, int(n))
					if _, err := iomap.BufferedWrite(c, fs, 1, b, base+off, size); err != nil {
						errc <- err
						return
					}
					copy(model[off:], b)
				case 2:
					off := r.Int64N(per/512) * 512
					n := min(per-off, (1+r.Int64N(8))*512)
					if err := c.Writeback(1, base+off, base+off+n); err != nil {
						errc <- err
						return
					}
					c.Invalidate(1, base+off, base+off+n)
					b := bytes.Repeat([]byte{byte(100 + g + i)}, int(n))
					if _, err := iomap.DirectWrite(dev, fs, b, base+off, fs.dio()); err != nil {
						errc <- err
						return
					}
					copy(model[off:], b)
				case 3:
					got := make([]byte, per)
					if _, err := iomap.BufferedRead(c, fs, 1, got, base, size); err != nil {
						errc <- err
						return
					}
					if !bytes.Equal(got, model) {
						errc <- fmt.Errorf("goroutine %d op %d: range differs", g, i)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}
