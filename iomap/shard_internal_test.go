package iomap

// Tests of the PageCache's shards: the page budget shared by all shards
// (I3), eviction from another shard, waiting across shards, and the
// bookkeeping of every shard after concurrent use.

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ext4io/ext4io/blockdev/memdev"
)

// fileOps maps file key's bytes to the device from base, page by page,
// as written blocks.
type fileOps struct{ base, ps int64 }

func (o fileOps) Begin(off, length int64, f Flags) (Mapping, error) {
	start := off &^ (o.ps - 1)
	end := (off + length + o.ps - 1) &^ (o.ps - 1)
	return Mapping{Offset: start, Length: end - start, Type: Mapped, Addr: o.base + start}, nil
}

func (fileOps) End(off, length, written int64, f Flags, m Mapping) error { return nil }

// keysInShards returns n keys, each in a different shard.
func keysInShards(t *testing.T, c *PageCache, n int) []Key {
	t.Helper()
	seen := map[*shard]bool{}
	var keys []Key
	for k := Key(1); len(keys) < n && k < 1<<20; k++ {
		if s := c.shardOf(k); !seen[s] {
			seen[s] = true
			keys = append(keys, k)
		}
	}
	if len(keys) < n {
		t.Fatalf("found %d keys in distinct shards, want %d", len(keys), n)
	}
	return keys
}

// checkShards checks every shard's bookkeeping against its pages and
// the budget against the shards' page counts. The cache must be idle.
func checkShards(t *testing.T, c *PageCache) {
	t.Helper()
	total := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		ring := 0
		for _, h := range []*page{&s.mu.lru, &s.mu.dirtyLRU} {
			for pg := h.next; pg != h; pg = pg.next {
				ring++
				if pg.pins != 0 || pg.wb {
					t.Errorf("shard %d: idle page %d of file %d has %d pins, wb %v", i, pg.idx, pg.f.key, pg.pins, pg.wb)
				}
				if pg.f.s != s {
					t.Errorf("shard %d: page of file %d in the LRU of another shard", i, pg.f.key)
				}
				if pg.dirty != (h == &s.mu.dirtyLRU) {
					t.Errorf("shard %d: page %d of file %d (dirty %v) in the wrong ring", i, pg.idx, pg.f.key, pg.dirty)
				}
			}
		}
		inFiles := 0
		for k, f := range s.mu.files {
			if c.shardOf(k) != s || f.s != s {
				t.Errorf("file %d in shard %d, not its own", k, i)
			}
			dirty := 0
			indexed := 0
			f.pages.each(0, math.MaxInt64, func(pg *page) bool {
				indexed++
				if pg.f != f {
					t.Errorf("file %d: page %d of file %d in its index", k, pg.idx, pg.f.key)
				}
				if pg.dirty {
					dirty++
				}
				return true
			})
			if indexed != f.pages.len() {
				t.Errorf("file %d: index counts %d pages, holds %d", k, f.pages.len(), indexed)
			}
			if dirty != f.ndirty || f.inWriteback != 0 {
				t.Errorf("file %d: ndirty %d, %d dirty pages, inWriteback %d", k, f.ndirty, dirty, f.inWriteback)
			}
			inFiles += f.pages.len()
		}
		if ring != s.mu.npages || inFiles != s.mu.npages {
			t.Errorf("shard %d: npages %d, %d in the LRU, %d in files", i, s.mu.npages, ring, inFiles)
		}
		total += s.mu.npages
		s.mu.Unlock()
	}
	if n := c.npages.Load(); n != int64(total) || n > c.maxPages {
		t.Errorf("budget counts %d pages, shards hold %d, max %d", n, total, c.maxPages)
	}
}

// TestShardWaitAcrossShards: with every page pinned in one shard, get in
// another waits, and takes the page whose pin drops.
func TestShardWaitAcrossShards(t *testing.T) {
	c, err := NewPageCache(memdev.New(1<<20), PageCacheOptions{PageSize: 512, MaxPages: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys := keysInShards(t, c, 2)
	fa, _ := c.file(keys[0], nil)
	fb, _ := c.file(keys[1], nil)
	var pinned []*page
	for idx := range int64(2) {
		pg, err := c.get(fa, idx)
		if err != nil {
			t.Fatal(err)
		}
		pinned = append(pinned, pg)
	}
	got := make(chan error, 1)
	go func() {
		pg, err := c.get(fb, 0)
		if err == nil {
			c.release(pg, false, false)
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("get with every page pinned returned %v, want it to wait", err)
	case <-time.After(50 * time.Millisecond):
	}
	c.release(pinned[0], false, false)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("get still waiting after a pin in another shard dropped")
	}
	c.release(pinned[1], false, false)
	if !c.Cached(keys[1]) {
		t.Errorf("file %d not cached after get", keys[1])
	}
	if pages, _ := c.Len(); pages != 2 {
		t.Errorf("Len = %d pages, want 2", pages)
	}
	checkShards(t, c)
}

// TestShardCacheFullAcrossShards: a NoInlineWriteback cache full of
// another shard's dirty pages fails with ErrCacheFull; after
// WritebackOldest the request evicts the now clean page of that shard.
func TestShardCacheFullAcrossShards(t *testing.T) {
	const ps = 512
	c, err := NewPageCache(memdev.New(1<<20), PageCacheOptions{PageSize: ps, MaxPages: 2, NoInlineWriteback: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys := keysInShards(t, c, 2)
	buf := bytes.Repeat([]byte{7}, 2*ps)
	if _, err := BufferedWrite(c, fileOps{0, ps}, keys[0], buf, 0, 0); err != nil {
		t.Fatal(err)
	}
	_, err = BufferedWrite(c, fileOps{64 << 10, ps}, keys[1], buf[:ps], 0, 0)
	if !errors.Is(err, ErrCacheFull) {
		t.Fatalf("write into a cache full of dirty pages: %v, want ErrCacheFull", err)
	}
	if ok, err := c.WritebackOldest(); !ok || err != nil {
		t.Fatalf("WritebackOldest = %v, %v", ok, err)
	}
	if _, err := BufferedWrite(c, fileOps{64 << 10, ps}, keys[1], buf[:ps], 0, 0); err != nil {
		t.Fatal(err)
	}
	if ev := c.Counters().PagesEvicted; ev != 1 {
		t.Errorf("%d pages evicted, want 1", ev)
	}
	checkShards(t, c)
}

// TestShardConcurrent runs random buffered writes, reads, write-backs,
// invalidations and Forgets on files spread over every shard, from
// several goroutines that each own some files, through a cache much
// smaller than the files; the budget is checked all along and every
// file's bytes against a model at the end.
func TestShardConcurrent(t *testing.T) {
	const (
		ps       = 512
		fileSize = 32 * ps
		files    = 3 * numShards
		workers  = 6
		maxPages = 24
	)
	nops := 1500
	if testing.Short() {
		nops = 300
	}
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("IOMAP_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (IOMAP_SEED replays it)", seed)
	for _, noInline := range []bool{false, true} {
		t.Run(fmt.Sprintf("noInline=%v", noInline), func(t *testing.T) {
			dev := memdev.New(files * fileSize)
			c, err := NewPageCache(dev, PageCacheOptions{PageSize: ps, MaxPages: maxPages, MaxRunBytes: 4 * ps, NoInlineWriteback: noInline})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			stop := make(chan struct{})
			var monitor sync.WaitGroup
			monitor.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					if n := c.npages.Load(); n > maxPages {
						t.Errorf("budget counts %d pages, max %d", n, maxPages)
						return
					}
					if pages, _ := c.Len(); pages > maxPages {
						t.Errorf("Len = %d pages, max %d", pages, maxPages)
						return
					}
				}
			})
			models := make([][]byte, files)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(seed, uint64(w)))
					var mine []int
					for k := w; k < files; k += workers {
						mine = append(mine, k)
						models[k] = make([]byte, fileSize)
					}
					for range nops {
						k := mine[r.IntN(len(mine))]
						key, ops, model := Key(k+1), fileOps{int64(k) * fileSize, ps}, models[k]
						off := r.Int64N(fileSize)
						n := 1 + r.Int64N(min(fileSize-off, 3*ps))
						var err error
						switch op := r.IntN(10); {
						case op < 5:
							p := make([]byte, n)
							for i := range p {
								p[i] = byte(r.Uint32())
							}
							for {
								var done int
								done, err = BufferedWrite(c, ops, key, p, off, fileSize)
								copy(model[off:], p[:done])
								off, p = off+int64(done), p[done:]
								if !errors.Is(err, ErrCacheFull) {
									break
								}
								if _, err = c.WritebackOldest(); err != nil {
									break
								}
							}
						case op < 7:
							p := make([]byte, n)
							for {
								_, err = BufferedRead(c, ops, key, p, off, fileSize)
								if !errors.Is(err, ErrCacheFull) {
									break
								}
								if _, err = c.WritebackOldest(); err != nil {
									break
								}
							}
							if err == nil && !bytes.Equal(p, model[off:off+n]) {
								err = fmt.Errorf("file %d: read [%d, +%d) differs from the model", key, off, n)
							}
						case op < 8:
							err = c.Writeback(key, off, off+n)
						case op < 9:
							// Write back, then drop the range: the device keeps the data.
							if err = c.Writeback(key, off, off+n); err == nil {
								c.Invalidate(key, off, off+n)
							}
						default:
							if err = c.Writeback(key, 0, math.MaxInt64); err == nil {
								c.Forget(key)
							}
						}
						if err != nil {
							t.Errorf("worker %d: %v", w, err)
							return
						}
					}
				})
			}
			wg.Wait()
			close(stop)
			monitor.Wait()
			if err := c.Sync(); err != nil {
				t.Fatal(err)
			}
			checkShards(t, c)
			for k, model := range models {
				got := make([]byte, fileSize)
				if _, err := dev.ReadAt(got, int64(k)*fileSize); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, model) {
					t.Fatalf("file %d on the device differs from the model", k+1)
				}
			}
		})
	}
}
