package ext4io

import (
	"fmt"
	"testing"
	"time"

	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestAdvInodeCacheShrinkCostBounded: when the inodes in use (here: each
// with a cached page of a buffered write) far outnumber the cache's
// budget, every insertion runs shrinkInodes, which cannot demote them. Its
// pass must stay bounded: one sized by the excess made creating files
// quadratic (48,000 small buffered files with the default budget: 95 s
// against 0.34 s for 16,000). The test times batches of creates at a
// small and at a large excess; with a pass proportional to the excess the
// later batches are several times slower (7-8x measured).
func TestAdvInodeCacheShrinkCostBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("times thousands of creates")
	}
	dev := memdev.NewBlockSize(256<<20, 1024)
	if err := Format(dev, FormatOptions{BlockSize: 1024, InodeRatio: 4096}); err != nil {
		t.Fatal(err)
	}
	v, err := Open(dev, Options{Writable: true, InodeCache: 1, PageCacheBytes: 64 << 20, WritebackAge: -1, CommitInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	const dirs = 16
	for d := range dirs {
		if err := v.Mkdir(fmt.Sprintf("/d%d", d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	i := 0
	create := func(n int) time.Duration {
		start := time.Now()
		for range n {
			if err := v.WriteFile(fmt.Sprintf("/d%d/f%d", i%dirs, i), []byte("pinned by its page"), 0o644); err != nil {
				t.Fatal(err)
			}
			i++
		}
		return time.Since(start)
	}
	const batch = 500
	best := func() time.Duration { return min(create(batch), create(batch), create(batch)) }
	create(500)
	small := best()
	create(6000)
	large := best()
	t.Logf("best of 3 batches of %d creates from %d cached inodes: %v; from %d: %v (%d cached at the end, budget 1)",
		batch, 500, small, 8000, large, v.cachedInodes())
	if v.cachedInodes() < 9000 {
		t.Fatalf("only %d inodes cached: the pages did not pin them and the test proves nothing", v.cachedInodes())
	}
	if large > 7*small/2 {
		t.Errorf("creates past an 8,000-inode excess cost %.1fx those past 500: the shrink pass grows with the excess",
			float64(large)/float64(small))
	}
}
