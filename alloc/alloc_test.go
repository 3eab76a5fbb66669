package alloc

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/internal/mkfs"
	"github.com/ext4io/ext4io/layout"
)

// TestConcurrent runs 16 goroutines allocating and freeing; at the end the
// bitmaps must show exactly the union of the runs they own.
func TestConcurrent(t *testing.T) {
	m := newImage(t, 128<<20, mkfs.Options{BlockSize: 1024}, nil)
	a := m.a
	free0 := a.FreeBlocks()
	var wg sync.WaitGroup
	owned := make([][]run, 16)
	inos := make([][]uint32, 16)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []run
			for i := 0; i < 300; i++ {
				var s, n uint64
				var err error
				switch i % 3 {
				case 0:
					s, n, err = a.Alloc(uint64(w*7000+i), 1, 1)
				case 1:
					s, n, err = a.AllocFor(uint32(100+w), uint64(w*7000), 1, 16)
				default:
					s, n, err = a.Alloc(uint64(w*7000), 8, 64)
				}
				if err != nil {
					t.Error(err)
					return
				}
				mine = append(mine, run{s, n})
				if i%5 == 4 {
					r := mine[len(mine)/2]
					mine = append(mine[:len(mine)/2], mine[len(mine)/2+1:]...)
					if err := a.Free(r.start, r.n); err != nil {
						t.Error(err)
						return
					}
				}
				if i%30 == 0 {
					ino, err := a.AllocInode(2, i%60 == 0)
					if err != nil {
						t.Error(err)
						return
					}
					inos[w] = append(inos[w], ino)
				}
			}
			a.ReleasePrealloc(uint32(100 + w))
			owned[w] = mine
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// No block owned twice; the reopened bitmaps hold every owned block.
	seen := map[uint64]bool{}
	total := uint64(0)
	var all []run
	for _, rs := range owned {
		for _, r := range rs {
			for b := r.start; b < r.start+r.n; b++ {
				if seen[b] {
					t.Fatalf("block %d owned twice", b)
				}
				seen[b] = true
			}
			total += r.n
			all = append(all, r)
		}
	}
	if got := a.FreeBlocks(); got != free0-total {
		t.Fatalf("FreeBlocks %d, want %d (lost or double blocks)", got, free0-total)
	}
	m.sync(t)
	m.reopen(t, Options{})
	for _, r := range all {
		gi := m.a.groupOf(r.start)
		g := m.a.g[gi]
		g.mu.Lock()
		if err := m.a.loadLocked(gi); err != nil {
			t.Fatal(err)
		}
		base := m.sb.GroupFirstBlock(gi)
		ok := allSet(g.mu.bitmap, r.start-base, r.n)
		g.mu.Unlock()
		if !ok {
			t.Fatalf("owned run %d+%d not marked on disk", r.start, r.n)
		}
	}
	if got := m.a.FreeBlocks(); got != free0-total {
		t.Fatalf("reopened FreeBlocks %d, want %d", got, free0-total)
	}
	// Free the inodes (they were never written) and check with e2fsck.
	for w := range inos {
		for k, ino := range inos[w] {
			if err := m.a.FreeInode(ino, k%2 == 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, r := range all {
		if err := m.a.Free(r.start, r.n); err != nil {
			t.Fatal(err)
		}
	}
	m.sync(t)
	fsck(t, m.path)
}

func TestPreallocContiguous(t *testing.T) {
	m := newImage(t, 64<<20, mkfs.Options{}, nil)
	a := m.a
	free0 := a.FreeBlocks()
	// Two files appended block by block, interleaved.
	var last [2]uint64
	for i := 0; i < 100; i++ {
		for f := range 2 {
			s, n, err := a.AllocFor(uint32(20+f), last[f], 1, 1)
			if err != nil || n != 1 {
				t.Fatal(err)
			}
			if i > 0 && s != last[f] {
				t.Fatalf("file %d block %d at %d, want %d (not contiguous)", f, i, s, last[f])
			}
			last[f] = s + 1
		}
	}
	if a.FreeBlocks() != free0-200 {
		t.Fatalf("windows counted as used: %d free, want %d", a.FreeBlocks(), free0-200)
	}
	a.ReleasePrealloc(20)
	a.ReleasePrealloc(21)
	m.sync(t)
	m.reopen(t, Options{})
	if m.a.FreeBlocks() != free0-200 {
		t.Fatal("on-disk count differs")
	}
}

func TestReservations(t *testing.T) {
	m := newImage(t, 32<<20, mkfs.Options{}, nil)
	a := m.a
	av := a.Available(0)
	if err := a.Reserve(100); err != nil {
		t.Fatal(err)
	}
	if a.Available(0) != av-100 {
		t.Fatalf("Available %d after reserving 100 of %d", a.Available(0), av)
	}
	s, n, err := a.Allocate(Request{Min: 60, Max: 60, Flags: Delalloc})
	if err != nil || n != 60 {
		t.Fatal(n, err)
	}
	if a.Reserved() != 40 || a.Available(0) != av-100 {
		t.Fatalf("after claim: reserved %d available %d", a.Reserved(), a.Available(0))
	}
	if _, _, err := a.Allocate(Request{Min: 41, Max: 41, Flags: Delalloc}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("over-claim: %v", err)
	}
	if err := a.Unreserve(40); err != nil {
		t.Fatal(err)
	}
	if a.Available(0) != av-60 {
		t.Fatalf("Available %d, want %d", a.Available(0), av-60)
	}
	// Reserving everything blocks ordinary allocations but not the pool.
	if err := a.Reserve(a.Available(0)); err != nil {
		t.Fatal(err)
	}
	before := a.FreeBlocks()
	if _, _, err := a.Alloc(0, 1, 1); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("ordinary alloc with all space reserved: %v", err)
	}
	if a.FreeBlocks() != before {
		t.Fatal("failed alloc changed counts")
	}
	if _, _, err := a.Allocate(Request{Min: 1, Max: 1, Flags: Privileged}); err != nil {
		t.Fatalf("privileged alloc into root reserve: %v", err)
	}
	if _, _, err := a.AllocReserved(0, 1, 1); err != nil {
		t.Fatalf("must-succeed alloc: %v", err)
	}
	_ = s
}

func TestInodes(t *testing.T) {
	m := newImage(t, 256<<20, mkfs.Options{BlockSize: 1024}, nil)
	a := m.a
	fi := a.FreeInodes()
	groups := map[uint64]bool{}
	var dirs []uint32
	for i := 0; i < 4; i++ {
		ino, err := a.AllocInode(layout.RootIno, true)
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, ino)
		groups[uint64((ino-1)/m.sb.InodesPerGroup)] = true
	}
	if len(groups) < 2 {
		t.Fatalf("top-level directories not spread: %v", dirs)
	}
	f, err := a.AllocInode(dirs[1], false)
	if err != nil {
		t.Fatal(err)
	}
	if (f-1)/m.sb.InodesPerGroup != (dirs[1]-1)/m.sb.InodesPerGroup {
		t.Fatalf("file %d not in its parent %d's group", f, dirs[1])
	}
	if a.FreeInodes() != fi-5 {
		t.Fatal("free inode count")
	}
	if err := a.FreeInode(f, false); err != nil {
		t.Fatal(err)
	}
	if err := a.FreeInode(f, false); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("double FreeInode: %v", err)
	}
	if err := a.FreeInode(5, false); !errors.Is(err, ErrInvalid) {
		t.Fatalf("freeing reserved inode: %v", err)
	}
	for _, d := range dirs {
		if err := a.FreeInode(d, true); err != nil {
			t.Fatal(err)
		}
	}
	m.sync(t)
	fsck(t, m.path)
}

// TestCorruptBitmap: a bitmap whose checksum or count is wrong is refused.
func TestCorruptBitmap(t *testing.T) {
	m := newImage(t, 32<<20, mkfs.Options{}, nil)
	d, _ := m.a.GroupDesc(0)
	if _, err := m.dev.WriteAt([]byte{0}, int64(d.BlockBitmap)*int64(m.sb.BlockSize())+100); err != nil {
		t.Fatal(err)
	}
	m.reopen(t, Options{})
	if _, _, err := m.a.Alloc(0, 1, 1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Alloc on a corrupt bitmap: %v", err)
	}
}

// FuzzLoadBitmap feeds arbitrary bitmap blocks to the loader: it must not
// panic, and a bitmap it accepts must allocate consistently.
func FuzzLoadBitmap(f *testing.F) {
	f.Add(make([]byte, 64), uint16(0))
	f.Add([]byte{0xff, 0x0f, 0, 1}, uint16(3))
	f.Fuzz(func(t *testing.T, pat []byte, flags uint16) {
		dev := memdev.New(16 << 20)
		if err := mkfs.Format(dev, mkfs.Options{BlockSize: 1024, UUID: [16]byte{1}, HashSeed: [16]byte{2}}); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1024)
		dev.ReadAt(buf, 1024)
		sb, err := layout.DecodeSuperblock(buf)
		if err != nil {
			t.Fatal(err)
		}
		a, err := New(sb, NewDirectIO(dev, 1024), Options{})
		if err != nil {
			t.Fatal(err)
		}
		d, _ := a.GroupDesc(1)
		if len(pat) > 0 {
			bm := make([]byte, 1024)
			for i := range bm {
				bm[i] = pat[i%len(pat)]
			}
			dev.WriteAt(bm, int64(d.BlockBitmap)*1024)
		}
		g := a.g[1]
		g.mu.desc.Flags = flags
		g.mu.Lock()
		err = a.loadLocked(1)
		g.mu.Unlock()
		if err != nil {
			return
		}
		if s, n, err := a.Alloc(a.sb.GroupFirstBlock(1), 1, 8); err == nil {
			if err := a.Free(s, n); err != nil {
				t.Fatalf("free after alloc: %v", err)
			}
		}
	})
}

// TestWindowsHideNoSpace: per-inode windows hide most of the free space
// (many files, each allocated one block, none released), and several
// goroutines allocate at once. Whenever a search fails, idle windows are
// given back and the search runs again, also when another goroutine gave
// them back first: no allocation fails while half the space is free.
func TestWindowsHideNoSpace(t *testing.T) {
	m := newImage(t, 64<<20, mkfs.Options{}, nil)
	a := m.a
	budget := a.FreeBlocks() / 2
	var next atomic.Uint32
	next.Store(100)
	var used atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for used.Add(1) <= int64(budget) {
				if _, _, err := a.AllocFor(next.Add(1), 0, 1, 1); err != nil {
					errs <- fmt.Errorf("allocation %d of %d (%d free): %w", used.Load(), budget, a.FreeBlocks(), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestAlign checks Request.Align: a run away from its goal starts at a
// block congruent to the goal, through a window or not; a run at its goal
// stays there; an extent without room for the aligned run is used
// unaligned; and the skipped blocks stay free.
func TestAlign(t *testing.T) {
	m := newImage(t, 64<<20, mkfs.Options{}, nil)
	a := m.a
	if _, _, err := a.Allocate(Request{Min: 1, Max: 8, Align: 24}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("alignment 24: %v, want ErrInvalid", err)
	}
	// The group's first block holds the superblock: not free.
	goal := a.sb.GroupFirstBlock(0) + 5
	for _, ino := range []uint32{0, 30} {
		free0 := a.FreeBlocks()
		s, n, err := a.Allocate(Request{Goal: goal, Min: 1, Max: 64, Align: 256, Ino: ino})
		if err != nil || n != 64 {
			t.Fatalf("ino %d: %d blocks, %v", ino, n, err)
		}
		if s%256 != goal%256 {
			t.Fatalf("ino %d: run at %d, want a block ≡ %d mod 256", ino, s, goal%256)
		}
		if a.FreeBlocks() != free0-64 {
			t.Fatalf("ino %d: %d blocks used, want 64", ino, free0-a.FreeBlocks())
		}
		// At its goal a run stays there, aligned or not.
		s2, n2, err := a.Allocate(Request{Goal: s + 64, Min: 1, Max: 16, Align: 256, Ino: ino})
		if err != nil || s2 != s+64 || n2 != 16 {
			t.Fatalf("ino %d: run at goal %d: %d+%d, %v", ino, s+64, s2, n2, err)
		}
		if ino != 0 {
			a.ReleasePrealloc(ino)
		}
		// The skipped blocks are still free: allocate right before s.
		if s3, _, err := a.Allocate(Request{Goal: s - 1, Min: 1, Max: 1}); err != nil || s3 != s-1 {
			t.Fatalf("ino %d: block before the aligned run: %d, %v", ino, s3, err)
		}
	}
	// A free extent holding exactly the run, misaligned: used as is.
	big, n, err := a.Allocate(Request{Min: 600, Max: 600})
	if err != nil || n != 600 {
		t.Fatal(n, err)
	}
	hole := big + (256+3-big%256)%256
	if err := a.Free(hole, 40); err != nil {
		t.Fatal(err)
	}
	s, n, err := a.Allocate(Request{Goal: hole - 2, Min: 40, Max: 40, Align: 256})
	if err != nil || s != hole || n != 40 {
		t.Fatalf("exact-fit extent at %d: got %d+%d, %v", hole, s, n, err)
	}
}
