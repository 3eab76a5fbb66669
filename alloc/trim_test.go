package alloc

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ext4io/ext4io/internal/mkfs"
	"github.com/ext4io/ext4io/layout"
)

// freeInBitmap reports whether every block of [start, start+n) is free in
// its group's bitmap and absent from the free trees (so not allocatable).
func (a *Allocator) freeAndHidden(start, n uint64) (free, hidden bool) {
	gi := a.groupOf(start)
	g := a.g[gi]
	g.mu.Lock()
	defer g.mu.Unlock()
	base := a.sb.GroupFirstBlock(gi)
	free, hidden = true, true
	for b := start; b < start+n; b++ {
		if g.mu.bitmap[(b-base)/8]&(1<<((b-base)%8)) != 0 {
			free = false
		}
	}
	g.mu.byStart.Ascend(func(e ext) bool {
		if uint64(e.start)+base < start+n && start < uint64(e.end())+base {
			hidden = false
		}
		return true
	})
	return free, hidden
}

// freeRuns returns the free extents of the loaded groups, absolute.
func (a *Allocator) freeRuns() []run {
	var rs []run
	for gi, g := range a.g {
		g.mu.Lock()
		if g.mu.byStart != nil {
			base := a.sb.GroupFirstBlock(uint64(gi))
			g.mu.byStart.Ascend(func(e ext) bool {
				rs = append(rs, run{base + uint64(e.start), uint64(e.n)})
				return true
			})
		}
		g.mu.Unlock()
	}
	return rs
}

// TestTrim: Trim discards exactly the free runs of at least minLen blocks
// inside its range (clipped to it), each free in the bitmap and hidden
// from allocations while it is discarded; a second Trim of the same groups
// discards nothing until blocks are freed there; a discard error stops it.
func TestTrim(t *testing.T) {
	m := newImage(t, 64<<20, mkfs.Options{BlockSize: 1024}, nil)
	a := m.a
	rng := rand.New(rand.NewPCG(3, 5))
	var runs []run
	for range 400 {
		s, n, err := a.Alloc(uint64(rng.IntN(int(m.sb.BlocksCount))), 1, uint64(1+rng.IntN(64)))
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, run{s, n})
	}
	for i, r := range runs {
		if i%3 != 0 {
			if err := a.Free(r.start, r.n); err != nil {
				t.Fatal(err)
			}
		}
	}
	lo, hi, minLen := uint64(5000), m.sb.BlocksCount-3000, uint64(4)
	for gi := range a.g { // load every group so freeRuns sees them all
		a.g[gi].mu.Lock()
		if err := a.loadLocked(uint64(gi)); err != nil {
			t.Fatal(err)
		}
		a.g[gi].mu.Unlock()
	}
	var want uint64
	wantRuns := map[run]bool{}
	for _, r := range a.freeRuns() {
		s, e := max(r.start, lo), min(r.start+r.n, hi)
		if e > s && e-s >= minLen {
			want += e - s
			wantRuns[run{s, e - s}] = true
		}
	}
	var got []run
	n, err := a.Trim(lo, hi, minLen, func(s, n uint64) error {
		if free, hidden := a.freeAndHidden(s, n); !free || !hidden {
			t.Errorf("discard %d+%d: free %v, hidden from allocations %v", s, n, free, hidden)
		}
		// An allocation aimed at the run must not get it.
		if bs, bn, err := a.Alloc(s, 1, n); err == nil {
			if bs < s+n && s < bs+bn {
				t.Errorf("allocated %d+%d while %d+%d was being discarded", bs, bn, s, n)
			}
			if err := a.Free(bs, bn); err != nil {
				t.Error(err)
			}
		}
		got = append(got, run{s, n})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != want {
		t.Errorf("Trim = %d blocks; want %d", n, want)
	}
	for _, r := range got {
		if !wantRuns[r] {
			t.Errorf("discarded %d+%d, not a free run of the range", r.start, r.n)
		}
	}
	// The free space is whole again.
	var total uint64
	for _, r := range a.freeRuns() {
		total += r.n
	}
	if total != a.FreeBlocks() {
		t.Errorf("trees hold %d free blocks after Trim; bitmap %d", total, a.FreeBlocks())
	}

	// Nothing came back to the groups: a second whole-range Trim skips
	// every group a first one trimmed as a whole.
	all := func() uint64 {
		n, err := a.Trim(0, m.sb.BlocksCount, minLen, func(uint64, uint64) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if all() == 0 {
		t.Fatal("first whole Trim discarded nothing")
	}
	if n := all(); n != 0 {
		t.Errorf("second whole Trim discarded %d blocks", n)
	}
	if n := func() uint64 { // a smaller minLen trims again
		n, _ := a.Trim(0, m.sb.BlocksCount, 1, func(uint64, uint64) error { return nil })
		return n
	}(); n == 0 {
		t.Error("Trim with a smaller minimum discarded nothing")
	}
	if err := a.Free(runs[0].start, runs[0].n); err != nil {
		t.Fatal(err)
	}
	if n := all(); n < runs[0].n {
		t.Errorf("after freeing %d blocks Trim discarded %d", runs[0].n, n)
	}

	boom := errors.New("boom")
	calls := 0
	a2 := newImage(t, 16<<20, mkfs.Options{}, nil).a
	n, err = a2.Trim(0, 1<<40, 1, func(uint64, uint64) error {
		calls++
		return boom
	})
	if !errors.Is(err, boom) || n != 0 || calls != 1 {
		t.Errorf("failing discard: Trim = %d, %v after %d calls", n, err, calls)
	}
	if _, err := a2.Trim(0, 1<<40, a2.bpg+1, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("minLen beyond a group: %v", err)
	}
}

// TestTrimNoSpace: while Trim discards the only free run, an allocation
// that needs it waits and then succeeds instead of failing for space.
func TestTrimNoSpace(t *testing.T) {
	m := newImage(t, 16<<20, mkfs.Options{}, nil)
	a := m.a
	for a.FreeBlocks() > 0 {
		if _, _, err := a.Allocate(Request{Min: 1, Max: 1 << 20, Flags: MustSucceed}); err != nil {
			t.Fatal(err)
		}
	}
	s, _, err := a.Allocate(Request{Min: 1, Max: 1, Flags: MustSucceed})
	if err == nil {
		t.Fatalf("allocated %d on a full volume", s)
	}
	// Free one run of 16 blocks, the only free space.
	var hole uint64
	for b := uint64(m.sb.BlocksCount) / 2; ; b++ {
		if err := a.Free(b, 16); err == nil {
			hole = b
			break
		}
	}
	inDiscard, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := a.Trim(0, m.sb.BlocksCount, 1, func(s, n uint64) error {
			if s != hole || n != 16 {
				t.Errorf("discard %d+%d; want %d+16", s, n, hole)
			}
			close(inDiscard)
			<-release
			return nil
		}); err != nil {
			t.Error(err)
		}
	}()
	<-inDiscard
	done := make(chan error, 1)
	go func() {
		s, n, err := a.Allocate(Request{Min: 16, Max: 16, Flags: MustSucceed})
		if err == nil && (s != hole || n != 16) {
			t.Errorf("allocated %d+%d; want %d+16", s, n, hole)
		}
		done <- err
	}()
	select {
	case <-time.After(50 * time.Millisecond):
	case err := <-done:
		t.Fatalf("allocation returned (%v) while its only run was being discarded", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("allocation after Trim: %v", err)
	}
	wg.Wait()
}

// TestLastGroupBlockUninit: a crafted descriptor marking the last group
// BLOCK_UNINIT (mkfs.ext4 and the kernel's resize never do; e2fsck calls
// it "Last group block bitmap uninitialized"), its free count agreeing
// with the bitmap that computes, is corrupt: taken as is, every block of
// the group but the fixed metadata reads as free, and a trim discards the
// files and directories in it.
func TestLastGroupBlockUninit(t *testing.T) {
	m := newImage(t, 8<<20, mkfs.Options{BlockSize: 1024}, nil)
	a := m.a
	if !a.csum {
		t.Skip("no group descriptor checksums: BLOCK_UNINIT means nothing")
	}
	gi := a.groups - 1
	g := a.g[gi]
	g.mu.Lock()
	nb := uint64(a.sb.GroupBlocks(gi))
	metaBlocks := uint64(0)
	for _, r := range a.meta[gi] {
		metaBlocks += r.n
	}
	g.mu.bitmap = nil
	g.mu.desc.Flags |= layout.BgBlockUninit
	g.mu.desc.FreeBlocksCount = uint32(nb - metaBlocks)
	g.mu.Unlock()
	var discarded uint64
	_, err := a.Trim(0, a.sb.BlocksCount, 1, func(start, n uint64) error { discarded += n; return nil })
	if !errors.Is(err, ErrCorrupt) {
		t.Errorf("trim of a last group marked BLOCK_UNINIT: %v, want ErrCorrupt", err)
	}
	if discarded != 0 {
		t.Errorf("%d blocks discarded (%v)", discarded, err)
	}
}
