package ext4io_test

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// BenchmarkSmallFileFsync is the bench's fsync-small workload in memory:
// jobs goroutines each create a file in the root directory, write 4 KiB
// into it, fsync and close it. It reports the device writes and flushes
// per file beside the CPU time (ns/op is wall time divided by files, so
// with 4 jobs it is about CPU time per file only on an idle machine with
// GOMAXPROCS 1; run with -benchmem for the allocations). The -reuse
// variants reuse smallFsyncNames names as the bench's fsync-small does:
// file n unlinks file n-smallFsyncNames before it creates its name.
func BenchmarkSmallFileFsync(b *testing.B) {
	const smallFsyncNames = 1024
	for _, mode := range []string{"full", "fast", "full-reuse", "fast-reuse"} {
		fc := strings.HasPrefix(mode, "fast")
		reuse := strings.HasSuffix(mode, "-reuse")
		for _, jobs := range []int{1, 4} {
			b.Run(fmt.Sprintf("%s/jobs=%d", mode, jobs), func(b *testing.B) {
				base := memdev.New(1 << 30)
				if err := ext4io.Format(base, ext4io.FormatOptions{FastCommit: fc, NoDiscard: true}); err != nil {
					b.Fatal(err)
				}
				dev := &countDev{Device: base}
				v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
				if err != nil {
					b.Fatal(err)
				}
				defer v.Close()
				data := make([]byte, 4096)
				var next atomic.Int64
				var wg sync.WaitGroup
				var failed atomic.Value
				w0, f0 := dev.writes.Load(), dev.flushes.Load()
				c0 := v.Counters()
				b.ReportAllocs()
				b.ResetTimer()
				for range jobs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							n := next.Add(1)
							if n > int64(b.N) {
								return
							}
							name := fmt.Sprintf("/small-%d", n)
							var err error
							if reuse {
								name = fmt.Sprintf("/small-%d", (n-1)%smallFsyncNames)
								if n > smallFsyncNames {
									err = v.Unlink(name)
								}
							}
							var f *ext4io.File
							if err == nil {
								f, err = v.Create(name)
							}
							if err == nil {
								_, err = f.WriteAt(data, 0)
								if err == nil {
									err = f.Sync()
								}
								if cerr := f.Close(); err == nil {
									err = cerr
								}
							}
							if err != nil {
								failed.Store(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				if err := failed.Load(); err != nil {
					b.Fatal(err)
				}
				c := v.Counters()
				n := float64(b.N)
				b.ReportMetric(float64(dev.writes.Load()-w0)/n, "writes/op")
				b.ReportMetric(float64(dev.flushes.Load()-f0)/n, "flushes/op")
				b.ReportMetric(float64(c.FastCommitFallbacks-c0.FastCommitFallbacks)/n, "fallbacks/op")
			})
		}
	}
}
