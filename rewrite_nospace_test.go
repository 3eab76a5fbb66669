package ext4io_test

import (
	"bytes"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestRewriteAfterTruncateNoSpace truncates a file that fills most of the
// volume and writes it again through the page cache, several times
// between commits. The truncated blocks stay unallocatable until their
// free commits, so the buffered writes must wait for that commit when
// they reserve, not fail later at write-back: every acknowledged write
// is on the device after Sync.
func TestRewriteAfterTruncateNoSpace(t *testing.T) {
	t.Parallel()
	dev := memdev.NewBlockSize(64<<20, 4096)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, WritebackAge: -1, CommitInterval: -1, PageCacheBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	f, err := v.Create("big")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	free := v.Allocator().FreeBlocks()
	size := int64(free) * 4096 * 3 / 4
	chunk := make([]byte, 256<<10)
	for round := byte(1); round <= 4; round++ {
		if err := f.Truncate(0); err != nil {
			t.Fatalf("round %d: truncate: %v", round, err)
		}
		for i := range chunk {
			chunk[i] = round
		}
		for off := int64(0); off < size; off += int64(len(chunk)) {
			if _, err := f.WriteAt(chunk[:min(int64(len(chunk)), size-off)], off); err != nil {
				t.Fatalf("round %d: write at %d: %v", round, off, err)
			}
		}
	}
	if err := v.Sync(); err != nil {
		t.Fatalf("Sync after acknowledged writes: %v", err)
	}
	got := make([]byte, len(chunk))
	for off := int64(0); off < size; off += int64(len(chunk)) {
		n, err := f.ReadAt(got, off)
		if err != nil && n < int(min(int64(len(chunk)), size-off)) {
			t.Fatal(err)
		}
		if !bytes.Equal(got[:n], bytes.Repeat([]byte{4}, n)) {
			t.Fatalf("data at %d is not the last round's", off)
		}
	}
}
