package ext4io_test

import (
	"bytes"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// flushCounter counts the writes and flushes reaching a device.
type flushCounter struct {
	blockdev.Device
	writes, flushes atomic.Int64
}

func (d *flushCounter) WriteAt(p []byte, off int64) (int, error) {
	d.writes.Add(1)
	return d.Device.WriteAt(p, off)
}

func (d *flushCounter) Flush() error {
	d.flushes.Add(1)
	return d.Device.Flush()
}

// TestGroupCommitConcurrentFsyncs: four goroutines creating, writing and
// fsyncing small files share journal commits (fewer transactions than
// fsyncs), and a crash right after any fsync returns keeps that file and
// every file fsynced before it: read through ext4io's in-memory replay,
// after e2fsck's replay (then e2fsck -fn clean), and after ext4io's
// replay, which matches e2fsck -E journal_only's.
func TestGroupCommitConcurrentFsyncs(t *testing.T) {
	const jobs, perJob = 4, 40
	base := memdev.NewBlockSize(64<<20, 4096) // torn writes are cut at 4 KiB
	require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{}))
	cdev, err := errordev.NewCrashable(base)
	require.NoError(t, err)
	dev := &flushCounter{Device: cdev}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	require.NoError(t, err)
	type crash struct {
		img    *memdev.Device
		synced map[string][]byte
	}
	var (
		mu      sync.Mutex
		synced  = map[string][]byte{}
		crashes []crash
	)
	txns0, writes0, flushes0 := v.Counters().JournalTransactions, dev.writes.Load(), dev.flushes.Load()
	var wg sync.WaitGroup
	for g := range jobs {
		wg.Go(func() {
			for i := range perJob {
				name := fmt.Sprintf("g%d-%03d", g, i)
				data := bytes.Repeat([]byte{byte(g), byte(i), 0xA5}, 1366)[:4096]
				f, err := v.Create(name)
				if !assert.NoError(t, err) {
					return
				}
				_, err = f.WriteAt(data, 0)
				assert.NoError(t, err)
				assert.NoError(t, f.Sync())
				assert.NoError(t, f.Close())
				mu.Lock()
				synced[name] = data
				if i%4 == g%4 {
					// Crash right after the fsync returned: what the flushes
					// made durable, a random half of the writes since, the
					// last one torn.
					img, err := cdev.Crash(errordev.CrashOptions{Seed: uint64(g*perJob + i), KeepProb: 0.5, TearLast: true})
					assert.NoError(t, err)
					crashes = append(crashes, crash{img, maps.Clone(synced)})
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	c := v.Counters()
	fsyncs := int64(jobs * perJob)
	txns := int64(c.JournalTransactions - txns0)
	writes, flushes := dev.writes.Load()-writes0, dev.flushes.Load()-flushes0
	t.Logf("%d fsyncs: %d transactions, %.2f device writes and %.2f flushes per fsync",
		fsyncs, txns, float64(writes)/float64(fsyncs), float64(flushes)/float64(fsyncs))
	// Without batching, commits that happen to overlap share about one
	// fsync in seven; batching shares most.
	assert.LessOrEqual(t, txns, fsyncs*2/3, "concurrent fsyncs share commits")
	require.NoError(t, v.Close())
	require.NotEmpty(t, crashes)

	e2fsck := e2fs.Tool(t, "e2fsck")
	for i, c := range crashes {
		ro, err := ext4io.Open(c.img, ext4io.Options{})
		require.NoError(t, err, "crash %d: read-only open", i)
		checkSynced(t, ro, c.synced)
		require.NoError(t, ro.Close())
		if i%5 != 0 {
			continue // e2fsck on a fifth of them
		}
		t.Run(fmt.Sprintf("crash%d", i), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			byFsck, byExt4io, journalOnly := filepath.Join(dir, "fsck.img"), filepath.Join(dir, "ext4io.img"), filepath.Join(dir, "jonly.img")
			for _, p := range []string{byFsck, byExt4io, journalOnly} {
				saveDev(t, c.img, p)
			}
			out, err := exec.Command(e2fsck, "-fy", byFsck).CombinedOutput()
			require.LessOrEqual(t, exitCode(err), 1, "e2fsck -fy: %v\n%s", err, out)
			e2fs.Fsck(t, byFsck)
			fv, err := ext4io.OpenImage(byFsck, ext4io.Options{})
			require.NoError(t, err)
			checkSynced(t, fv, c.synced)
			fv.Close()

			exec.Command(e2fsck, "-E", "journal_only", "-y", journalOnly).Run()
			xv, err := ext4io.OpenImage(byExt4io, ext4io.Options{Replay: true})
			require.NoError(t, err)
			xv.Close()
			compareReplays(t, byExt4io, journalOnly)
			e2fs.Fsck(t, byExt4io)
		})
	}
}
