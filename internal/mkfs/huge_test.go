package mkfs

import (
	"os"
	"testing"
	"time"
)

// diskTempDir returns a directory on the real disk (sparse 1 TiB files do
// not fit tmpfs), removed at the end of the test.
func diskTempDir(t testing.TB) string {
	dir, err := os.MkdirTemp(".", "hugeimg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func TestFormatHuge(t *testing.T) {
	needTool(t, "e2fsck")
	sizes := []int64{1 << 40}
	if os.Getenv("EXT4IO_LONG") != "" {
		sizes = append(sizes, 15<<40)
	}
	for _, size := range sizes {
		dir := diskTempDir(t)
		start := time.Now()
		p := formatImage(t, dir, size, Options{})
		t.Logf("Format %d TiB: %v", size>>40, time.Since(start))
		fsck(t, p)
		checkFeatures(t, p, size, Options{BlockSize: 4096})
		os.Remove(p)
	}
}

func BenchmarkFormat1TiB(b *testing.B) {
	dir := diskTempDir(b)
	for b.Loop() {
		formatImage(b, dir, 1<<40, Options{})
	}
}
