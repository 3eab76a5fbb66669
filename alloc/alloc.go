// Package alloc allocates blocks and inodes on ext4's own structures: the
// per-group block and inode bitmaps, the group descriptors' free counts
// and flags, and their checksums.
//
// On disk (per block group g; flex_bg may place the bitmaps and tables of
// several groups in the first group of their flex group):
//
//	group descriptor (ext4_group_desc, in the descriptor table)
//	  0x00 bg_block_bitmap  0x04 bg_inode_bitmap  0x08 bg_inode_table
//	  0x0C bg_free_blocks_count  0x0E bg_free_inodes_count  0x10 bg_used_dirs_count
//	  0x12 bg_flags (INODE_UNINIT 1, BLOCK_UNINIT 2, ITABLE_ZEROED 4)
//	  0x18 bg_block_bitmap_csum  0x1A bg_inode_bitmap_csum  0x1C bg_itable_unused
//	  0x1E bg_checksum       (64bit descriptors add the _hi halves at 0x20..0x3B)
//	block bitmap: bit i = block first(g)+i in use; bits past the group's end are 1
//	inode bitmap: bit i = inode g*inodes_per_group+i+1 in use
//
// In memory each group, once touched, has its block bitmap and two
// google/btree indexes of its free extents (by start, and by length then
// start), so a search is O(log n), never a bitmap scan. Groups are loaded
// lazily; a BLOCK_UNINIT group's bitmap is computed as
// ext4_init_block_bitmap does (superblock backup, descriptor and reserved
// GDT blocks, and every bitmap and inode table lying in the group).
//
// Invariants (checked by the tests against e2fsck and a model):
//   - A1 a loaded group's free trees hold exactly the zero bits of its
//     bitmap minus the blocks of preallocation windows in the group and
//     of the runs Trim is discarding (trim.go).
//   - A2 desc.FreeBlocksCount == zero bits of the bitmap; FreeBlocks() is
//     the sum over groups; the same for inodes.
//   - A3 avail == FreeBlocks() minus delalloc reservations, in-flight
//     takes and busy blocks (FreeDeferred, not yet released);
//     an allocation only proceeds after taking its size from avail (or
//     from its reservation), so concurrent callers never overcommit.
//   - A4 metadata (superblocks, descriptor and reserved GDT blocks,
//     bitmaps, inode tables) is never allocated and never freed.
//   - A5 every bitmap or descriptor change is written through MetaIO
//     before the call returns, with its checksum updated.
//
// Preallocation windows are in memory only: their blocks stay free on
// disk (bitmap 0) and are merely hidden from other allocations, so a
// crash or an unreleased window leaves nothing for e2fsck to fix. When an
// allocation finds no space, all idle windows are dropped and it searches
// again (also when another allocation dropped them first). New windows
// are taken only while the blocks all windows hide stay under half of
// avail, so that near a full volume concurrent allocations do not hide
// the space from each other (TestWindowsHideNoSpace).
//
// Lock order: window.mu -> group.mu (several groups: ascending index) ->
// descMu[block] -> MetaIO; trims.mu is a leaf. The counters are atomics;
// no lock is global.
package alloc

import (
	"fmt"
	"math/bits"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/google/btree"

	"github.com/ext4io/ext4io/internal/errs"
	"github.com/ext4io/ext4io/layout"
)

// Sentinel errors re-exported for errors.Is.
var (
	ErrCorrupt     = errs.ErrCorrupt
	ErrNoSpace     = errs.ErrNoSpace
	ErrInvalid     = errs.ErrInvalid
	ErrUnsupported = errs.ErrUnsupported
	ErrIO          = errs.ErrIO
)

// Flags modify an allocation request.
type Flags uint32

const (
	// Privileged requests may use the root-reserved blocks
	// (s_r_blocks_count), as a process with CAP_SYS_RESOURCE may.
	Privileged Flags = 1 << iota
	// MustSucceed requests (extent splits at I/O completion) may use the
	// reserved pool and the root-reserved blocks.
	MustSucceed
	// Delalloc requests take their blocks from earlier Reserve calls
	// instead of from free space; this is how reservations are claimed.
	Delalloc
)

// Request describes one allocation: one contiguous run of Min..Max blocks,
// as near Goal as possible. Ino != 0 allocates through the inode's
// preallocation window.
//
// Align, a power of two, asks that a run not placed at Goal itself start
// at a block congruent to Goal modulo Align, when its free extent has room
// for the whole run from there (else it starts where it would have). A
// file's allocations then keep one offset between logical and physical
// blocks modulo Align, and a caller that writes in aligned runs writes
// the device in aligned runs, as mballoc places large requests on buddy
// boundaries. The blocks skipped stay free. 0 and 1 ask for nothing.
type Request struct {
	Goal, Min, Max uint64
	Align          uint64
	Ino            uint32
	Flags          Flags
}

// Options configures an Allocator.
type Options struct {
	// ReservedPool is the number of blocks only MustSucceed requests may
	// take. 0 means ext4's default, min(2% of the blocks, 4096);
	// NoReservedPool turns the pool off.
	ReservedPool   uint64
	NoReservedPool bool
	// WindowBlocks is the size of a per-inode preallocation window; 0
	// means 2 MiB worth of blocks.
	WindowBlocks uint64
}

// ext is a free extent, group-relative.
type ext struct{ start, n uint32 }

func (e ext) end() uint32 { return e.start + e.n }

func lessStart(a, b ext) bool { return a.start < b.start }
func lessLen(a, b ext) bool   { return a.n < b.n || a.n == b.n && a.start < b.start }

// group is one block group's allocation state.
type group struct {
	mu struct {
		sync.Mutex
		desc    *layout.GroupDesc
		bitmap  []byte // block bitmap, nil until loaded
		byStart *btree.BTreeG[ext]
		byLen   *btree.BTreeG[ext]
		ibitmap []byte // inode bitmap, nil until loaded
		// freeGen counts blocks coming back to the trees other than
		// from Trim; trimmedMin is the minimum length of the last Trim
		// of the whole group, 0 if blocks came back since (trim.go).
		freeGen    uint64
		trimmedMin uint32
		// copies holds the updateBlock callbacks that copy the bitmaps
		// and the descriptor into their metadata blocks, made on the
		// group's first update (copiesLocked) so that an update
		// allocates no closure; nil until then.
		copies *groupCopies
	}
	// Hints read without the lock; written under it.
	freeBlocks atomic.Int64 // == mu.desc.FreeBlocksCount
	freeInodes atomic.Int64 // == mu.desc.FreeInodesCount
	dirs       atomic.Int64 // == mu.desc.UsedDirsCount
	maxExt     atomic.Int64 // longest free extent in the trees, -1 before load
}

// groupCopies are a group's updateBlock callbacks. They read the group's
// mu fields and run with mu held; desc also with the descriptor block's
// descMu.
type groupCopies struct {
	bitmap, ibitmap, desc func(b []byte)
}

// copiesLocked returns group gi's callbacks, making them on first use.
func (a *Allocator) copiesLocked(gi uint64) *groupCopies {
	g := a.g[gi]
	if c := g.mu.copies; c != nil {
		return c
	}
	_, off := a.sb.DescriptorLocation(gi)
	c := &groupCopies{
		bitmap:  func(b []byte) { copy(b, g.mu.bitmap) },
		ibitmap: func(b []byte) { copy(b, g.mu.ibitmap) },
		desc:    func(b []byte) { copy(b[off:], g.mu.desc.Raw) },
	}
	g.mu.copies = c
	return c
}

// run is an absolute block range.
type run struct{ start, n uint64 }

// window is one inode's preallocation window.
type window struct {
	mu    sync.Mutex
	start uint64 // guarded by mu
	n     uint64 // guarded by mu; 0 = empty
}

// Allocator allocates blocks and inodes. It is safe for concurrent use.
type Allocator struct {
	sb        *layout.Superblock // geometry only; never modified
	io        MetaIO
	bs        uint64
	bpg       uint64
	groups    uint64
	ipg       uint32
	itb       uint64
	firstData uint64
	csum      bool // group checksums: *_UNINIT flags honoured
	mcsum     bool // metadata_csum
	seed      uint32
	rootResv  uint64
	pool      uint64
	winBlocks uint64
	perDesc   uint64

	g      []*group
	meta   [][]run      // per group: fixed metadata runs inside it, sorted (immutable)
	descMu []sync.Mutex // per descriptor block

	avail      atomic.Int64 // see A3
	free       atomic.Int64
	freeInodes atomic.Int64
	dirs       atomic.Int64
	reserved   atomic.Int64 // delalloc reservations
	dirRotor   atomic.Uint64
	// hidden is the free blocks held in windows (the sum of their n),
	// counted in avail but out of the trees' sight. A new window is taken
	// only while hidden stays under half of avail, so that near a full
	// volume the searches keep seeing most of the free space.
	hidden atomic.Int64

	pa struct {
		sync.Mutex
		m map[uint32]*window
	}

	trims trimWait // runs out of the trees while Trim discards them
}

// New returns an Allocator for the filesystem described by sb, reading
// the group descriptors through io (and verifying their checksums). sb is
// used for geometry only; FillSuperblock writes the counters back.
func New(sb *layout.Superblock, io MetaIO, opts Options) (*Allocator, error) {
	if sb.HasRoCompat(layout.RoCompatBigalloc) {
		return nil, fmt.Errorf("alloc: bigalloc: %w", ErrUnsupported)
	}
	a := &Allocator{sb: sb, io: io, bs: uint64(sb.BlockSize()), bpg: uint64(sb.BlocksPerGroup),
		groups: sb.GroupCount(), ipg: sb.InodesPerGroup, firstData: uint64(sb.FirstDataBlock),
		csum: sb.HasGroupChecksums(), mcsum: sb.MetadataCsum(), seed: sb.CsumSeed(),
		rootResv: sb.RBlocksCount}
	a.itb = (uint64(a.ipg)*uint64(sb.InodeSizeBytes()) + a.bs - 1) / a.bs
	a.perDesc = a.bs / uint64(sb.DescriptorSize())
	a.pa.m = map[uint32]*window{}
	a.winBlocks = opts.WindowBlocks
	if a.winBlocks == 0 {
		a.winBlocks = max(8, (2<<20)/a.bs)
	}
	switch {
	case opts.NoReservedPool:
	case opts.ReservedPool != 0:
		a.pool = opts.ReservedPool
	default:
		a.pool = min(sb.BlocksCount/50, 4096)
	}
	a.g = make([]*group, a.groups)
	a.descMu = make([]sync.Mutex, (a.groups+a.perDesc-1)/a.perDesc)
	var cache struct {
		blk uint64
		b   []byte
	}
	var free, freeIno, dirs int64
	for gi := uint64(0); gi < a.groups; gi++ {
		blk, off := sb.DescriptorLocation(gi)
		if cache.b == nil || cache.blk != blk {
			b, err := io.Read(blk)
			if err != nil {
				return nil, fmt.Errorf("alloc: descriptor block of group %d: %w", gi, err)
			}
			cache.blk, cache.b = blk, b
		}
		d, err := layout.DecodeGroupDesc(cache.b[off:], sb.DescriptorSize())
		if err != nil {
			return nil, err
		}
		if err := d.Verify(sb, uint32(gi), blk); err != nil {
			return nil, err
		}
		if uint64(d.FreeBlocksCount) > uint64(sb.GroupBlocks(gi)) || d.FreeInodesCount > a.ipg {
			return nil, errs.Corruptf("group descriptor", blk, off, "group %d: free counts %d/%d exceed the group", gi, d.FreeBlocksCount, d.FreeInodesCount)
		}
		g := &group{}
		g.mu.desc = d
		g.freeBlocks.Store(int64(d.FreeBlocksCount))
		g.freeInodes.Store(int64(d.FreeInodesCount))
		g.dirs.Store(int64(d.UsedDirsCount))
		g.maxExt.Store(-1)
		a.g[gi] = g
		free += int64(d.FreeBlocksCount)
		freeIno += int64(d.FreeInodesCount)
		dirs += int64(d.UsedDirsCount)
	}
	a.free.Store(free)
	a.avail.Store(free)
	a.freeInodes.Store(freeIno)
	a.dirs.Store(dirs)
	a.buildMeta()
	return a, nil
}

// buildMeta records, per group, the fixed metadata lying in it.
func (a *Allocator) buildMeta() {
	a.meta = make([][]run, a.groups)
	add := func(start, n uint64) {
		for n > 0 && start < a.sb.BlocksCount {
			gi := a.groupOf(start)
			end := a.groupEnd(gi)
			k := min(n, end-start)
			a.meta[gi] = append(a.meta[gi], run{start, k})
			start, n = start+k, n-k
		}
	}
	for gi := uint64(0); gi < a.groups; gi++ {
		if n := layout.GroupBaseBlocks(a.sb, gi); n > 0 {
			add(a.sb.GroupFirstBlock(gi), n)
		}
		d := a.g[gi].mu.desc
		add(d.BlockBitmap, 1)
		add(d.InodeBitmap, 1)
		add(d.InodeTable, a.itb)
	}
	for gi, rs := range a.meta {
		sort.Slice(rs, func(i, j int) bool { return rs[i].start < rs[j].start })
		out := rs[:0]
		for _, r := range rs {
			if l := len(out); l > 0 && out[l-1].start+out[l-1].n >= r.start {
				out[l-1].n = max(out[l-1].n, r.start+r.n-out[l-1].start)
				continue
			}
			out = append(out, r)
		}
		a.meta[gi] = out
	}
}

func (a *Allocator) groupOf(b uint64) uint64 { return (b - a.firstData) / a.bpg }

func (a *Allocator) groupEnd(gi uint64) uint64 {
	return a.sb.GroupFirstBlock(gi) + uint64(a.sb.GroupBlocks(gi))
}

// FreeBlocks returns the number of free blocks on disk (the superblock's
// s_free_blocks_count), including reserved and windowed blocks.
func (a *Allocator) FreeBlocks() uint64 { return uint64(max(a.free.Load(), 0)) }

// FreeInodes returns the number of free inodes.
func (a *Allocator) FreeInodes() uint64 { return uint64(max(a.freeInodes.Load(), 0)) }

// Reserved returns the blocks held by delalloc reservations.
func (a *Allocator) Reserved() uint64 { return uint64(max(a.reserved.Load(), 0)) }

// Available returns the blocks a request with flags could still get: free
// space minus reservations, the reserved pool and (unless privileged) the
// root-reserved blocks. It is what statfs should report.
func (a *Allocator) Available(flags Flags) uint64 {
	v := a.avail.Load() - int64(a.floor(flags))
	return uint64(max(v, 0))
}

// FillSuperblock stores the free block and inode counts into sb (the
// caller writes the superblock). Descriptors are written as they change.
func (a *Allocator) FillSuperblock(sb *layout.Superblock) {
	sb.FreeBlocksCount = a.FreeBlocks()
	sb.FreeInodesCount = uint32(a.FreeInodes())
}

// GroupDesc returns a copy of group gi's descriptor.
func (a *Allocator) GroupDesc(gi uint64) (layout.GroupDesc, error) {
	if gi >= a.groups {
		return layout.GroupDesc{}, fmt.Errorf("alloc: group %d of %d: %w", gi, a.groups, ErrInvalid)
	}
	g := a.g[gi]
	g.mu.Lock()
	defer g.mu.Unlock()
	d := *g.mu.desc
	d.Raw = append([]byte(nil), d.Raw...)
	return d, nil
}

func (a *Allocator) floor(flags Flags) uint64 {
	var f uint64
	if flags&MustSucceed == 0 {
		f += a.pool
		if flags&Privileged == 0 {
			f += a.rootResv
		}
	}
	return f
}

// take removes between lo and hi blocks from avail, respecting the floor
// for flags; it returns how many it took.
func (a *Allocator) take(lo, hi uint64, flags Flags) (uint64, bool) {
	floor := int64(a.floor(flags))
	for {
		v := a.avail.Load()
		space := v - floor
		if space < int64(lo) {
			return 0, false
		}
		k := min(hi, uint64(space))
		if a.avail.CompareAndSwap(v, v-int64(k)) {
			return k, true
		}
	}
}

// Reserve sets aside n blocks for later delalloc allocations. Free space
// reported by Available shrinks by n. It fails with ErrNoSpace (changing
// nothing) when ordinary requests could not get n blocks.
func (a *Allocator) Reserve(n uint64) error {
	if _, ok := a.take(n, n, 0); !ok {
		return fmt.Errorf("alloc: reserve %d blocks: %w", n, ErrNoSpace)
	}
	a.reserved.Add(int64(n))
	return nil
}

// Unreserve returns n reserved blocks that will not be allocated.
func (a *Allocator) Unreserve(n uint64) error {
	for {
		r := a.reserved.Load()
		if uint64(r) < n {
			return fmt.Errorf("alloc: unreserve %d of %d reserved blocks: %w", n, r, ErrInvalid)
		}
		if a.reserved.CompareAndSwap(r, r-int64(n)) {
			a.avail.Add(int64(n))
			return nil
		}
	}
}

// Alloc allocates one contiguous run of min..max blocks near goal.
func (a *Allocator) Alloc(goal, min, max uint64) (start, n uint64, err error) {
	return a.Allocate(Request{Goal: goal, Min: min, Max: max})
}

// AllocFor allocates through inode ino's preallocation window, so that
// files appended in parallel stay contiguous.
func (a *Allocator) AllocFor(ino uint32, goal, min, max uint64) (start, n uint64, err error) {
	return a.Allocate(Request{Goal: goal, Min: min, Max: max, Ino: ino})
}

// AllocReserved allocates for a must-succeed metadata operation, which may
// use the reserved pool.
func (a *Allocator) AllocReserved(goal, min, max uint64) (start, n uint64, err error) {
	return a.Allocate(Request{Goal: goal, Min: min, Max: max, Flags: MustSucceed})
}

// Allocate performs r. On error nothing changed (ErrNoSpace when the
// request cannot be met; an I/O error from MetaIO may leave a block
// written, see the package doc).
func (a *Allocator) Allocate(r Request) (start, n uint64, err error) {
	if r.Min == 0 || r.Max < r.Min {
		return 0, 0, fmt.Errorf("alloc: request of %d..%d blocks: %w", r.Min, r.Max, ErrInvalid)
	}
	if r.Align&(r.Align-1) != 0 {
		return 0, 0, fmt.Errorf("alloc: alignment %d is not a power of two: %w", r.Align, ErrInvalid)
	}
	if r.Min > a.bpg {
		return 0, 0, fmt.Errorf("alloc: %d contiguous blocks exceed a group: %w", r.Min, ErrNoSpace)
	}
	r.Max = min(r.Max, a.bpg)
	var k uint64
	if r.Flags&Delalloc != 0 {
		k, err = a.takeReservation(r.Min, r.Max)
		if err != nil {
			return 0, 0, err
		}
	} else {
		var ok bool
		if k, ok = a.take(r.Min, r.Max, r.Flags); !ok {
			return 0, 0, fmt.Errorf("alloc: %d blocks (%d available): %w", r.Min, a.Available(r.Flags), ErrNoSpace)
		}
	}
	giveBack := func(unused uint64) {
		if r.Flags&Delalloc != 0 {
			a.reserved.Add(int64(unused))
		} else {
			a.avail.Add(int64(unused))
		}
	}
	if r.Ino != 0 {
		start, n, err = a.allocWindow(r, k)
	} else {
		start, n, err = a.search(r.Goal, r.Min, k, k, r.Align)
		if errorsIsNoSpace(err) {
			// Search again even if no window came back here: another
			// allocation may have given them back since the search.
			a.dropWindows()
			start, n, err = a.search(r.Goal, r.Min, k, k, r.Align)
		}
	}
	if err != nil {
		giveBack(k)
		return 0, 0, err
	}
	giveBack(k - n)
	return start, n, nil
}

func (a *Allocator) takeReservation(lo, hi uint64) (uint64, error) {
	for {
		r := a.reserved.Load()
		if uint64(r) < lo {
			return 0, fmt.Errorf("alloc: delalloc request of %d blocks exceeds the %d reserved: %w", lo, r, ErrInvalid)
		}
		k := min(hi, uint64(r))
		if a.reserved.CompareAndSwap(r, r-int64(k)) {
			return k, nil
		}
	}
}

// allocWindow serves r (k blocks already taken from avail) from the
// inode's window, refilling it when it is too small.
func (a *Allocator) allocWindow(r Request, k uint64) (uint64, uint64, error) {
	a.pa.Lock()
	w := a.pa.m[r.Ino]
	if w == nil {
		w = &window{}
		a.pa.m[r.Ino] = w
	}
	a.pa.Unlock()
	w.mu.Lock()
	if w.n >= r.Min {
		t := min(k, w.n)
		if err := a.markWindow(w.start, t); err != nil {
			w.mu.Unlock()
			return 0, 0, err
		}
		s := w.start
		w.start, w.n = w.start+t, w.n-t
		a.hidden.Add(-int64(t))
		w.mu.Unlock()
		return s, t, nil
	}
	a.releaseWindowLocked(w)
	goal := r.Goal
	hi := k
	if a.hidden.Load()+int64(a.winBlocks) <= a.avail.Load()/2 {
		hi = max(k, min(k+a.winBlocks, a.bpg))
	}
	s, n, err := a.search(goal, r.Min, hi, k, r.Align)
	if errorsIsNoSpace(err) {
		// Give the idle windows back and search again, also when none
		// came back here: another allocation may have given them back
		// since the search failed.
		w.mu.Unlock()
		a.dropWindows()
		w.mu.Lock()
		a.releaseWindowLocked(w)
		s, n, err = a.search(goal, r.Min, k, k, r.Align)
	}
	if err != nil {
		w.mu.Unlock()
		return 0, 0, err
	}
	got := min(n, k)
	if n > got {
		w.start, w.n = s+got, n-got
		a.hidden.Add(int64(n - got))
	}
	w.mu.Unlock()
	return s, got, nil
}

// ReleasePrealloc gives inode ino's unused window back to free space (call
// it when the file is closed or truncated).
func (a *Allocator) ReleasePrealloc(ino uint32) {
	a.pa.Lock()
	w := a.pa.m[ino]
	delete(a.pa.m, ino)
	a.pa.Unlock()
	if w != nil {
		w.mu.Lock()
		a.releaseWindowLocked(w)
		w.mu.Unlock()
	}
}

func (a *Allocator) releaseWindowLocked(w *window) {
	if w.n == 0 {
		return
	}
	gi := a.groupOf(w.start)
	g := a.g[gi]
	g.mu.Lock()
	a.insertFreeLocked(gi, uint32(w.start-a.sb.GroupFirstBlock(gi)), uint32(w.n))
	g.mu.Unlock()
	a.hidden.Add(-int64(w.n))
	w.n = 0
}

// dropWindows releases every idle window.
func (a *Allocator) dropWindows() {
	a.pa.Lock()
	ws := make([]*window, 0, len(a.pa.m))
	for _, w := range a.pa.m {
		ws = append(ws, w)
	}
	a.pa.Unlock()
	for _, w := range ws {
		if w.mu.TryLock() {
			a.releaseWindowLocked(w)
			w.mu.Unlock()
		}
	}
}

// markWindow marks n blocks from start (hidden in a window, so absent from
// the trees) as used.
func (a *Allocator) markWindow(start, n uint64) error {
	gi := a.groupOf(start)
	g := a.g[gi]
	g.mu.Lock()
	defer g.mu.Unlock()
	return a.setUsedLocked(gi, uint32(start-a.sb.GroupFirstBlock(gi)), uint32(n))
}

func errorsIsNoSpace(err error) bool { return err != nil && isNoSpace(err) }

// search finds a run of lo..hi blocks near goal, group by group outward
// from goal's group, placed as Request.Align says; it marks the first
// min(n, keep) blocks used and hides the rest (for a window) from the
// trees.
func (a *Allocator) search(goal, lo, hi, keep, align uint64) (uint64, uint64, error) {
	for {
		s, n, err := a.searchOnce(goal, lo, hi, keep, align)
		if errorsIsNoSpace(err) && a.trims.wait() {
			// Trim held free runs out of the trees while it discarded
			// them: they are back, search again.
			continue
		}
		return s, n, err
	}
}

func (a *Allocator) searchOnce(goal, lo, hi, keep, align uint64) (uint64, uint64, error) {
	if goal < a.firstData || goal >= a.sb.BlocksCount {
		goal = a.firstData
	}
	g0 := a.groupOf(goal)
	for d := uint64(0); d < a.groups; d++ {
		for side := 0; side < 2; side++ {
			var gi uint64
			if side == 0 {
				gi = g0 + d
				if gi >= a.groups {
					continue
				}
			} else {
				if d == 0 || d > g0 {
					continue
				}
				gi = g0 - d
			}
			s, n, err := a.searchGroup(gi, goal, lo, hi, keep, align)
			if err != nil || n > 0 {
				return s, n, err
			}
		}
		if g0+d >= a.groups && d >= g0 {
			break
		}
	}
	return 0, 0, fmt.Errorf("alloc: no run of %d free blocks: %w", lo, ErrNoSpace)
}

func (a *Allocator) searchGroup(gi, goal, lo, hi, keep, align uint64) (uint64, uint64, error) {
	g := a.g[gi]
	if g.freeBlocks.Load() < int64(lo) {
		return 0, 0, nil
	}
	if m := g.maxExt.Load(); m >= 0 && m < int64(lo) {
		return 0, 0, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := a.loadLocked(gi); err != nil {
		return 0, 0, err
	}
	base := a.sb.GroupFirstBlock(gi)
	var rel uint64 = 0
	if goal >= base && goal < a.groupEnd(gi) {
		rel = goal - base
	}
	e, s, n, ok := a.findLocked(g, uint32(rel), uint32(lo), uint32(hi))
	if !ok {
		return 0, 0, nil
	}
	if align > 1 {
		// Skip to the next block congruent to goal (none at goal itself),
		// if the run still fits.
		if s2 := uint64(s) + (goal-base-uint64(s))&(align-1); s2+uint64(n) <= uint64(e.end()) {
			s = uint32(s2)
		}
	}
	a.removeFreeLocked(g, e, s, n)
	used := min(uint64(n), keep)
	if err := a.setUsedLocked(gi, s, uint32(used)); err != nil {
		a.insertFreeLocked(gi, s, n)
		return 0, 0, err
	}
	return base + uint64(s), uint64(n), nil
}

// findLocked picks a free run of lo..hi blocks in g: at the goal, else the
// first extent after the goal long enough for hi, else the best fit for
// hi, else the longest extent if it holds lo. It returns the extent and
// the chosen sub-run.
func (a *Allocator) findLocked(g *group, goal, lo, hi uint32) (ext, uint32, uint32, bool) {
	var found ext
	ok := false
	g.mu.byStart.DescendLessOrEqual(ext{start: goal}, func(e ext) bool {
		if e.end() > goal && e.end()-goal >= lo {
			found, ok = e, true
		}
		return false
	})
	if ok {
		return found, goal, min(hi, found.end()-goal), true
	}
	looked := 0
	g.mu.byStart.AscendGreaterOrEqual(ext{start: goal}, func(e ext) bool {
		looked++
		if e.n >= hi {
			found, ok = e, true
			return false
		}
		return looked < 8
	})
	if ok {
		return found, found.start, hi, true
	}
	g.mu.byLen.AscendGreaterOrEqual(ext{n: hi}, func(e ext) bool {
		found, ok = e, true
		return false
	})
	if ok {
		return found, found.start, hi, true
	}
	if m, has := g.mu.byLen.Max(); has && m.n >= lo {
		return m, m.start, min(hi, m.n), true
	}
	return ext{}, 0, 0, false
}

// removeFreeLocked removes [s, s+n) (inside free extent e) from the trees.
func (a *Allocator) removeFreeLocked(g *group, e ext, s, n uint32) {
	g.mu.byStart.Delete(e)
	g.mu.byLen.Delete(e)
	if s > e.start {
		a.putExtLocked(g, ext{e.start, s - e.start})
	}
	if s+n < e.end() {
		a.putExtLocked(g, ext{s + n, e.end() - s - n})
	}
	a.updateMaxLocked(g)
}

func (a *Allocator) putExtLocked(g *group, e ext) {
	g.mu.byStart.ReplaceOrInsert(e)
	g.mu.byLen.ReplaceOrInsert(e)
}

func (a *Allocator) updateMaxLocked(g *group) {
	if m, ok := g.mu.byLen.Max(); ok {
		g.maxExt.Store(int64(m.n))
	} else {
		g.maxExt.Store(0)
	}
}

// insertFreeLocked adds [s, s+n) to group gi's trees, merging neighbours,
// and marks the group as not trimmed.
func (a *Allocator) insertFreeLocked(gi uint64, s, n uint32) {
	g := a.g[gi]
	if g.mu.bitmap == nil || n == 0 {
		return
	}
	g.mu.freeGen++
	g.mu.trimmedMin = 0
	a.putFreeLocked(gi, s, n)
}

// putFreeLocked adds [s, s+n) to group gi's trees, merging neighbours.
func (a *Allocator) putFreeLocked(gi uint64, s, n uint32) {
	g := a.g[gi]
	e := ext{s, n}
	var prev, next ext
	hasPrev, hasNext := false, false
	g.mu.byStart.DescendLessOrEqual(ext{start: s}, func(p ext) bool {
		prev, hasPrev = p, p.end() == s
		return false
	})
	g.mu.byStart.AscendGreaterOrEqual(ext{start: s + n}, func(x ext) bool {
		next, hasNext = x, x.start == s+n
		return false
	})
	if hasPrev {
		g.mu.byStart.Delete(prev)
		g.mu.byLen.Delete(prev)
		e = ext{prev.start, prev.n + e.n}
	}
	if hasNext {
		g.mu.byStart.Delete(next)
		g.mu.byLen.Delete(next)
		e.n += next.n
	}
	a.putExtLocked(g, e)
	a.updateMaxLocked(g)
}

// loadLocked reads (or, for BLOCK_UNINIT, computes) group gi's block
// bitmap, verifies it and builds the free trees.
func (a *Allocator) loadLocked(gi uint64) error {
	g := a.g[gi]
	if g.mu.bitmap != nil {
		return nil
	}
	d := g.mu.desc
	nb := uint64(a.sb.GroupBlocks(gi))
	base := a.sb.GroupFirstBlock(gi)
	var bm []byte
	if a.csum && d.Flags&layout.BgBlockUninit != 0 {
		if gi == a.groups-1 {
			// mkfs.ext4 and the kernel's resize initialise the last
			// group's bitmap (e2fsck: "Last group block bitmap
			// uninitialized"): computed, it would show every block
			// of the group but the fixed metadata free.
			return errs.Corruptf("group descriptor", d.BlockBitmap, -1, "group %d: the last group is marked BLOCK_UNINIT", gi)
		}
		bm = make([]byte, a.bs)
		for _, r := range a.meta[gi] {
			setBits(bm, r.start-base, r.n)
		}
		setBits(bm, nb, a.bs*8-nb)
	} else {
		raw, err := a.io.Read(d.BlockBitmap)
		if err != nil {
			return fmt.Errorf("alloc: block bitmap of group %d: %w", gi, err)
		}
		bm = append([]byte(nil), raw...)
		if a.mcsum {
			if c := layout.BlockBitmapChecksum(a.sb, bm); !layout.BitmapCsumMatches(a.sb, d.BlockBitmapCsum, c, false) {
				return errs.Corruptf("block bitmap", d.BlockBitmap, -1, "group %d: checksum %#x != computed %#x", gi, d.BlockBitmapCsum, c)
			}
		}
		for _, r := range a.meta[gi] {
			if !allSet(bm, r.start-base, r.n) {
				return errs.Corruptf("block bitmap", d.BlockBitmap, -1, "group %d: metadata blocks %d+%d marked free", gi, r.start, r.n)
			}
		}
	}
	byStart := btree.NewG(32, lessStart)
	byLen := btree.NewG(32, lessLen)
	free := uint64(0)
	for i := uint64(0); i < nb; {
		s, ok := nextZero(bm, i, nb)
		if !ok {
			break
		}
		e := nextOne(bm, s, nb)
		byStart.ReplaceOrInsert(ext{uint32(s), uint32(e - s)})
		byLen.ReplaceOrInsert(ext{uint32(s), uint32(e - s)})
		free += e - s
		i = e
	}
	if free != uint64(d.FreeBlocksCount) {
		return errs.Corruptf("group descriptor", d.BlockBitmap, -1, "group %d: %d free blocks in the bitmap, descriptor says %d", gi, free, d.FreeBlocksCount)
	}
	g.mu.bitmap, g.mu.byStart, g.mu.byLen = bm, byStart, byLen
	a.updateMaxLocked(g)
	return nil
}

// setUsedLocked marks [s, s+n) of group gi used in the bitmap (the trees
// already exclude it) and writes bitmap and descriptor.
func (a *Allocator) setUsedLocked(gi uint64, s, n uint32) error {
	g := a.g[gi]
	if n == 0 {
		return nil
	}
	setBits(g.mu.bitmap, uint64(s), uint64(n))
	g.mu.desc.FreeBlocksCount -= n
	if err := a.writeBlockBitmapLocked(gi); err != nil {
		clearBits(g.mu.bitmap, uint64(s), uint64(n))
		g.mu.desc.FreeBlocksCount += n
		return err
	}
	g.freeBlocks.Add(-int64(n))
	a.free.Add(-int64(n))
	return nil
}

// writeBlockBitmapLocked writes the bitmap, then the descriptor with the
// new bitmap checksum and BLOCK_UNINIT cleared.
func (a *Allocator) writeBlockBitmapLocked(gi uint64) error {
	g := a.g[gi]
	d := g.mu.desc
	if err := updateBlock(a.io, d.BlockBitmap, a.copiesLocked(gi).bitmap); err != nil {
		return fmt.Errorf("alloc: block bitmap of group %d: %w", gi, err)
	}
	if a.mcsum {
		d.BlockBitmapCsum = layout.BlockBitmapChecksum(a.sb, g.mu.bitmap)
	}
	d.Flags &^= layout.BgBlockUninit
	return a.writeDescLocked(gi)
}

// writeDescLocked checksums group gi's descriptor and writes it into its
// descriptor block.
func (a *Allocator) writeDescLocked(gi uint64) error {
	d := a.g[gi].mu.desc
	d.SetChecksum(a.sb, uint32(gi))
	blk, _ := a.sb.DescriptorLocation(gi)
	copyDesc := a.copiesLocked(gi).desc
	m := &a.descMu[gi/a.perDesc]
	m.Lock()
	defer m.Unlock()
	if err := updateBlock(a.io, blk, copyDesc); err != nil {
		return fmt.Errorf("alloc: descriptor of group %d: %w", gi, err)
	}
	return nil
}

// Free returns [start, start+n) to free space. Freeing a block that is
// already free, or metadata, fails with ErrCorrupt and changes nothing.
func (a *Allocator) Free(start, n uint64) error {
	_, err := a.freeRun(start, n, false)
	return err
}

// FreeDeferred frees like Free — bitmap, descriptor and free counts change
// now, inside the caller's transaction — but keeps the blocks out of the
// allocation index and out of Available (so that no reservation counts on
// them) until release is called: a journaled caller releases
// them once the transaction that freed them has committed, so a crash can
// never leave committed metadata pointing at a block already reused (the
// busy extents of ext4's mballoc). release is safe to call from any
// goroutine, once.
func (a *Allocator) FreeDeferred(start, n uint64) (release func(), err error) {
	ps, err := a.freeRun(start, n, true)
	if err != nil {
		return nil, err
	}
	return func() {
		for _, p := range ps {
			g := a.g[p.gi]
			g.mu.Lock()
			a.insertFreeLocked(p.gi, p.s, p.n)
			g.mu.Unlock()
			a.avail.Add(int64(p.n))
		}
	}, nil
}

// freePiece is the part of a freed run inside one group.
type freePiece struct {
	gi   uint64
	s, n uint32
}

// CheckInUse returns nil when Free(start, n) would succeed: the blocks
// lie inside the file system, none is file system metadata and all are in
// use in the block bitmap. It changes nothing. Callers that free several
// runs where a failure half-way would stay on disk (no journal) check
// every run first.
func (a *Allocator) CheckInUse(start, n uint64) error {
	if n == 0 {
		return nil
	}
	if start < a.firstData || start >= a.sb.BlocksCount || a.sb.BlocksCount-start < n {
		return fmt.Errorf("alloc: free %d+%d outside the filesystem of %d blocks: %w", start, n, a.sb.BlocksCount, ErrInvalid)
	}
	first, last := a.groupOf(start), a.groupOf(start+n-1)
	for gi := first; gi <= last; gi++ {
		a.g[gi].mu.Lock()
	}
	defer func() {
		for gi := first; gi <= last; gi++ {
			a.g[gi].mu.Unlock()
		}
	}()
	_, err := a.freePiecesLocked(start, n)
	return err
}

// freePiecesLocked splits [start, start+n) by group for freeRun, failing
// with ErrCorrupt when a block is metadata or already free. The groups'
// locks are held.
func (a *Allocator) freePiecesLocked(start, n uint64) ([]freePiece, error) {
	var ps []freePiece
	for b, left := start, n; left > 0; {
		gi := a.groupOf(b)
		k := min(left, a.groupEnd(gi)-b)
		base := a.sb.GroupFirstBlock(gi)
		if err := a.loadLocked(gi); err != nil {
			return nil, err
		}
		for _, r := range a.meta[gi] {
			if r.start < b+k && b < r.start+r.n {
				return nil, errs.Corruptf("block bitmap", a.g[gi].mu.desc.BlockBitmap, -1, "freeing %d+%d: blocks %d+%d are filesystem metadata", start, n, r.start, r.n)
			}
		}
		if !allSet(a.g[gi].mu.bitmap, b-base, k) {
			return nil, errs.Corruptf("block bitmap", a.g[gi].mu.desc.BlockBitmap, -1, "freeing %d+%d: some blocks are already free", start, n)
		}
		ps = append(ps, freePiece{gi, uint32(b - base), uint32(k)})
		b, left = b+k, left-k
	}
	return ps, nil
}

func (a *Allocator) freeRun(start, n uint64, busy bool) ([]freePiece, error) {
	if n == 0 {
		return nil, nil
	}
	if start < a.firstData || start >= a.sb.BlocksCount || a.sb.BlocksCount-start < n {
		return nil, fmt.Errorf("alloc: free %d+%d outside the filesystem of %d blocks: %w", start, n, a.sb.BlocksCount, ErrInvalid)
	}
	first, last := a.groupOf(start), a.groupOf(start+n-1)
	for gi := first; gi <= last; gi++ {
		a.g[gi].mu.Lock()
	}
	defer func() {
		for gi := first; gi <= last; gi++ {
			a.g[gi].mu.Unlock()
		}
	}()
	ps, err := a.freePiecesLocked(start, n)
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		g := a.g[p.gi]
		clearBits(g.mu.bitmap, uint64(p.s), uint64(p.n))
		g.mu.desc.FreeBlocksCount += p.n
		if err := a.writeBlockBitmapLocked(p.gi); err != nil {
			setBits(g.mu.bitmap, uint64(p.s), uint64(p.n))
			g.mu.desc.FreeBlocksCount -= p.n
			return nil, err
		}
		g.freeBlocks.Add(int64(p.n))
		a.free.Add(int64(p.n))
		if !busy {
			a.insertFreeLocked(p.gi, p.s, p.n)
			a.avail.Add(int64(p.n))
		}
	}
	return ps, nil
}

// setBits sets n bits from bit i; clearBits clears them.
func setBits(b []byte, i, n uint64) {
	for ; n > 0 && i%8 != 0; i, n = i+1, n-1 {
		b[i/8] |= 1 << (i % 8)
	}
	for ; n >= 8; i, n = i+8, n-8 {
		b[i/8] = 0xFF
	}
	for ; n > 0; i, n = i+1, n-1 {
		b[i/8] |= 1 << (i % 8)
	}
}

func clearBits(b []byte, i, n uint64) {
	for ; n > 0 && i%8 != 0; i, n = i+1, n-1 {
		b[i/8] &^= 1 << (i % 8)
	}
	for ; n >= 8; i, n = i+8, n-8 {
		b[i/8] = 0
	}
	for ; n > 0; i, n = i+1, n-1 {
		b[i/8] &^= 1 << (i % 8)
	}
}

// allSet reports whether bits [i, i+n) are all set.
func allSet(b []byte, i, n uint64) bool {
	for ; n > 0 && i%8 != 0; i, n = i+1, n-1 {
		if b[i/8]&(1<<(i%8)) == 0 {
			return false
		}
	}
	for ; n >= 8; i, n = i+8, n-8 {
		if b[i/8] != 0xFF {
			return false
		}
	}
	for ; n > 0; i, n = i+1, n-1 {
		if b[i/8]&(1<<(i%8)) == 0 {
			return false
		}
	}
	return true
}

// nextZero returns the first clear bit in [i, end).
func nextZero(b []byte, i, end uint64) (uint64, bool) {
	for i < end {
		if i%64 == 0 && i+64 <= end {
			w := le64(b[i/8:])
			if w == ^uint64(0) {
				i += 64
				continue
			}
			return i + uint64(bits.TrailingZeros64(^w)), true
		}
		if b[i/8]&(1<<(i%8)) == 0 {
			return i, true
		}
		i++
	}
	return 0, false
}

// nextOne returns the first set bit in [i, end), or end.
func nextOne(b []byte, i, end uint64) uint64 {
	for i < end {
		if i%64 == 0 && i+64 <= end {
			w := le64(b[i/8:])
			if w == 0 {
				i += 64
				continue
			}
			return min(end, i+uint64(bits.TrailingZeros64(w)))
		}
		if b[i/8]&(1<<(i%8)) != 0 {
			return i
		}
		i++
	}
	return end
}

func le64(b []byte) uint64 {
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}
