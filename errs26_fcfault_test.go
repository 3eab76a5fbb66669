package ext4io_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
)

// TestFastCommitDeviceFault fails one device write or flush while four
// goroutines append to their files with fsyncs that share fast commits
// and overwrite the files' first pages with journalled atomic writes
// (written in place in the background): whichever write (data, tags, a
// journal block, a write in place) or flush fails, every fsync that
// returned nil survives a crash taken afterwards (keeping no unflushed
// write, half of them torn, or all), the step that failed reads as done
// or not done, and e2fsck finds the recovered image clean.
func TestFastCommitDeviceFault(t *testing.T) {
	for k, ns := range map[errordev.Kind][]int64{
		errordev.Write: {2, 5, 9, 14, 20, 30, 45, 70, 100, 150},
		errordev.Flush: {1, 2, 3, 5, 8, 13, 21, 34},
	} {
		for _, n := range ns {
			t.Run(fmt.Sprintf("%v-%d", k, n), func(t *testing.T) {
				t.Parallel()
				fastCommitFault(t, k, n)
			})
		}
	}
}

// fcFaultFile is a file's state as its fsyncs acknowledged it, and the
// step in flight when one failed.
type fcFaultFile struct {
	acked    []byte
	failed   bool
	appended []byte // a failed append's bytes, which may be there
	page     []byte // a failed atomic write's page at 0, which may be there
}

func fastCommitFault(t *testing.T, kind errordev.Kind, n int64) {
	const jobs, perJob = 4, 40
	base := memdev.NewBlockSize(64<<20, 4096)
	require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{FastCommit: true, NoDiscard: true}))
	cdev, err := errordev.NewCrashable(base)
	require.NoError(t, err)
	toggle := errordev.NewToggle(errordev.OnIndex(kind, n))
	v, err := ext4io.Open(errordev.New(cdev, toggle), ext4io.Options{Writable: true, PageCacheBytes: -1, CommitInterval: -1})
	require.NoError(t, err)
	files := make([]*fcFaultFile, jobs)
	handles := make([]*ext4io.File, jobs)
	for g := range jobs {
		f, err := v.Create(fmt.Sprintf("g%d", g))
		require.NoError(t, err)
		p := bytes.Repeat([]byte{byte(0x10 + g)}, 16<<10)
		_, err = f.WriteAt(p, 0)
		require.NoError(t, err)
		handles[g], files[g] = f, &fcFaultFile{acked: p}
	}
	require.NoError(t, v.Sync())
	toggle.Enable() // counts from here: the workload's operations
	var wg sync.WaitGroup
	var journalled int
	var mu sync.Mutex
	for g := range jobs {
		wg.Go(func() {
			f, st := handles[g], files[g]
			for i := range perJob {
				if i%3 == 2 {
					page := bytes.Repeat([]byte{byte(g), byte(i), 0xA5, 0x3C}, 4096)
					c0 := v.Counters().AtomicJournalled
					_, err := f.WriteAtomic(page, 0)
					if err == nil {
						err = f.Datasync()
					}
					if err != nil {
						st.failed, st.page = true, page
						return
					}
					if v.Counters().AtomicJournalled > c0 {
						mu.Lock()
						journalled++
						mu.Unlock()
					}
					copy(st.acked, page)
					continue
				}
				data := bytes.Repeat([]byte{byte(g), byte(i), 0x5A}, 1366)[:4096]
				_, err := f.WriteAt(data, int64(len(st.acked)))
				if err == nil {
					err = f.Sync()
				}
				if err != nil {
					st.failed, st.appended = true, data
					return
				}
				st.acked = append(st.acked, data...)
			}
		})
	}
	wg.Wait()
	for _, f := range handles {
		_ = f.Close()
	}
	_ = v.Close() // fails after the fault
	failed := false
	for _, st := range files {
		failed = failed || st.failed
	}
	for i, keep := range []float64{0, 0.5, 1} {
		img, err := cdev.Crash(errordev.CrashOptions{Seed: uint64(n) + uint64(i), KeepProb: keep, TearLast: keep == 0.5})
		require.NoError(t, err)
		cv, err := ext4io.Open(img, ext4io.Options{Writable: true})
		require.NoError(t, err, "crash keeping %v", keep)
		for g, st := range files {
			got, err := cv.ReadFile(fmt.Sprintf("g%d", g))
			require.NoError(t, err, "g%d (crash keeping %v)", g, keep)
			checkFaultFile(t, fmt.Sprintf("g%d (crash keeping %v, failed %v)", g, keep, st.failed), got, st)
		}
		require.NoError(t, cv.Close())
		ext4iotest.FsckDev(t, img)
	}
	require.True(t, failed, "the fault hit nothing")
	t.Logf("%d journalled atomic writes acknowledged, %d fast commits", journalled, v.Counters().FastCommits)
}

func checkFaultFile(t *testing.T, name string, got []byte, st *fcFaultFile) {
	t.Helper()
	want := st.acked
	switch {
	case st.appended != nil && len(got) == len(want)+len(st.appended):
		require.Equal(t, st.appended, got[len(want):], "%s: the failed append", name)
		got = got[:len(want)]
	case st.page != nil && len(got) == len(want) && bytes.Equal(got[:len(st.page)], st.page):
		got = append(append([]byte(nil), st.page...), got[len(st.page):]...)
		want = append(append([]byte(nil), st.page...), want[len(st.page):]...)
	}
	require.Equal(t, len(want), len(got), "%s: length", name)
	if i := firstDiff(want, got); i >= 0 {
		t.Fatalf("%s: differs at byte %d of %d", name, i, len(want))
	}
}
