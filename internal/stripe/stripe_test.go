package stripe

import (
	"sync"
	"testing"
	"unsafe"
)

func TestCounter(t *testing.T) {
	var c Counter
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				c.Add(g*7+i, 2)
			}
		}(g)
	}
	wg.Wait()
	if got := c.Load(); got != 16000 {
		t.Fatalf("Load = %d, want 16000", got)
	}
	if unsafe.Sizeof(c.s[0]) != lineSize {
		t.Fatalf("stripe is %d bytes, want %d", unsafe.Sizeof(c.s[0]), lineSize)
	}
}

func TestOf(t *testing.T) {
	seen := map[int]bool{}
	for h := uint64(0); h < 64; h++ {
		i := Of(h)
		if i < 0 || i >= N {
			t.Fatalf("Of(%d) = %d", h, i)
		}
		seen[i] = true
	}
	if len(seen) != N {
		t.Fatalf("64 consecutive hints use %d of %d stripes", len(seen), N)
	}
	// Four pages of one buffer: consecutive page numbers, so not all on
	// one stripe.
	p := make([]byte, 4<<12)
	pages := map[int]bool{}
	for off := 0; off < len(p); off += 1 << 12 {
		pages[OfBuf(p[off:])] = true
	}
	if len(pages) < 2 {
		t.Fatal("OfBuf puts four consecutive pages on one stripe")
	}
}

// TestRWMutex checks the writer excludes readers of every stripe and
// other writers: readers and writers update a pair that a writer keeps
// equal and readers check, with -race watching the accesses.
func TestRWMutex(t *testing.T) {
	var mu RWMutex
	var a, b int
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				if i%16 == g%4 {
					mu.Lock()
					a++
					b++
					mu.Unlock()
					continue
				}
				s := mu.RLock(g*31 + i)
				if a != b {
					t.Errorf("reader on stripe %d sees a=%d b=%d", s, a, b)
				}
				mu.RUnlock(s)
			}
		}()
	}
	wg.Wait()
	if a != b || a == 0 {
		t.Fatalf("a=%d b=%d", a, b)
	}
	if sz := unsafe.Sizeof(mu.s[0]); sz != 2*lineSize {
		t.Fatalf("stripe is %d bytes, want %d", sz, 2*lineSize)
	}
}

// BenchmarkRWMutexRead compares a read lock and unlock from every CPU on
// one sync.RWMutex (its reader count moves between CPUs) with the same on
// the caller's stripe of an RWMutex.
//
//	go test -run XXX -bench RWMutexRead -cpu 1,2 ./internal/stripe
func BenchmarkRWMutexRead(b *testing.B) {
	b.Run("sync", func(b *testing.B) {
		var mu sync.RWMutex
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				mu.RLock()
				//lint:ignore SA2001 the empty critical section is what this benchmark measures
				mu.RUnlock()
			}
		})
	})
	b.Run("stripe", func(b *testing.B) {
		var mu RWMutex
		b.RunParallel(func(pb *testing.PB) {
			hint := OfBuf(make([]byte, 4096))
			for pb.Next() {
				mu.RUnlock(mu.RLock(hint))
			}
		})
	})
}
