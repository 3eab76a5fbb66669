//go:build unix

package ext4io_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
)

// formatImageB is formatImage for benchmarks.
func formatImageB(b *testing.B, size int64, opts ext4io.FormatOptions) string {
	b.Helper()
	img := filepath.Join(b.TempDir(), "bench.img")
	dev, err := blockdev.CreateFile(img, size)
	if err != nil {
		b.Fatal(err)
	}
	if err := ext4io.Format(dev, opts); err != nil {
		b.Fatal(err)
	}
	if err := dev.Close(); err != nil {
		b.Fatal(err)
	}
	return img
}

func benchVolume(b *testing.B) *ext4io.Volume {
	b.Helper()
	img := formatImageB(b, 1<<30, ext4io.FormatOptions{InodeRatio: 4096})
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { v.Close() })
	return v
}

// BenchmarkNamespaceCreateOneDir: empty files created in one directory
// (htree inserts and splits).
func BenchmarkNamespaceCreateOneDir(b *testing.B) {
	v := benchVolume(b)
	if err := v.Mkdir("d", 0o755); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f, err := v.Create(fmt.Sprintf("d/file-%09d", i))
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "creates/s")
}

// BenchmarkNamespaceCreateManyDirs: empty files spread over 100
// directories of their own.
func BenchmarkNamespaceCreateManyDirs(b *testing.B) {
	v := benchVolume(b)
	for d := 0; d < 100; d++ {
		if err := v.Mkdir(fmt.Sprintf("d%03d", d), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f, err := v.Create(fmt.Sprintf("d%03d/file-%09d", i%100, i))
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "creates/s")
}

// BenchmarkNamespaceLookup100k: Lstat of random names in a directory of
// 100,000 entries (EXT4IO_BENCH_ENTRIES overrides the size).
func BenchmarkNamespaceLookup100k(b *testing.B) {
	n := nsEnv("EXT4IO_BENCH_ENTRIES", 100000)
	v := benchVolume(b)
	if err := v.Mkdir("d", 0o755); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i++ {
		f, err := v.Create(fmt.Sprintf("d/file-%09d", i))
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := v.Lstat(fmt.Sprintf("d/file-%09d", (i*7919)%n)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
}
