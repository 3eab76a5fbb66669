package ext4io

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"testing"

	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestAdv27ConvBitsDemoteRace: inodes with direct writes into preallocated
// space leave and re-enter a tiny inode cache while writers, readers, the
// shrinker and commits run at once; every page reads back as last written.
// Demotion drops the inode's extent-status entries (convbits): a copy
// read again must fill them from the converted tree, and a struct still
// held must go on answering from its bits.
func TestAdv27ConvBitsDemoteRace(t *testing.T) {
	const files, pages, workers, ops = 24, 16, 4, 150
	dev := memdev.NewBlockSize(128<<20, 4096)
	if err := Format(dev, FormatOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err := Open(dev, Options{Writable: true, InodeCache: 4, CommitInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	name := func(i int) string { return fmt.Sprintf("/r%d", i) }
	for i := range files {
		f, err := v.OpenFile(name(i), os.O_RDWR|os.O_CREATE|O_DIRECT, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Fallocate(FallocAllocate, 0, pages*4096); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	// Each worker owns the files i with i%workers == w: its model is exact.
	model := make([][]byte, files)
	for i := range model {
		model[i] = make([]byte, pages)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(1)
	go func() { // commits, shrinker passes and collections
		defer bg.Done()
		for k := 0; ; k++ {
			select {
			case <-done:
				return
			default:
			}
			if err := v.Sync(); err != nil {
				t.Error(err)
				return
			}
			v.shrinkInodes()
			if k%4 == 0 {
				runtime.GC() // demoted inodes nothing holds go
			}
		}
	}()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 27))
			buf := make([]byte, 4096)
			for range ops {
				i := w + workers*rng.IntN(files/workers)
				p := rng.IntN(pages)
				f, err := v.OpenFile(name(i), os.O_RDWR|O_DIRECT, 0)
				if err != nil {
					t.Error(err)
					return
				}
				if rng.IntN(2) == 0 {
					b := byte(rng.IntN(255) + 1)
					if _, err := f.WriteAt(bytes.Repeat([]byte{b}, 4096), int64(p)*4096); err != nil {
						t.Error(err)
					}
					model[i][p] = b
				} else {
					if _, err := f.ReadAt(buf, int64(p)*4096); err != nil {
						t.Error(err)
					} else if buf[0] != model[i][p] || buf[4095] != model[i][p] {
						t.Errorf("%s page %d reads %#x, last written %#x", name(i), p, buf[0], model[i][p])
					}
				}
				if err := f.Close(); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	bg.Wait()
	if t.Failed() {
		return
	}
	if err := v.Sync(); err != nil {
		t.Fatal(err)
	}
	for range files {
		v.shrinkInodes()
	}
	runtime.GC()
	for i := range files {
		got, err := v.ReadFile(name(i))
		if err != nil {
			t.Fatal(err)
		}
		for p := range pages {
			if got[p*4096] != model[i][p] {
				t.Fatalf("%s page %d reads %#x at the end, last written %#x", name(i), p, got[p*4096], model[i][p])
			}
		}
	}
	if v.Counters().InodeEvictions == 0 {
		t.Fatal("no inode left the cache: the test tells nothing")
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	checkImage(t, dev)
}
