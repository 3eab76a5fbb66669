package ext4io_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/ext4iotest"
)

// adv27HeapInuse is HeapInuse after a collection.
func adv27HeapInuse() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestAdv27PreallocDirectHeapBounded: writing files with O_DIRECT into
// preallocated space, one after another, costs memory bounded by
// Options.InodeCache, not by the number of files written. Each such
// inode used to stay in memory until Close, with 13 KiB of conversion
// bitmap: the heap in use after 2,200 files was 7x that after 200 (under
// 2x since). The margin allows for what does grow with the files (the
// directory, the journal's copies until a checkpoint). The image is a
// file, so that its blocks are not on the heap.
func TestAdv27PreallocDirectHeapBounded(t *testing.T) {
	img := filepath.Join(t.TempDir(), "img")
	dev, err := blockdev.CreateFile(img, 512<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, InodeCache: 64, CacheBudget: 1 << 20,
		MetaCacheBytes: 1 << 20, CommitInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n := 0
	write := func(files int) {
		for range files {
			f, err := v.OpenFile(fmt.Sprintf("/p%d", n), os.O_RDWR|os.O_CREATE|ext4io.O_DIRECT, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Fallocate(ext4io.FallocAllocate, 0, 64<<10); err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(buf, 8192); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if n++; n%50 == 0 {
				if err := v.Sync(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	write(200)
	one := adv27HeapInuse()
	write(2000)
	eleven := adv27HeapInuse()
	t.Logf("heap in use after 200 files %d KiB, after 2200 %d KiB", one>>10, eleven>>10)
	if eleven > 3*one {
		t.Errorf("heap in use after 2200 files written into preallocated space is %d KiB, %.1fx that after 200 (%d KiB), InodeCache 64",
			eleven>>10, float64(eleven)/float64(one), one>>10)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	ext4iotest.Fsck(t, img)
}
