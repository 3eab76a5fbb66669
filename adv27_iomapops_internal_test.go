package ext4io

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"testing"

	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/iomap"
)

// TestAdv27IomapOpsDoNotPinInodes: a file whose iomap ops were handed out
// (File.IomapOps, for callers driving iomap's iterators) is, once closed,
// no different from any other clean file: its inode leaves the cache past
// Options.InodeCache. The ops' flag (inode.noReadahead) used to keep it
// cached until Close, so a program writing its files through the public
// ops grew by an inode per file. The flag needs to live only as long as
// the ops, which hold the inode: a copy read again after the struct is
// collected has no ops to bypass it.
func TestAdv27IomapOpsDoNotPinInodes(t *testing.T) {
	const budget, files = 64, 400
	dev := memdev.NewBlockSize(64<<20, 4096)
	if err := Format(dev, FormatOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err := Open(dev, Options{Writable: true, InodeCache: budget, CommitInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	page := func(i int) []byte { return bytes.Repeat([]byte{byte(i), byte(i >> 8)}, 2048) }
	for i := range files {
		f, err := v.OpenFile(fmt.Sprintf("/o%d", i), os.O_RDWR|os.O_CREATE|O_DIRECT, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		l, err := f.LockIO(IomapNormal, 0, 4096)
		if err != nil {
			t.Fatal(err)
		}
		n, err := iomap.DirectWrite(v.dev, f.IomapOps(IomapNormal), page(i), 0, &iomap.DioOptions{BlockSize: 4096})
		if err := l.Unlock(0, n, err); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if i%50 == 49 {
			if err := v.Sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := v.Sync(); err != nil {
		t.Fatal(err)
	}
	for range files {
		v.shrinkInodes()
	}
	if n := v.cachedInodes(); n > 2*budget+shrinkBatchMax {
		t.Errorf("%d inodes cached after %d files written through their iomap ops, InodeCache %d", n, files, budget)
	}
	runtime.GC()
	for i := 0; i < files; i += 7 {
		got, err := v.ReadFile(fmt.Sprintf("/o%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, page(i)) {
			t.Fatalf("/o%d reads back wrong after its inode left the cache", i)
		}
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	checkImage(t, dev)
}
