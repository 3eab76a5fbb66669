package ext4io

import (
	"bytes"
	"errors"
	"os"
	"sync/atomic"
	"testing"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// failMagicDev fails the writes whose data starts with magic while armed.
type failMagicDev struct {
	blockdev.Device
	magic []byte
	armed atomic.Bool
}

var errMagicWrite = errors.New("injected write error")

func (d *failMagicDev) WriteAt(p []byte, off int64) (int, error) {
	if d.armed.Load() && bytes.HasPrefix(p, d.magic) {
		return 0, errMagicWrite
	}
	return d.Device.WriteAt(p, off)
}

// TestAdvInodeCacheWritebackErrorSurvivesDemotion: a background write-back
// fails, the failed pages are then dropped (truncate), and the inode,
// clean and without pages, is demoted. The sticky write-back error lives
// in the page cache's entry of the file, which demotion drops
// (ForgetUnused): the next fsync must still report it, as it does when the
// inode stays cached.
func TestAdvInodeCacheWritebackErrorSurvivesDemotion(t *testing.T) {
	mem := memdev.NewBlockSize(32<<20, 4096)
	if err := Format(mem, FormatOptions{}); err != nil {
		t.Fatal(err)
	}
	magic := []byte("write-back fails")
	dev := &failMagicDev{Device: mem, magic: magic}
	v, err := Open(dev, Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	f, err := v.OpenFile("/a", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, 8192)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	b := bytes.Repeat([]byte{0x5a}, 4096)
	copy(b, magic)
	if _, err := f.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
	dev.armed.Store(true)
	if _, err := v.pc.WritebackOldest(); !errors.Is(err, errMagicWrite) {
		t.Fatalf("background write-back: %v, want the injected error", err)
	}
	dev.armed.Store(false)
	if err := f.Truncate(0); err != nil { // drops the failed dirty pages
		t.Fatal(err)
	}
	n := f.n
	for range 3 { // times written; nothing pending
		if err := v.syncInode(n); err != nil {
			t.Fatal(err)
		}
	}
	n.used.Store(false)
	demoted := v.demote(n)
	t.Logf("demoted: %v", demoted)
	if err := f.Sync(); !errors.Is(err, errMagicWrite) {
		t.Fatalf("fsync after a failed background write-back (inode demoted: %v): %v, want the write-back error", demoted, err)
	}
}
