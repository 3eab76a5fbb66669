package ext4io

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"testing"

	"github.com/ext4io/ext4io/blockdev/memdev"
)

// adv27DirectIntoPrealloc creates name, preallocates 64 KiB (unwritten)
// and writes 4 KiB of fill into its third block with O_DIRECT: the write's
// conversion is queued and the block is marked written in the inode's
// convbits, the extent-status cache keeping its unwritten entry.
func adv27DirectIntoPrealloc(t *testing.T, v *Volume, name string, fill byte) {
	t.Helper()
	f, err := v.OpenFile(name, os.O_RDWR|os.O_CREATE|O_DIRECT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Fallocate(FallocAllocate, 0, 64<<10); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{fill}, 4096), 8192); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestAdv27ConvBitsDoNotPinInodes: a file written with O_DIRECT into
// preallocated space, once its conversions are committed, holds nothing
// its on-disk inode does not, so the inode cache lets it go like any
// other clean inode. Every such inode used to stay cached until Close
// (with 13 KiB of conversion bitmap each), whatever Options.InodeCache
// said: a workload filling preallocated files one after another grew
// without bound.
func TestAdv27ConvBitsDoNotPinInodes(t *testing.T) {
	const budget, files = 64, 600
	dev := memdev.NewBlockSize(128<<20, 4096)
	if err := Format(dev, FormatOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err := Open(dev, Options{Writable: true, InodeCache: budget, CommitInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range files {
		adv27DirectIntoPrealloc(t, v, fmt.Sprintf("/p%d", i), byte(i))
		if i%50 == 49 {
			if err := v.Sync(); err != nil { // applies the queued conversions
				t.Fatal(err)
			}
		}
	}
	// As many shrinker passes as reads of uncached inodes would start.
	for range files {
		v.shrinkInodes()
	}
	if n := v.cachedInodes(); n > 2*budget+shrinkBatchMax {
		t.Errorf("%d inodes cached after %d files written into preallocated space, InodeCache %d", n, files, budget)
	}
	runtime.GC()
	for i := 0; i < files; i += 7 {
		got, err := v.ReadFile(fmt.Sprintf("/p%d", i))
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, 64<<10)
		copy(want[8192:], bytes.Repeat([]byte{byte(i)}, 4096))
		if !bytes.Equal(got, want) {
			t.Fatalf("/p%d reads back wrong after its inode left the cache (first difference at %d)", i, adv27FirstDiff(got, want))
		}
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	checkImage(t, dev)
}

func adv27FirstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
