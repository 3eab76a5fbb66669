package ext4io

import (
	"fmt"
	"testing"

	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestAdvInodeCacheShrinkCostBounded: when the inodes in use (here: each
// with a cached page of a buffered write) far outnumber the cache's
// budget, the shrink passes cannot demote them. Their cost must stay
// bounded: a pass sized by the excess made creating files quadratic
// (48,000 small buffered files with the default budget: 95 s against
// 0.34 s for 16,000). The test counts demotion attempts per create at a
// small and at a larger excess (1,000 and 3,000 inodes in use: the
// unbounded pass tries about 3,000 per create there).
func TestAdvInodeCacheShrinkCostBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 3,500 files")
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
	create := func(n int) {
		for range n {
			if err := v.WriteFile(fmt.Sprintf("/d%d/f%d", i%dirs, i), []byte("pinned by its page"), 0o644); err != nil {
				t.Fatal(err)
			}
			i++
		}
	}
	// Demotion attempts per create, counted: a pass sized by the excess
	// (every pinned inode tried on every read) makes this grow with the
	// cache; a bounded pass with its backoff keeps it constant.
	const batch = 500
	tries := func() float64 {
		before := v.inoTries.Load()
		create(batch)
		return float64(v.inoTries.Load()-before) / batch
	}
	create(500)
	small := tries()
	create(2000)
	large := tries()
	t.Logf("demotion attempts per create: %.2f from 1,000 cached inodes, %.2f from 3,500 (%d cached at the end, budget 1)",
		small, large, v.cachedInodes())
	if v.cachedInodes() < 3000 {
		t.Fatalf("only %d inodes cached: the pages did not pin them and the test proves nothing", v.cachedInodes())
	}
	if large > 4 {
		t.Errorf("%.1f demotion attempts per create past a 3,500-inode excess (%.1f past 1,000): the shrink pass grows with the excess",
			large, small)
	}
}
