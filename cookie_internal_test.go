package ext4io

import (
	"os"
	"testing"

	"github.com/ext4io/ext4io/iomap"
)

// TestValidityCookie: a mapping from the buffered ops carries the inode's
// extent change counter; write-back mapping the delayed blocks makes it
// stale (Valid false), and so do truncate and direct allocation, while a
// fresh Begin is valid again.
func TestValidityCookie(t *testing.T) {
	img := orphanImage(t, "")
	v, err := OpenImage(img, Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
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
	d, err := v.OpenFile("f", os.O_RDWR|O_DIRECT, 0)
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

// TestFrontCache: lookups inside a large written extent are served from
// the mapper's front slots while its seq is unchanged; a punch, a
// collapse and an overwrite after write-zeroes change the mapping, and
// reads see the change at once.
func TestFrontCache(t *testing.T) {
	t.Parallel()
	img := orphanImage(t, "")
	v, err := OpenImage(img, Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	f, err := v.Create("f")
	if err != nil {
		t.Fatal(err)
	}
	const size = 2 << 20
	model := make([]byte, size)
	for i := range model {
		model[i] = byte(i/4096) | 1
	}
	if _, err := f.WriteAt(model, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	check := func(what string) {
		t.Helper()
		got := make([]byte, len(model))
		if n, err := f.ReadAt(got, 0); n != len(model) {
			t.Fatalf("%s: read %d: %v", what, n, err)
		}
		for i := range got {
			if got[i] != model[i] {
				t.Fatalf("%s: byte %d (block %d) is %#x, want %#x", what, i, i/4096, got[i], model[i])
			}
		}
	}
	check("written")
	fe := f.m.front[frontSlot(0)].Load()
	if fe == nil || fe.seq != f.m.seq.Load() || fe.e.Len < frontMin {
		t.Fatalf("front slot after reads: %+v, want the file's extent at seq %d", fe, f.m.seq.Load())
	}
	if err := f.Fallocate(FallocPunchHole, 64<<10, 64<<10); err != nil {
		t.Fatal(err)
	}
	clear(model[64<<10 : 128<<10])
	check("after punch")
	if err := f.Fallocate(FallocCollapseRange, 256<<10, 128<<10); err != nil {
		t.Fatal(err)
	}
	model = append(model[:256<<10], model[384<<10:]...)
	check("after collapse")
	if err := f.Fallocate(FallocZeroRange, 1<<20, 256<<10); err != nil {
		t.Fatal(err)
	}
	clear(model[1<<20 : 1<<20+256<<10])
	check("after zero-range")
	if err := f.Truncate(512 << 10); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 20); err != nil {
		t.Fatal(err)
	}
	model = append(model[:512<<10], make([]byte, 512<<10)...)
	check("after truncate down and up")
}
