package ext4io_test

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"math/rand"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
)

// TestCloseDuringOperations closes a volume while goroutines create,
// write, sync, read and unlink files: every call returns nil or an error
// matching ErrClosed (and fs.ErrClosed), nothing races or panics, and the
// closed image is e2fsck-clean with what every call that returned nil did:
// a file whose creation and writes returned nil holds the data written
// (Close writes everything back, synced or not), and one whose Unlink
// returned nil is gone. Run it under -race.
func TestCloseDuringOperations(t *testing.T) {
	t.Parallel()
	iters := 50
	if testing.Short() {
		iters = 5
	}
	for it := range iters {
		closeDuringOperations(t, it)
		if t.Failed() {
			return
		}
	}
}

func closeDuringOperations(t *testing.T, it int) {
	dev := memdev.New(32 << 20)
	// Every third run with fast commits, whose fsyncs write the journal
	// outside its commits; every fifth without a journal (Close drains
	// the operations in flight there too).
	fopts := ext4io.FormatOptions{FastCommit: it%3 == 2}
	if it%5 == 4 {
		fopts = ext4io.FormatOptions{Features: "^has_journal"}
	}
	require.NoError(t, ext4io.Format(dev, fopts))
	// Half the runs with the page cache off, so that writes take the
	// direct paths (the shared-gate overwrite among them).
	opts := ext4io.Options{Writable: true, CommitInterval: -1}
	if it%2 == 1 {
		opts.PageCacheBytes = -1
	}
	v, err := ext4io.Open(dev, opts)
	require.NoError(t, err)

	var mu sync.Mutex
	done := map[string][]byte{} // files whose creation and writes returned nil
	gone := map[string]bool{}   // files whose Unlink returned nil
	synced := map[string]bool{} // files whose Sync returned nil as well
	var bad []string
	check := func(what string, err error) bool {
		if err == nil {
			return true
		}
		if !isClosed(err) {
			mu.Lock()
			bad = append(bad, fmt.Sprintf("%s: %v", what, err))
			mu.Unlock()
		}
		return false
	}

	const workers = 6
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(it*workers + w)))
			var mine []string
			for k := 0; ; k++ {
				name := fmt.Sprintf("w%d-%d", w, k)
				f, err := v.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
				if !check("create "+name, err) {
					return
				}
				data := make([]byte, 4096*(1+rng.Intn(4))+rng.Intn(4096))
				rng.Read(data)
				ok := true
				for off := 0; off < len(data) && ok; off += 4096 {
					_, err := f.WriteAt(data[off:min(off+4096, len(data))], int64(off))
					ok = check("write "+name, err)
				}
				if ok {
					mu.Lock()
					done[name] = data
					mu.Unlock()
				}
				if ok && k%2 == 0 {
					// An overwrite of written blocks: the shared-gate path
					// without the page cache.
					_, err := f.WriteAt(data[:4096], 0)
					ok = check("overwrite "+name, err)
				}
				if ok {
					ok = check("sync "+name, f.Sync())
				}
				if ok {
					mu.Lock()
					synced[name] = true
					mu.Unlock()
				}
				if ok {
					got := make([]byte, len(data))
					_, err := f.ReadAt(got, 0)
					if check("read "+name, err) && !bytes.Equal(got, data) {
						mu.Lock()
						bad = append(bad, "read "+name+": wrong data")
						mu.Unlock()
					}
				}
				check("close "+name, f.Close())
				if !ok {
					return
				}
				mine = append(mine, name)
				if len(mine) > 3 {
					victim := mine[0]
					mine = mine[1:]
					err := v.Unlink(victim)
					mu.Lock()
					delete(done, victim)
					if err == nil {
						gone[victim] = true
					}
					mu.Unlock()
					if !check("unlink "+victim, err) {
						return
					}
				}
			}
		}()
	}
	time.Sleep(time.Duration(rand.Intn(15000)) * time.Microsecond)
	require.NoError(t, v.Close(), "iteration %d", it)
	wg.Wait()
	require.Empty(t, bad, "iteration %d: calls failed with errors other than ErrClosed", it)

	ext4iotest.FsckDev(t, dev)
	ro, err := ext4io.Open(dev, ext4io.Options{})
	require.NoError(t, err)
	defer ro.Close()
	for name, want := range done {
		f, err := ro.Open(name)
		if !assert.NoError(t, err, "iteration %d: file %s (synced %v)", it, name, synced[name]) {
			continue
		}
		got, err := io.ReadAll(f)
		assert.NoError(t, err)
		assert.True(t, bytes.Equal(want, got), "iteration %d: file %s (synced %v) has other contents", it, name, synced[name])
		f.Close()
	}
	for name := range gone {
		_, err := ro.Stat(name)
		assert.ErrorIs(t, err, fs.ErrNotExist, "iteration %d: unlinked file %s", it, name)
	}
}
