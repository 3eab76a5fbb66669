//go:build unix

package ext4io_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// processCPU returns the process's user and system CPU time.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWriteAtomicBatchFragmented is BenchmarkWriteAtomicBatch on a
// 1 GiB file (the bench's page-batch file) that 1,024 untimed batches have
// left with about one extent per page, as the bench's atomic-64 leaves
// it: each batch's swap then changes about one tree leaf per page.
// cpu-µs/op is the process's CPU time per batch, steadier than the time
// per batch on a shared machine. It holds about 1.2 GB of memory (the
// device's written blocks) and is skipped with -short.
func BenchmarkWriteAtomicBatchFragmented(b *testing.B) {
	if testing.Short() {
		b.Skip("a 1.5 GiB memory device; not with -short")
	}
	const page, size, batch, warm = 16 << 10, 1 << 30, 64, 1024
	v, f, one := atomicBatchWriter(b, size+512<<20, size, page, batch)
	for range warm {
		one()
	}
	c0, cpu0 := v.Counters(), processCPU(b)
	b.SetBytes(page * batch)
	b.ResetTimer()
	for range b.N {
		one()
	}
	b.StopTimer()
	c, cpu := v.Counters(), processCPU(b)-cpu0
	exts, err := f.Extents()
	require.NoError(b, err)
	b.ReportMetric(float64(len(exts)), "extents")
	b.ReportMetric(float64(c.JournalLogBlocks-c0.JournalLogBlocks)/float64(b.N), "logblocks/op")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
}
