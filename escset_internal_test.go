package ext4io

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/ext4io/ext4io/esc"
)

func TestClipRegion(t *testing.T) {
	e := esc.Extent{Lblk: escRegion - 10, Len: 30, Pblk: 500, Status: esc.Written}
	if got, want := clipRegion(e, escRegion-1), (esc.Extent{Lblk: escRegion - 10, Len: 10, Pblk: 500, Status: esc.Written}); got != want {
		t.Errorf("left: %v, want %v", got, want)
	}
	if got, want := clipRegion(e, escRegion), (esc.Extent{Lblk: escRegion, Len: 20, Pblk: 510, Status: esc.Written}); got != want {
		t.Errorf("right: %v, want %v", got, want)
	}
	h := esc.Extent{Lblk: 5, Len: 3 * escRegion, Status: esc.Hole}
	if got, want := clipRegion(h, 2*escRegion+7), (esc.Extent{Lblk: 2 * escRegion, Len: escRegion, Status: esc.Hole}); got != want {
		t.Errorf("hole: %v, want %v", got, want)
	}
}

// TestEscStripes: with 1 KiB blocks (8 MiB regions) a 40 MiB file spans
// five regions; random direct writes (some into preallocated space), punches
// and reads keep the file equal to a model, and every cached entry lies in
// one region of its own stripe.
func TestEscStripes(t *testing.T) {
	t.Parallel()
	_, v := memVolume(t, 128<<20, 1024)
	defer v.Close()
	const size = 40 << 20
	f, d := preallocated(t, v, "f", size)
	model := make([]byte, size)
	rng := rand.New(rand.NewPCG(5, 6))
	buf := make([]byte, 64<<10)
	// Writes across each region boundary, into preallocated space and
	// over written blocks.
	for r := int64(1); r*escRegion*1024 < size; r++ {
		for _, off := range []int64{r*escRegion*1024 - 4096, r*escRegion*1024 - 2048} {
			p := bytes.Repeat([]byte{byte(r + off%7)}, 8192)
			if _, err := d.WriteAt(p, off); err != nil {
				t.Fatal(err)
			}
			copy(model[off:], p)
		}
	}
	// A buffered write across a boundary into a punched hole: its Delayed
	// range, then the written extent write-back maps, span two regions.
	hole := int64(3*escRegion*1024 - 16384)
	if err := f.Fallocate(FallocPunchHole, hole, 32768); err != nil {
		t.Fatal(err)
	}
	clear(model[hole : hole+32768])
	p := bytes.Repeat([]byte{0x5A}, 32768)
	if _, err := f.WriteAt(p, hole); err != nil {
		t.Fatal(err)
	}
	copy(model[hole:], p)
	checkStripes := func(what string) {
		t.Helper()
		entries := 0
		for i := range escStripes {
			tr := f.m.escTree(i)
			tr.Range(0, esc.MaxBlocks-1, func(e esc.Extent) bool {
				entries++
				lo, hi := regionOf(e.Lblk)
				if uint64(e.End()) > hi || uint64(e.Lblk) < lo || escStripe(f.n.ino, e.Lblk) != i {
					t.Errorf("%s: stripe %d caches %v, outside its regions", what, i, e)
				}
				return true
			})
		}
		if entries == 0 {
			t.Fatalf("%s: nothing cached", what)
		}
	}
	checkStripes("after a buffered write")
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	checkStripes("after write-back")
	for i := 0; i < 400; i++ {
		off := int64(rng.IntN(size/1024-64)) * 1024
		n := (1 + rng.IntN(64)) * 1024
		switch rng.IntN(8) {
		case 0:
			if err := d.Fallocate(FallocPunchHole, off, int64(n)); err != nil {
				t.Fatal(err)
			}
			clear(model[off : off+int64(n)])
		case 1:
			got := buf[:n]
			if _, err := d.ReadAt(got, off); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, model[off:off+int64(n)]) {
				t.Fatalf("step %d: read at %d differs", i, off)
			}
		default:
			p := buf[:n]
			for j := range p {
				p[j] = byte(i + j/1024 + 1)
			}
			if _, err := d.WriteAt(p, off); err != nil {
				t.Fatal(err)
			}
			copy(model[off:], p)
		}
	}
	got := make([]byte, size)
	if _, err := d.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, model) {
		t.Fatal("the file differs from the model")
	}
	checkStripes("at the end")
	// Truncate drops the cached mappings of every region.
	if err := d.Truncate(0); err != nil {
		t.Fatal(err)
	}
	for i := range escStripes {
		tr := f.m.escTree(i)
		tr.Range(0, esc.MaxBlocks-1, func(e esc.Extent) bool {
			if e.Status != esc.Hole {
				t.Errorf("stripe %d still caches %v after truncate", i, e)
			}
			return true
		})
	}
}

// TestEscInsertSplits: an extent spanning regions is cached region by
// region, each piece in its own stripe, and reads back whole piece by piece.
func TestEscInsertSplits(t *testing.T) {
	m := &mapper{}
	m.cfg.Ino = 7
	m.es = newEscSet(1<<20, false)
	e := esc.Extent{Lblk: escRegion - 3, Len: 2*escRegion + 6, Pblk: 1000, Status: esc.Unwritten}
	if err := m.set(e); err != nil {
		t.Fatal(err)
	}
	var got []esc.Extent
	for i := range escStripes {
		tr := m.escTree(i)
		tr.Range(0, esc.MaxBlocks-1, func(x esc.Extent) bool {
			if escStripe(7, x.Lblk) != i {
				t.Errorf("stripe %d caches %v", i, x)
			}
			got = append(got, x)
			return true
		})
	}
	if len(got) != 4 {
		t.Fatalf("cached %v, want 4 pieces", got)
	}
	for b := e.Lblk; b < e.End(); b += 997 {
		x, err := m.escFill(b)
		if err != nil {
			t.Fatal(err)
		}
		if !x.Contains(b) || x.PblkOf(b) != e.PblkOf(b) || x.Status != esc.Unwritten {
			t.Fatalf("block %d: %v", b, x)
		}
	}
	if _, err := m.drop(0, esc.MaxBlocks-1); err != nil {
		t.Fatal(err)
	}
	for i := range escStripes {
		if n := m.escTree(i).Len(); n != 0 {
			t.Errorf("stripe %d holds %d entries after the drop", i, n)
		}
	}
}

// escLen counts the entries cached for inode ino in every stripe.
func escLen(s *escSet, ino uint32) (n int) {
	for _, c := range s {
		if t := c.Lookup(ino); t != nil {
			n += t.Len()
		}
	}
	return n
}

// TestEscTreesMadeOnUse: an inode gets a tree only in the stripes its
// cached blocks lie in, not in all escStripes: small files written,
// synced, read and truncated make one tree each (a tree made for every
// stripe costs a map entry and budget per stripe and pushes older trees
// out).
func TestEscTreesMadeOnUse(t *testing.T) {
	_, v := memVolume(t, 64<<20, 4096)
	defer v.Close()
	if err := v.Mkdir("d", 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := v.Open("d")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	before := v.CacheStats().Inodes
	const files = 20
	for i := range files {
		f, err := d.CreateAt(string(rune('a'+i)), 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(bytes.Repeat([]byte{byte(i + 1)}, 5000), 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 5000)
		if _, err := f.ReadAt(got, 0); err != nil || got[4999] != byte(i+1) {
			t.Fatalf("read back %d: %v", i, err)
		}
		if err := f.Truncate(4096); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// The directory's own blocks may add a tree.
	if made := v.CacheStats().Inodes - before; made > files+1 {
		t.Errorf("%d extent-status trees for %d one-region files, want at most %d", made, files, files+1)
	}
}
