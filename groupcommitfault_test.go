package ext4io_test

import (
	"bytes"
	"fmt"
	"maps"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestGroupCommitDeviceFault fails one device write or flush while four
// goroutines create, write and fsync files with shared (group) commits:
// whichever write fails (a coalesced log run, a commit block, a
// checkpoint's home write, data) or whichever flush, every fsync that
// returned nil survives a crash taken afterwards, and after the fault no
// fsync returns nil for changes the journal did not commit.
//
// The fault's index must lie within the workload: 240 fsyncs shared four
// to a commit at best still flush at least 60 times.
func TestGroupCommitDeviceFault(t *testing.T) {
	for k, ns := range map[errordev.Kind][]int64{errordev.Write: {3, 17, 40, 90, 200}, errordev.Flush: {3, 17, 30, 45, 55}} {
		for _, n := range ns {
			t.Run(fmt.Sprintf("%v-%d", k, n), func(t *testing.T) {
				groupCommitFault(t, k, n)
			})
		}
	}
}

func groupCommitFault(t *testing.T, kind errordev.Kind, n int64) {
	const jobs, perJob = 4, 60
	base := memdev.NewBlockSize(64<<20, 4096)
	require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{JournalBlocks: 1024}))
	cdev, err := errordev.NewCrashable(base)
	require.NoError(t, err)
	toggle := errordev.NewToggle(errordev.OnIndex(kind, n))
	v, err := ext4io.Open(errordev.New(cdev, toggle), ext4io.Options{Writable: true, PageCacheBytes: -1})
	require.NoError(t, err)
	toggle.Enable() // counts from here: the workload's operations
	var (
		mu     sync.Mutex
		synced = map[string][]byte{}
		failed bool
	)
	var wg sync.WaitGroup
	for g := range jobs {
		wg.Go(func() {
			for i := range perJob {
				name := fmt.Sprintf("g%d-%03d", g, i)
				data := bytes.Repeat([]byte{byte(g), byte(i), 0x5A}, 1366)[:4096]
				f, err := v.Create(name)
				if err != nil {
					mu.Lock()
					failed = true
					mu.Unlock()
					return
				}
				_, err = f.WriteAt(data, 0)
				if err == nil {
					err = f.Sync()
				}
				f.Close()
				mu.Lock()
				if err == nil {
					synced[name] = data
				} else {
					failed = true
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	_ = v.Close() // fails after the fault
	for i, keep := range []float64{0, 0.5, 1} {
		img, err := cdev.Crash(errordev.CrashOptions{Seed: uint64(n) + uint64(i), KeepProb: keep, TearLast: keep == 0.5})
		require.NoError(t, err)
		ro, err := ext4io.Open(img, ext4io.Options{})
		require.NoError(t, err, "crash keeping %v", keep)
		checkSynced(t, ro, maps.Clone(synced))
		require.NoError(t, ro.Close())
	}
	require.True(t, failed, "the fault hit nothing")
	t.Logf("%d fsyncs returned nil", len(synced))
}
