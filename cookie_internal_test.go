package ext4io

import (
	"testing"

	"github.com/ext4io/ext4io/iomap"
)

// TestValidityCookie: a mapping from the buffered ops carries the inode's
// extent change counter; write-back mapping the delayed blocks makes it
// stale (Valid false), and so do truncate and direct allocation, while a
// fresh Begin is valid again.
func TestValidityCookie(t *testing.T) {
	img := orphanImage(t, "")
	v, err := OpenImage(img, Options{Writable: true, WritebackAge: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	f, err := v.Create("f")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 8192), 0); err != nil {
		t.Fatal(err)
	}
	ops := f.n.bops
	begin := func() iomap.Mapping {
		t.Helper()
		f.n.mu.RLock()
		defer f.n.mu.RUnlock()
		m, err := ops.Begin(0, 8192, 0)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := begin()
	if m.Type != iomap.Delalloc || !ops.Valid(m) {
		t.Fatalf("before write-back: %v valid=%v; want a valid delalloc mapping", m, ops.Valid(m))
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if ops.Valid(m) {
		t.Fatalf("delalloc mapping %v still valid after write-back mapped the blocks", m)
	}
	m = begin()
	if m.Type != iomap.Mapped || !ops.Valid(m) {
		t.Fatalf("after write-back: %v valid=%v; want a valid mapped mapping", m, ops.Valid(m))
	}
	if err := f.Truncate(1024); err != nil {
		t.Fatal(err)
	}
	if ops.Valid(m) {
		t.Fatalf("mapping %v still valid after truncate", m)
	}
	d, err := v.OpenFile("f", Direct)
	if err != nil {
		t.Fatal(err)
	}
	m = begin()
	if _, err := d.WriteAt(make([]byte, 1024), 65536); err != nil { // allocates
		t.Fatal(err)
	}
	if ops.Valid(m) {
		t.Fatalf("mapping %v still valid after a direct write allocated", m)
	}
}
