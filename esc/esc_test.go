package esc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const fileBlocks = 32 << 20 / 4096 // a 32 MiB file in 4 KiB blocks

// oneExtentLookup simulates the mapping layer's on-disk lookup for a file
// with one extent of fileBlocks blocks at pblk, counting calls.
func oneExtentLookup(pblk uint64, calls *atomic.Int64) LookupFunc {
	return func(lblk uint32) (Extent, bool, error) {
		calls.Add(1)
		if lblk < fileBlocks {
			return Extent{Lblk: 0, Len: fileBlocks, Pblk: pblk, Status: Written}, true, nil
		}
		return Extent{Lblk: fileBlocks, Len: MaxBlocks - fileBlocks, Status: Hole}, true, nil
	}
}

// TestFillFragmentation: 100,000 random 4 KiB reads of a 32 MiB
// single-extent file through Fill leave exactly one entry and one on-disk
// lookup.
func TestFillFragmentation(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	r := rand.New(rand.NewPCG(seed, 2))
	c := New(Options{})
	tr := c.Inode(12)
	var calls atomic.Int64
	lookup := oneExtentLookup(7000, &calls)
	for i := 0; i < 100000; i++ {
		lb := uint32(r.IntN(fileBlocks))
		e, err := tr.Fill(lb, lookup)
		if err != nil {
			t.Fatal(err)
		}
		if e.Status != Written || e.PblkOf(lb) != 7000+uint64(lb) {
			t.Fatalf("seed %d: block %d mapped by %v", seed, lb, e)
		}
	}
	st := c.Stats()
	if tr.Len() != 1 || calls.Load() != 1 || st.Entries != 1 || st.Misses != 1 || st.Hits != 99999 {
		t.Fatalf("seed %d: %d entries, %d lookups, stats %+v; want 1 entry, 1 lookup", seed, tr.Len(), calls.Load(), st)
	}

	// The SkipInRoot policy caches nothing for an in-root extent.
	c2 := New(Options{SkipInRoot: true})
	tr2 := c2.Inode(12)
	calls.Store(0)
	for i := 0; i < 1000; i++ {
		if _, err := tr2.Fill(uint32(r.IntN(fileBlocks)), lookup); err != nil {
			t.Fatal(err)
		}
	}
	if tr2.Len() != 0 || calls.Load() != 1000 || c2.Stats().FillSkips != 1000 {
		t.Fatalf("SkipInRoot: %d entries, %d lookups", tr2.Len(), calls.Load())
	}
}

func TestFillErrors(t *testing.T) {
	c := New(Options{})
	tr := c.Inode(3)
	ioErr := errors.New("device gone")
	if _, err := tr.Fill(5, func(uint32) (Extent, bool, error) { return Extent{}, false, ioErr }); !errors.Is(err, ioErr) {
		t.Fatalf("lookup error not wrapped: %v", err)
	}
	bad := []Extent{
		{Lblk: 10, Len: 5, Pblk: 1, Status: Written}, // does not contain 5
		{Lblk: 0, Len: 10, Status: Delayed},          // not on disk
		{Lblk: 0, Len: 0, Status: Hole},              // empty
		{Lblk: 0, Len: 10, Status: 9},                // bad status
	}
	for _, e := range bad {
		_, err := tr.Fill(5, func(uint32) (Extent, bool, error) { return e, false, nil })
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("lookup returning %v: err %v, want ErrInvalid", e, err)
		}
	}
	if _, err := tr.Fill(MaxBlocks, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("Fill(MaxBlocks): %v", err)
	}
	if tr.Len() != 0 {
		t.Errorf("failed fills cached %d entries", tr.Len())
	}
}

func TestInvalidArguments(t *testing.T) {
	tr := New(Options{}).Inode(1)
	for _, e := range []Extent{
		{Lblk: 0, Len: 0, Status: Written},
		{Lblk: 1, Len: 1, Status: 0},
		{Lblk: MaxBlocks - 1, Len: 2, Status: Hole},
		{Lblk: MaxBlocks, Len: 1, Status: Hole},
		{Lblk: 0, Len: 10, Pblk: MaxPblk - 5, Status: Written},
	} {
		if err := tr.Insert(e); !errors.Is(err, ErrInvalid) {
			t.Errorf("Insert(%v): %v", e, err)
		}
	}
	if err := tr.Cache(Extent{Lblk: 0, Len: 1, Status: Delayed}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Cache(delayed): %v", err)
	}
	if _, err := tr.Remove(MaxBlocks-1, 2); !errors.Is(err, ErrInvalid) {
		t.Errorf("Remove past end: %v", err)
	}
	if _, err := tr.SetStatus(0, 5, Delayed, Written); !errors.Is(err, ErrInvalid) {
		t.Errorf("SetStatus(delayed): %v", err)
	}
	if tr.Len() != 0 {
		t.Errorf("rejected calls cached %d entries", tr.Len())
	}
}

func TestPrecache(t *testing.T) {
	c := New(Options{PrecacheLimit: 3})
	tr := c.Inode(9)
	if err := tr.Insert(Extent{Lblk: 12, Len: 2, Status: Delayed}); err != nil {
		t.Fatal(err)
	}
	exts := []Extent{
		{Lblk: 0, Len: 10, Pblk: 100, Status: Written},
		{Lblk: 20, Len: 5, Pblk: 200, Status: Unwritten},
		{Lblk: 30, Len: 1, Pblk: 300, Status: Written},
	}
	walk := func(xs []Extent) WalkFunc {
		return func(fn func(Extent) error) error {
			for _, e := range xs {
				if err := fn(e); err != nil {
					return err
				}
			}
			return nil
		}
	}
	done, err := tr.Precache(walk(exts))
	if err != nil || !done {
		t.Fatalf("Precache: %v %v", done, err)
	}
	var got []string
	tr.Range(0, MaxBlocks, func(e Extent) bool { got = append(got, e.String()); return true })
	want := "[[0+10 written @100] [10+2 hole] [12+2 delayed] [14+6 hole] [20+5 unwritten @200] [25+5 hole] [30+1 written @300] [31+4294967264 hole]]"
	if fmt.Sprint(got) != want {
		t.Fatalf("after precache:\n got %v\nwant %s", got, want)
	}
	// Every lookup is now a hit: Fill never calls the lookup.
	for lb := uint32(0); lb < 1000; lb++ {
		if _, err := tr.Fill(lb, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Limit: a fourth extent stops the walk, keeping what was cached.
	tr2 := c.Inode(10)
	done, err = tr2.Precache(walk(append(exts, Extent{Lblk: 40, Len: 1, Pblk: 400, Status: Written})))
	if err != nil || done || tr2.Len() != 5 { // 3 extents, 2 holes between
		t.Fatalf("over limit: done %v err %v len %d", done, err, tr2.Len())
	}
	// Out of order is an error.
	tr3 := c.Inode(11)
	if _, err := tr3.Precache(walk([]Extent{exts[1], exts[0]})); !errors.Is(err, ErrInvalid) {
		t.Fatalf("out of order: %v", err)
	}
}

func TestNextDelayed(t *testing.T) {
	tr := New(Options{}).Inode(1)
	for _, e := range []Extent{
		{Lblk: 0, Len: 10, Pblk: 1, Status: Written},
		{Lblk: 10, Len: 5, Status: Delayed},
		{Lblk: 40, Len: 5, Status: Delayed},
		{Lblk: 50, Len: 5, Status: Hole},
	} {
		if err := tr.Insert(e); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		from uint32
		want string
		ok   bool
	}{
		{0, "[10+5 delayed]", true},
		{12, "[10+5 delayed]", true},
		{15, "[40+5 delayed]", true},
		{44, "[40+5 delayed]", true},
		{45, "", false},
	}
	for _, tc := range cases {
		e, ok := tr.NextDelayed(tc.from)
		if ok != tc.ok || (ok && e.String() != tc.want) {
			t.Errorf("NextDelayed(%d) = %v %v, want %s %v", tc.from, e, ok, tc.want, tc.ok)
		}
	}
	if tr.DelayedBlocks() != 10 {
		t.Errorf("DelayedBlocks %d", tr.DelayedBlocks())
	}
}

// TestRetiredHandle: a handle whose tree the shrinker or Forget retired acts
// on the inode's current tree.
func TestRetiredHandle(t *testing.T) {
	c := New(Options{})
	h := c.Inode(5)
	if err := h.Cache(Extent{Lblk: 0, Len: 8, Pblk: 80, Status: Written}); err != nil {
		t.Fatal(err)
	}
	c.Shrink(0) // first pass clears the referenced bit, second drops it
	if st := c.Stats(); st.Inodes != 0 || st.Bytes != 0 || st.EvictedInodes != 1 {
		t.Fatalf("after Shrink(0): %+v", st)
	}
	if _, ok := h.Lookup(3); ok {
		t.Fatal("retired handle still hits")
	}
	if err := h.Insert(Extent{Lblk: 0, Len: 4, Status: Delayed}); err != nil {
		t.Fatal(err)
	}
	if e, ok := c.Inode(5).Lookup(2); !ok || e.Status != Delayed {
		t.Fatalf("insert through retired handle lost: %v %v", e, ok)
	}
	if e, ok := h.Lookup(2); !ok || e.Status != Delayed {
		t.Fatalf("lookup through retired handle: %v %v", e, ok)
	}
	// Delayed survives any shrinking.
	c.Shrink(0)
	c.Shrink(0)
	if h.DelayedBlocks() != 4 || c.Stats().DelayedBlocks != 4 {
		t.Fatalf("delayed blocks lost by Shrink: %d", h.DelayedBlocks())
	}
	if d := c.Forget(5); d != 4 {
		t.Fatalf("Forget dropped %d delayed blocks, want 4", d)
	}
	if st := c.Stats(); st.Inodes != 0 || st.Bytes != 0 || st.Entries != 0 || st.DelayedBlocks != 0 {
		t.Fatalf("after Forget: %+v", st)
	}
}

// TestReclaimBudget: 100,000 inodes with cached extents under a 16 MiB
// budget; delayed ranges survive; the heap agrees with the accounting.
func TestReclaimBudget(t *testing.T) {
	const budget = 16 << 20
	const inodes = 100000
	before := heapInUse()
	c := New(Options{Budget: budget})
	var calls atomic.Int64
	max := int64(0)
	for ino := uint32(1); ino <= inodes; ino++ {
		tr := c.Inode(ino)
		// A file of three extents read at three places: 3 extents and
		// the trailing hole cached.
		lookup := func(lblk uint32) (Extent, bool, error) {
			calls.Add(1)
			i := lblk / 100
			if i < 3 {
				return Extent{Lblk: i * 100, Len: 100, Pblk: uint64(ino)*1000 + uint64(i)*200, Status: Written}, false, nil
			}
			return Extent{Lblk: 300, Len: MaxBlocks - 300, Status: Hole}, false, nil
		}
		for _, lb := range []uint32{5, 150, 250, 999} {
			if _, err := tr.Fill(lb, lookup); err != nil {
				t.Fatal(err)
			}
		}
		if ino%100 == 0 {
			if err := tr.Insert(Extent{Lblk: 1000, Len: 16, Status: Delayed}); err != nil {
				t.Fatal(err)
			}
		}
		b := c.Stats().Bytes
		if b > budget {
			t.Fatalf("inode %d: %d bytes accounted, over the %d budget", ino, b, budget)
		}
		max = maxOf(max, b)
	}
	st := c.Stats()
	t.Logf("stats %+v", st)
	if st.EvictedInodes == 0 || st.Reclaimed == 0 {
		t.Fatalf("nothing reclaimed: %+v", st)
	}
	for ino := uint32(100); ino <= inodes; ino += 100 {
		e, ok := c.Inode(ino).NextDelayed(0)
		if !ok || e.Lblk != 1000 || e.Len != 16 {
			t.Fatalf("inode %d lost its delayed range: %v %v", ino, e, ok)
		}
	}
	if st.DelayedBlocks != inodes/100*16 {
		t.Fatalf("delayed blocks %d, want %d", st.DelayedBlocks, inodes/100*16)
	}
	heap := heapInUse() - before
	runtime.KeepAlive(c)
	t.Logf("heap growth %d bytes, accounted %d (max %d), budget %d", heap, st.Bytes, max, budget)
	if float64(heap) > 1.3*float64(st.Bytes)+1<<20 {
		t.Fatalf("heap grew %d bytes for %d accounted", heap, st.Bytes)
	}
	checkCounters(t, c)
}

func maxOf(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// checkCounters verifies I4 across all live trees.
func checkCounters(t *testing.T, c *Cache) {
	t.Helper()
	var bytes, entries, inodes int64
	var delayed uint64
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		for _, tr := range s.m {
			if err := tr.check(); err != nil {
				t.Fatalf("inode %d: %v", tr.ino, err)
			}
			tr.mu.RLock()
			n := int64(tr.lenLocked())
			bytes += treeBytes(n)
			entries += n
			delayed += tr.mu.delayed
			inodes++
			tr.mu.RUnlock()
		}
		s.mu.RUnlock()
	}
	st := c.Stats()
	if st.Bytes != bytes || st.Entries != entries || st.DelayedBlocks != delayed || st.Inodes != inodes {
		t.Fatalf("stats %+v; trees hold bytes %d entries %d delayed %d inodes %d", st, bytes, entries, delayed, inodes)
	}
	c.lru.Lock()
	n := c.lru.n
	c.lru.Unlock()
	if int64(n) != inodes {
		t.Fatalf("LRU holds %d trees, map %d", n, inodes)
	}
}

// TestConcurrent runs lookups and fills against inserts, removes, status
// changes, forgets and a small budget. Writers keep every mapping at
// pblk = lblk + 1000, so readers can check what they see.
func TestConcurrent(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	c := New(Options{Budget: 16 << 10}) // small: the shrinker runs constantly
	const inodes = 50
	dur := 300 * time.Millisecond
	if testing.Short() {
		dur = 100 * time.Millisecond
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errc := make(chan error, 32)
	lookup := func(lblk uint32) (Extent, bool, error) {
		s := lblk &^ 63
		return Extent{Lblk: s, Len: 64, Pblk: uint64(s) + 1000, Status: Unwritten}, false, nil
	}
	checkExt := func(lb uint32, e Extent) error {
		if !e.Contains(lb) {
			return fmt.Errorf("lookup %d returned %v", lb, e)
		}
		if e.Status.mapped() && e.PblkOf(lb) != uint64(lb)+1000 {
			return fmt.Errorf("block %d mapped to %d by %v", lb, e.PblkOf(lb), e)
		}
		return nil
	}
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(g)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				tr := c.Inode(uint32(1 + r.IntN(inodes)))
				lb := uint32(r.IntN(4096))
				var e Extent
				var err error
				if g%2 == 0 {
					var ok bool
					if e, ok = tr.Lookup(lb); !ok {
						continue
					}
				} else if e, err = tr.Fill(lb, lookup); err != nil {
					errc <- err
					return
				}
				if err := checkExt(lb, e); err != nil {
					errc <- err
					return
				}
			}
		}(g)
	}
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, 100+uint64(g)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				ino := uint32(1 + r.IntN(inodes))
				tr := c.Inode(ino)
				lb := uint32(r.IntN(4000))
				n := uint32(1 + r.IntN(96))
				var err error
				switch r.IntN(6) {
				case 0:
					err = tr.Insert(Extent{Lblk: lb, Len: n, Pblk: uint64(lb) + 1000, Status: Written})
				case 1:
					err = tr.Insert(Extent{Lblk: lb, Len: n, Status: Delayed})
				case 2:
					_, err = tr.Remove(lb, n)
				case 3:
					_, err = tr.SetStatus(lb, n, Unwritten, Written)
				case 4:
					err = tr.Insert(Extent{Lblk: lb, Len: n, Status: Hole})
				case 5:
					if r.IntN(20) == 0 {
						c.Forget(ino)
					}
				}
				if err != nil {
					errc <- err
					return
				}
			}
		}(g)
	}
	time.Sleep(dur)
	close(stop)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatalf("seed %d: %v", seed, err)
	}
	st := c.Stats()
	t.Logf("seed %d: %+v", seed, st)
	if st.Hits == 0 || st.ShrinkRuns == 0 {
		t.Fatalf("workload did not exercise hits and shrinking: %+v", st)
	}
	checkCounters(t, c)
}

// TestConcurrentFillBudget: many goroutines filling through misses stay
// near the budget (the shrinker applies back-pressure past 1/8 over).
func TestConcurrentFillBudget(t *testing.T) {
	const budget = 256 << 10
	c := New(Options{Budget: budget})
	var wg sync.WaitGroup
	var calls atomic.Int64
	lookup := oneExtentLookup(100, &calls)
	var over atomic.Int64
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 3))
			for i := 0; i < 2000; i++ {
				if _, err := c.Inode(uint32(1+r.IntN(50000))).Fill(uint32(r.IntN(fileBlocks)), lookup); err != nil {
					t.Error(err)
					return
				}
				if b := c.Stats().Bytes; b > budget+budget/8+4096 {
					over.Store(b)
				}
			}
		}(g)
	}
	wg.Wait()
	if b := over.Load(); b != 0 {
		t.Errorf("accounted bytes reached %d, budget %d", b, budget)
	}
	if b := c.Stats().Bytes; b > budget {
		t.Errorf("after the run %d bytes, budget %d", b, budget)
	}
	checkCounters(t, c)
}

// TestDelayedOverBudget: when Delayed ranges alone exceed the budget,
// nothing is lost and the shrinker does not rescan on every insert.
func TestDelayedOverBudget(t *testing.T) {
	const budget = 64 << 10
	c := New(Options{Budget: budget})
	const inodes = 2000
	for ino := uint32(1); ino <= inodes; ino++ {
		tr := c.Inode(ino)
		// Alternate statuses so nothing merges: 4 delayed ranges + 4 holes.
		for i := uint32(0); i < 8; i++ {
			st := Delayed
			if i%2 == 1 {
				st = Hole
			}
			if err := tr.Insert(Extent{Lblk: i * 4, Len: 4, Status: st}); err != nil {
				t.Fatal(err)
			}
		}
	}
	st := c.Stats()
	t.Logf("%+v", st)
	if st.DelayedBlocks != inodes*16 || st.Inodes != inodes {
		t.Fatalf("delayed state lost: %+v", st)
	}
	// A sweep that frees little is repeated only every budget/32 bytes of
	// growth, not on every insert.
	if max := 2*uint64(st.Bytes/(budget/32)) + 50; st.ShrinkRuns > max {
		t.Fatalf("%d shrinker runs for %d inserts (%d bytes): want <= %d", st.ShrinkRuns, inodes*8, st.Bytes, max)
	}
	for ino := uint32(1); ino <= inodes; ino += 97 {
		if d := c.Inode(ino).DelayedBlocks(); d != 16 {
			t.Fatalf("inode %d: %d delayed blocks", ino, d)
		}
	}
	checkCounters(t, c)
}
