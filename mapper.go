package ext4io

import (
	"sync/atomic"

	"github.com/ext4io/ext4io/esc"
	"github.com/ext4io/ext4io/extent"
	"github.com/ext4io/ext4io/layout"
)

// mapKind says what backs a run of logical blocks.
type mapKind uint8

const (
	mapHole mapKind = iota
	mapWritten
	mapUnwritten
	mapDelayed // delayed allocation: dirty pages, blocks reserved, nothing on disk
)

// blockMap is one run of a file's logical blocks.
type blockMap struct {
	lblk uint64
	n    uint64 // blocks in the run (holes: up to the next mapping)
	pblk uint64 // first physical block (written/unwritten)
	kind mapKind
}

// mapper maps a file's logical blocks: an extent tree, the ext2/ext3
// block map, or nothing (inline data, fast symlinks).
type mapper struct {
	tree *extent.Tree // extent-mapped files
	// es is the volume's extent-status cache, esT this inode's tree in
	// each of its stripes, once used (escTree; escset.go).
	es   *escSet
	esT  [escStripes]atomic.Pointer[esc.Tree]
	ind  *[60]byte // block-mapped files
	cfg  extent.Config
	conv *convQueue // the inode's queued conversions, which lookups answered from tree see
	// fcTrack records mapping changes for fast commits (fcwrite.go); nil
	// without them. Set in newMapper.
	fcTrack func(lblk, n uint64)

	// seq counts changes of the file's block mapping: the validity cookie
	// of iomap mappings. set and drop bump it with every change they
	// record in the extent-status cache.
	seq atomic.Uint64

	// front holds large written and unwritten extents found in the
	// extent-status cache, each with the seq it was read under, in front
	// of it: while seq is unchanged an entry is still the cache's entry,
	// and a lookup inside it costs an atomic load instead of the cache's
	// lock and tree walk (an unwritten one then consults convbits, as a
	// lookup in the cache does). Slot i caches an extent containing some
	// block b with frontSlot(b) == i.
	front [frontSlots]atomic.Pointer[frontEntry]

	// run holds the Delayed blocks of consecutive buffered appends not
	// yet inserted into the extent-status cache (delayrun.go; its locking
	// is described there).
	run delayRun
}

// frontEntry is one cached extent and the mapper's seq when it was read.
type frontEntry struct {
	seq uint64
	e   esc.Extent
}

const (
	frontSlots = 32
	frontShift = escRegionShift // one slot per cache region: the cache's entries stop at region ends
	frontMin   = 64             // smaller extents go uncached: misses would allocate
)

func frontSlot(lblk uint64) int { return int(lblk>>frontShift) & (frontSlots - 1) }

// set records a change of the mapping in the extent-status cache (e
// replaces whatever it overlaps) and makes earlier mappings stale.
func (m *mapper) set(e esc.Extent) error {
	if m.conv != nil {
		m.conv.bits.clear(uint64(e.Lblk), uint64(e.Len))
	}
	err := m.escInsert(e)
	m.seq.Add(1)
	if m.fcTrack != nil && e.Status != esc.Delayed {
		m.fcTrack(uint64(e.Lblk), uint64(e.Len))
	}
	return err
}

// drop forgets the cached mapping of [lblk, lblk+n) after a change and
// makes earlier mappings stale. It returns the Delayed blocks dropped.
func (m *mapper) drop(lblk, n uint32) (delayed uint64, err error) {
	if m.conv != nil {
		m.conv.bits.clear(uint64(lblk), uint64(n))
	}
	delayed, err = m.escRemove(lblk, n)
	m.seq.Add(1)
	if m.fcTrack != nil {
		m.fcTrack(uint64(lblk), uint64(n))
	}
	return delayed, err
}

func (v *Volume) extentConfig(ino uint32, in *layout.Inode) extent.Config {
	return extent.Config{
		BlockSize:      v.bs,
		Ino:            ino,
		Seed:           layout.InodeSeed(v.csumSeed, ino, in.Generation),
		Csum:           v.csum && !v.opts.SkipChecksums,
		FirstDataBlock: uint64(v.sb.FirstDataBlock),
		BlocksCount:    v.sb.BlocksCount,
		SystemZone:     func(p, n uint64) bool { return v.zone.overlaps(ino, p, n) },
		IO:             extent.NewDeviceIO(v.dev, v.bs),
	}
}

func (v *Volume) newMapper(n *inode) (*mapper, error) {
	ino, in := n.ino, n.in
	cfg := v.extentConfig(ino, in)
	if v.alloc != nil {
		cfg.IO = treeIO{v}
		cfg.Alloc = treeAlloc{v, n}
		cfg.Goal = v.inodeGoal(ino)
		cfg.ZeroOut = func(pblk, cnt uint64) error { return v.zeroBlocks(pblk, cnt, false) }
		cfg.ZeroOutMax = uint32(32 << 10 / v.bs) // ext4's extent_max_zeroout_kb
		bs := uint64(v.bs)
		// Zero-out may turn unwritten blocks into written ones only below
		// the on-disk size (e2fsck rejects written blocks past i_size).
		cfg.EOFBlock = func() uint64 { return n.diskBlocks(bs) } // called under n.mu
	}
	m := &mapper{cfg: cfg, conv: &n.conv}
	if v.fc != nil {
		dir := in.IsDir()
		m.fcTrack = func(lblk, cnt uint64) { v.fcTrackRange(ino, dir, lblk, cnt) }
	}
	if in.Flags&layout.InodeFlagExtents != 0 {
		root := in.Block
		t, err := extent.Open(&root, cfg)
		if err != nil {
			return nil, err
		}
		m.tree = t
		m.es = v.cache
		return m, nil
	}
	blk := in.Block
	m.ind = &blk
	return m, nil
}

// lookup maps logical block lblk.
func (m *mapper) lookup(lblk uint64) (blockMap, error) { return m.lookupN(lblk, 1<<32) }

// lookupN is lookup for a caller that needs at most want blocks mapped: a
// run of blocks that queued writes made written inside an unwritten cache
// entry is then measured only that far (the bitmap's scan is the longest
// part of a lookup in a file whose preallocated blocks have all been
// written). Otherwise the mapping is the same as lookup's.
func (m *mapper) lookupN(lblk, want uint64) (blockMap, error) { return m.lookupFront(lblk, want, true) }

// lookupGoal is lookupN(lblk, 1) for an allocation's goal: it leaves the
// front alone. The allocation that follows changes the mapping, so an
// entry stored now would be stale before a lookup could use it, and each
// allocating write would pay a heap allocation for it.
func (m *mapper) lookupGoal(lblk uint64) (blockMap, error) { return m.lookupFront(lblk, 1, false) }

// lookupFront is lookupN; with fill, a large extent found in the
// extent-status cache goes into the front.
func (m *mapper) lookupFront(lblk, want uint64, fill bool) (blockMap, error) {
	if lblk >= 1<<32 {
		return blockMap{lblk: lblk, n: 1 << 32, kind: mapHole}, nil
	}
	if m.tree != nil {
		if lblk >= esc.MaxBlocks {
			return blockMap{lblk: lblk, n: 1, kind: mapHole}, nil
		}
		// seq before the lookup: a change after it makes the entry stale
		// (set and drop bump seq after changing the cache).
		seq := m.seq.Load()
		slot := &m.front[frontSlot(lblk)]
		if fe := slot.Load(); fe != nil && fe.seq == seq && fe.e.Contains(uint32(lblk)) {
			return m.mapOf(fe.e, lblk, want), nil
		}
		e, err := m.escFill(uint32(lblk))
		if err != nil {
			return blockMap{}, err
		}
		if fill && (e.Status == esc.Written || e.Status == esc.Unwritten) && e.Len >= frontMin {
			slot.Store(&frontEntry{seq: seq, e: e})
		}
		return m.mapOf(e, lblk, want), nil
	}
	p, found, hole, err := extent.MapIndirectHole(m.ind, m.cfg, uint32(lblk))
	if err != nil {
		return blockMap{}, err
	}
	if !found {
		return blockMap{lblk: lblk, n: max(hole, 1), kind: mapHole}, nil
	}
	return blockMap{lblk: lblk, n: 1, pblk: p, kind: mapWritten}, nil
}

// mapOf maps lblk inside e, an entry of the extent-status cache, with the
// blocks queued writes made written inside an unwritten entry
// (convbits.go; marking them changes no entry and no seq), measured at
// most want blocks far.
func (m *mapper) mapOf(e esc.Extent, lblk, want uint64) blockMap {
	d := lblk - uint64(e.Lblk)
	bm := blockMap{lblk: lblk, n: uint64(e.Len) - d}
	switch e.Status {
	case esc.Written:
		bm.kind, bm.pblk = mapWritten, e.Pblk+d
	case esc.Unwritten:
		bm.kind, bm.pblk = mapUnwritten, e.Pblk+d
		if m.conv != nil {
			written, k := m.conv.bits.run(uint32(lblk), uint32(min(bm.n, max(want, 1))))
			bm.n = uint64(k)
			if written {
				bm.kind = mapWritten
			}
		}
	case esc.Delayed:
		bm.kind = mapDelayed
	default:
		bm.kind = mapHole
	}
	return bm
}

// diskLookup answers an extent-status cache miss from the on-disk tree
// with the whole extent holding lblk, or the hole from lblk to the next
// extent.
func (m *mapper) diskLookup(lblk uint32) (esc.Extent, bool, error) {
	e, found, hole, err := m.tree.Lookup(lblk)
	if err != nil {
		return esc.Extent{}, false, err
	}
	inRoot := m.tree.Depth() == 0
	if !found {
		n := min(hole, uint64(esc.MaxBlocks)-uint64(lblk))
		return esc.Extent{Lblk: lblk, Len: uint32(max(n, 1)), Status: esc.Hole}, inRoot, nil
	}
	st := esc.Written
	if e.Unwritten {
		st = esc.Unwritten
	}
	x := esc.Extent{Lblk: e.Lblk, Len: e.Len, Pblk: e.Pblk, Status: st}
	if m.conv != nil {
		x = m.conv.overlay(x, lblk) // queued conversions the tree has not taken
	}
	return x, inRoot, nil
}

// walk calls fn for every mapped run in logical order.
func (m *mapper) walk(fn func(extent.Extent) error) error {
	if m.tree != nil {
		return m.tree.Walk(fn)
	}
	return extent.WalkIndirect(m.ind, m.cfg, fn, nil)
}
