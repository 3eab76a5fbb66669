package ext4io

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io/blockdev/memdev"
)

// checkMetaCache checks that every block the metadata cache holds is the
// block's current contents: the journal's newest copy, else the device's.
// Blocks of the running or committing transaction are skipped (reads find
// those copies first).
func checkMetaCache(t *testing.T, v *Volume) (checked int) {
	t.Helper()
	c := v.mcache
	if c == nil {
		return 0
	}
	m := v.jm
	if m != nil {
		m.mu.Lock() // no commit installs meanwhile
		defer m.mu.Unlock()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	truth := make([]byte, v.bs)
	for blk, e := range c.blocks {
		if e.dirty {
			continue // newer than the device by definition
		}
		if m != nil {
			if _, ok := m.pending[blk]; ok {
				continue
			}
			if _, ok := m.committing[blk]; ok {
				continue
			}
		}
		if m == nil || !m.j.Lookup(blk, truth) {
			_, err := v.dev.ReadAt(truth, int64(blk)*int64(v.bs))
			require.NoError(t, err)
		}
		if !bytes.Equal(e.data, truth) {
			t.Errorf("metadata cache holds a stale copy of block %d", blk)
		}
		checked++
	}
	// Clean blocks stay within the budget. Dirty ones (write-back) reach
	// half of it and then go home; each writer adds at most the block it
	// is installing meanwhile (it waits for the write-back in progress).
	assert.LessOrEqual(t, c.used-c.dirty, c.budget, "clean blocks over the budget")
	assert.LessOrEqual(t, c.dirty, c.budget/2+int64(4*c.bs), "dirty blocks not written back")
	return checked
}

// TestMetaCacheModel runs random namespace and data operations from
// several goroutines on a volume whose metadata cache holds four blocks,
// beside a goroutine that commits at random moments, and checks every
// read against an in-memory model of each goroutine's files, the cache
// against the journal and device, and the image with e2fsck.
func TestMetaCacheModel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		features  string
		writeBack bool // Tuning.NoJournal
	}{{"journal", "", false}, {"nojournal", "^has_journal", false}, {"writeback", "", true}} {
		t.Run(tc.name, func(t *testing.T) {
			const bs = 1024
			dev := memdev.NewBlockSize(16<<20, bs)
			require.NoError(t, Format(dev, FormatOptions{BlockSize: bs, Features: tc.features}))
			v, err := Open(dev, Options{Writable: true, MetaCacheBytes: 4 * bs, PageCacheBytes: -1,
				WritebackAge: -1, CommitInterval: -1, Tuning: Tuning{NoJournal: tc.writeBack}})
			require.NoError(t, err)
			require.NotNil(t, v.mcache)
			require.Equal(t, tc.features == "" && !tc.writeBack, v.jm != nil)
			turns := v.jm == nil && !tc.writeBack

			const workers, ops = 3, 300
			models := make([]map[string][]byte, workers) // file or dir (nil) by path
			var wg sync.WaitGroup
			stop := make(chan struct{})
			var syncer sync.WaitGroup
			syncer.Add(1)
			go func() {
				defer syncer.Done()
				r := rand.New(rand.NewPCG(7, 7))
				for {
					select {
					case <-stop:
						return
					default:
					}
					switch {
					case r.IntN(4) == 0:
						assert.NoError(t, v.Sync())
					case !turns:
						// Without a journal Dirty writes the device before
						// it installs the copy: the workers check then.
						checkMetaCache(t, v)
					}
				}
			}()
			// Without a journal the workers take turns and check the cache
			// after each of their operations.
			var turn sync.Mutex
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var check func()
					if turns {
						turn.Lock()
						defer turn.Unlock()
						check = func() { checkMetaCache(t, v) }
					}
					models[w] = runCacheWorker(t, v, w, ops, check)
				}()
			}
			wg.Wait()
			close(stop)
			syncer.Wait()
			checkMetaCache(t, v)
			hits, misses, evictions := v.mcache.hits.Load(), v.mcache.misses.Load(), v.mcache.evictions.Load()
			t.Logf("cache: %d hits, %d misses, %d evictions", hits, misses, evictions)
			assert.Positive(t, hits)
			assert.Positive(t, evictions, "a four-block cache must evict")
			require.NoError(t, v.Close())
			checkImage(t, dev)

			ro, err := Open(dev, Options{})
			require.NoError(t, err)
			defer ro.Close()
			for w, model := range models {
				checkModel(t, ro, fmt.Sprintf("/w%d", w), model)
			}
		})
	}
}

// runCacheWorker does ops random operations in its own directory /wN,
// checking each read against its model, and returns the model.
// check, if not nil, runs after every operation.
func runCacheWorker(t *testing.T, v *Volume, w, ops int, check func()) map[string][]byte {
	r := rand.New(rand.NewPCG(uint64(w), 42))
	top := fmt.Sprintf("/w%d", w)
	require.NoError(t, v.Mkdir(top, 0o755))
	model := map[string][]byte{top: nil}
	dirs := []string{top}
	pick := func(dir bool) string {
		var names []string
		for p := range model {
			if p != top && isDirModel(model, p) == dir {
				names = append(names, p)
			}
		}
		if len(names) == 0 {
			return ""
		}
		slices.Sort(names)
		return names[r.IntN(len(names))]
	}
	for i := range ops {
		switch op := r.IntN(10); {
		case op < 3: // create a file with data
			p := path.Join(dirs[r.IntN(len(dirs))], fmt.Sprintf("f%d", i))
			data := bytes.Repeat([]byte{byte(i), byte(w)}, 1+r.IntN(3*1024))
			require.NoError(t, v.WriteFile(p, data, 0o644))
			model[p] = data
		case op == 3: // mkdir
			p := path.Join(dirs[r.IntN(len(dirs))], fmt.Sprintf("d%d", i))
			require.NoError(t, v.Mkdir(p, 0o755))
			model[p] = nil
			dirs = append(dirs, p)
		case op == 4: // append
			if p := pick(false); p != "" {
				f, err := v.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
				require.NoError(t, err)
				extra := bytes.Repeat([]byte{byte(i)}, 1+r.IntN(2048))
				_, err = f.Write(extra)
				require.NoError(t, err)
				require.NoError(t, f.Close())
				model[p] = append(model[p], extra...)
			}
		case op == 5: // unlink
			if p := pick(false); p != "" {
				require.NoError(t, v.Remove(p))
				delete(model, p)
			}
		case op == 6: // rename a file within the worker's tree
			if p := pick(false); p != "" {
				q := path.Join(dirs[r.IntN(len(dirs))], fmt.Sprintf("r%d", i))
				require.NoError(t, v.Rename(p, q))
				model[q] = model[p]
				delete(model, p)
			}
		case op == 7: // truncate
			if p := pick(false); p != "" {
				n := r.IntN(len(model[p]) + 1)
				require.NoError(t, v.Truncate(p, int64(n)))
				model[p] = model[p][:n]
			}
		case op == 8: // xattr on a file
			if p := pick(false); p != "" {
				require.NoError(t, v.Setxattr(p, "user.k", bytes.Repeat([]byte{byte(i)}, 1+r.IntN(300)), 0))
			}
		default: // read back a file and a directory listing
			if p := pick(false); p != "" {
				got, err := v.ReadFile(p)
				require.NoError(t, err)
				require.True(t, bytes.Equal(model[p], got), "%s: stale or wrong contents", p)
			}
			d := dirs[r.IntN(len(dirs))]
			checkListing(t, v, d, model)
		}
		if check != nil {
			check()
		}
	}
	for _, d := range dirs {
		checkListing(t, v, d, model)
	}
	return model
}

// isDirModel reports whether p is a directory of the model.
func isDirModel(model map[string][]byte, p string) bool {
	d, ok := model[p]
	return ok && d == nil
}

// checkListing compares directory d's entries with the model's.
func checkListing(t *testing.T, v *Volume, d string, model map[string][]byte) {
	t.Helper()
	ents, err := v.ReadDir(d)
	require.NoError(t, err)
	var got, want []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	for p := range model {
		if p != d && path.Dir(p) == d {
			want = append(want, path.Base(p))
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	require.Equal(t, want, got, "listing of %s", d)
}

// checkModel compares the tree under top of a reopened volume with the
// model.
func checkModel(t *testing.T, v *Volume, top string, model map[string][]byte) {
	t.Helper()
	for p, data := range model {
		fi, err := v.Lstat(p)
		require.NoError(t, err, p)
		if data == nil && fi.IsDir() {
			checkListing(t, v, p, model)
			continue
		}
		got, err := v.ReadFile(p)
		require.NoError(t, err, p)
		require.True(t, bytes.Equal(data, got), "%s after reopen", p)
	}
	_, err := v.Lstat(path.Join(top, "none"))
	require.True(t, errors.Is(err, fs.ErrNotExist))
}

// TestMetaCacheFillLosesToInstall: a reader that missed and read the old
// contents must not insert them over a copy installed meanwhile, nor
// bring back a block dropped meanwhile; and the cache keeps its budget,
// evicting the least recently used block.
func TestMetaCacheFillLosesToInstall(t *testing.T) {
	c := newMetaCache(4, 8) // two 4-byte blocks
	_, gen, ok := c.get(1)
	require.False(t, ok)
	c.install(1, []byte("new1"))
	c.put(1, []byte("old1"), gen)
	b, _, ok := c.get(1)
	require.True(t, ok)
	assert.Equal(t, "new1", string(b))

	_, gen, _ = c.get(2)
	c.drop(2)
	c.put(2, []byte("old2"), gen)
	_, _, ok = c.get(2)
	assert.False(t, ok, "a dropped block came back")

	_, gen, _ = c.get(2)
	c.put(2, []byte("two2"), gen)
	_, _, _ = c.get(1) // 1 is now the most recent
	c.install(3, []byte("thr3"))
	_, _, ok = c.get(2)
	assert.False(t, ok, "the least recently used block stays")
	_, _, ok = c.get(1)
	assert.True(t, ok)
	n, used := c.len()
	assert.Equal(t, 2, n)
	assert.Equal(t, int64(8), used)
}
