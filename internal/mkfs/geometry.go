package mkfs

import (
	"fmt"
	"sort"

	"github.com/ext4io/ext4io/internal/errs"
	"github.com/ext4io/ext4io/layout"
)

// run is a range of blocks [start, start+n).
type run struct{ start, n uint64 }

func (r run) end() uint64 { return r.start + r.n }

// plan is the in-memory image of the new filesystem's allocation state:
// the superblock, the descriptors and, per group, the sorted used runs
// (metadata and files). Bitmaps are rendered from the runs when written,
// so memory is proportional to the number of groups, not to the size.
type plan struct {
	sb     *layout.Superblock
	bs     uint64
	groups uint64
	itb    uint64 // inode table blocks per group
	descs  []*layout.GroupDesc
	used   [][]run // per group, sorted, non-overlapping, merged
	// foreign[g] is set when group g holds blocks that are not its own
	// superblock/descriptor copy or its own bitmaps and table: such a
	// group cannot be BLOCK_UNINIT.
	foreign []bool
	csum    bool // group checksums (metadata_csum or uninit_bg)
}

func (p *plan) groupOf(b uint64) uint64 {
	return (b - uint64(p.sb.FirstDataBlock)) / uint64(p.sb.BlocksPerGroup)
}

// markUsed records [start, start+n) as used; it may span groups. own is
// the group whose metadata it is (or ^0 for file data).
func (p *plan) markUsed(start, n, own uint64) {
	for n > 0 {
		g := p.groupOf(start)
		gEnd := p.sb.GroupFirstBlock(g) + uint64(p.sb.GroupBlocks(g))
		k := min(n, gEnd-start)
		p.used[g] = insertRun(p.used[g], run{start, k})
		if own != g {
			p.foreign[g] = true
		}
		start += k
		n -= k
	}
}

// insertRun adds r (which must not overlap) to the sorted slice rs,
// merging neighbours.
func insertRun(rs []run, r run) []run {
	i := sort.Search(len(rs), func(i int) bool { return rs[i].start >= r.start })
	if i > 0 && rs[i-1].end() == r.start {
		rs[i-1].n += r.n
		if i < len(rs) && rs[i].start == rs[i-1].end() {
			rs[i-1].n += rs[i].n
			rs = append(rs[:i], rs[i+1:]...)
		}
		return rs
	}
	if i < len(rs) && r.end() == rs[i].start {
		rs[i].start = r.start
		rs[i].n += r.n
		return rs
	}
	rs = append(rs, run{})
	copy(rs[i+1:], rs[i:])
	rs[i] = r
	return rs
}

// freeFrom returns the first free run at or after block b, at most max
// long; a run may continue into following groups.
func (p *plan) freeFrom(b, max uint64) (run, bool) {
	for b < p.sb.BlocksCount {
		g := p.groupOf(b)
		gEnd := p.sb.GroupFirstBlock(g) + uint64(p.sb.GroupBlocks(g))
		next := gEnd // first used block at or after b in g
		for _, r := range p.used[g] {
			if r.end() <= b {
				continue
			}
			if r.start <= b {
				b = r.end()
				continue
			}
			next = r.start
			break
		}
		if b >= gEnd {
			b = gEnd
			continue
		}
		out := run{b, min(max, next-b)}
		for next == gEnd && out.n < max && gEnd < p.sb.BlocksCount {
			g++
			gEnd = p.sb.GroupFirstBlock(g) + uint64(p.sb.GroupBlocks(g))
			next = gEnd
			if len(p.used[g]) > 0 {
				next = p.used[g][0].start
			}
			out.n = min(max, next-out.start)
		}
		return out, true
	}
	return run{}, false
}

// allocContig finds n contiguous free blocks at or after goal (wrapping to
// the start once) and marks them used for owner own.
func (p *plan) allocContig(goal, n, own uint64) (uint64, error) {
	for pass := 0; pass < 2; pass++ {
		b := goal
		if pass == 1 {
			b = uint64(p.sb.FirstDataBlock)
		}
		for {
			r, ok := p.freeFrom(b, n)
			if !ok {
				break
			}
			if r.n == n {
				p.markUsed(r.start, n, own)
				return r.start, nil
			}
			b = r.end()
		}
	}
	return 0, fmt.Errorf("mkfs: no %d contiguous free blocks: %w", n, errs.ErrNoSpace)
}

// allocRuns allocates n blocks as few runs as possible starting near goal,
// each at most maxRun long.
func (p *plan) allocRuns(goal, n, maxRun uint64) ([]run, error) {
	var out []run
	b := goal
	wrapped := false
	for n > 0 {
		r, ok := p.freeFrom(b, min(n, maxRun))
		if !ok {
			if wrapped {
				return nil, fmt.Errorf("mkfs: %d blocks short: %w", n, errs.ErrNoSpace)
			}
			wrapped, b = true, uint64(p.sb.FirstDataBlock)
			continue
		}
		p.markUsed(r.start, r.n, ^uint64(0))
		out = append(out, r)
		n -= r.n
		b = r.end()
	}
	return out, nil
}

// newPlan computes the geometry (ext2fs_initialize's arithmetic, without
// resize_inode or meta_bg) and places every group's metadata.
func newPlan(sb *layout.Superblock, o *Options, devBlocks uint64) (*plan, error) {
	bs := uint64(sb.BlockSize())
	first := uint64(sb.FirstDataBlock)
	bpg := uint64(sb.BlocksPerGroup)
	isz := uint64(sb.InodeSizeBytes())
	ipb := bs / isz
	blocks := devBlocks
	if !sb.Is64Bit() && blocks > 1<<32-1 {
		return nil, fmt.Errorf("mkfs: %d blocks need the 64bit feature: %w", blocks, errs.ErrInvalid)
	}
	if blocks >= 1<<48 {
		return nil, fmt.Errorf("mkfs: %d blocks: %w", blocks, errs.ErrInvalid)
	}
	descPerBlock := bs / uint64(sb.DescriptorSize())
	for retry := 0; ; retry++ {
		if blocks <= first+64 {
			return nil, fmt.Errorf("mkfs: device of %d blocks of %d bytes is too small: a file system needs at least %d blocks (%d bytes): %w",
				devBlocks, bs, first+65, (first+65)*bs, errs.ErrInvalid)
		}
		groups := (blocks - first + bpg - 1) / bpg
		inodes := blocks * bs / uint64(o.InodeRatio)
		ipg := (inodes + groups - 1) / groups
		ipgMax := min(8*bs, 1<<16-ipb, ipb*(bpg-4))
		ipg = max(ipg, 16)
		ipg = min(ipg, ipgMax)
		itb := (ipg*isz + bs - 1) / bs
		ipg = itb * bs / isz &^ 7
		for ipg > ipgMax {
			itb--
			ipg = itb * bs / isz &^ 7
		}
		itb = (ipg*isz + bs - 1) / bs
		gdtBlocks := (groups + descPerBlock - 1) / descPerBlock
		overhead := 2 + itb + 1 + gdtBlocks
		if overhead+50 > bpg {
			return nil, fmt.Errorf("mkfs: %d groups need %d descriptor blocks per backup (meta_bg is not supported): %w", groups, gdtBlocks, errs.ErrUnsupported)
		}
		if groups*ipg > 1<<32-1 {
			ipg = (1<<32 - 1) / groups &^ 7
			itb = (ipg*isz + bs - 1) / bs
		}
		rem := (blocks - first) % bpg
		if groups > 1 && rem != 0 && rem < overhead+50 && retry == 0 {
			blocks -= rem
			continue
		}
		sb.BlocksCount = blocks
		sb.InodesPerGroup = uint32(ipg)
		sb.InodesCount = uint32(ipg * groups)
		p := &plan{sb: sb, bs: bs, groups: groups, itb: itb,
			descs: make([]*layout.GroupDesc, groups), used: make([][]run, groups),
			foreign: make([]bool, groups), csum: sb.HasGroupChecksums()}
		if err := p.place(o); err != nil {
			return nil, err
		}
		return p, nil
	}
}

// place marks superblock and descriptor copies and places bitmaps and
// inode tables, packing them per flex group when flex_bg is on, as
// ext2fs_allocate_group_table does.
func (p *plan) place(o *Options) error {
	sb := p.sb
	gdt := sb.DescBlocks()
	for g := uint64(0); g < p.groups; g++ {
		p.descs[g] = &layout.GroupDesc{}
		if sb.GroupHasSuper(g) {
			p.markUsed(sb.GroupFirstBlock(g), 1+gdt, g)
		}
	}
	flex := uint64(1)
	if sb.HasIncompat(layout.IncompatFlexBG) {
		flex = uint64(1) << sb.LogGroupsPerFlex
	}
	for f := uint64(0); f < p.groups; f += flex {
		n := min(flex, p.groups-f)
		goal := sb.GroupFirstBlock(f)
		var err error
		for i := uint64(0); i < n && err == nil; i++ {
			var b uint64
			b, err = p.allocContig(goal, 1, f+i)
			p.descs[f+i].BlockBitmap, goal = b, b+1
		}
		for i := uint64(0); i < n && err == nil; i++ {
			var b uint64
			b, err = p.allocContig(goal, 1, f+i)
			p.descs[f+i].InodeBitmap, goal = b, b+1
		}
		for i := uint64(0); i < n && err == nil; i++ {
			var b uint64
			b, err = p.allocContig(goal, p.itb, f+i)
			p.descs[f+i].InodeTable, goal = b, b+p.itb
		}
		if err != nil {
			return fmt.Errorf("mkfs: placing group metadata of groups %d-%d: %w", f, f+n-1, err)
		}
	}
	return nil
}

// freeBlocks returns the number of free blocks in group g.
func (p *plan) freeBlocks(g uint64) uint64 {
	n := uint64(p.sb.GroupBlocks(g))
	for _, r := range p.used[g] {
		n -= r.n
	}
	return n
}

// blockBitmap renders group g's block bitmap (a full block, padding bits
// past the group's end set, as e2fsprogs writes them).
func (p *plan) blockBitmap(g uint64) []byte {
	b := make([]byte, p.bs)
	base := p.sb.GroupFirstBlock(g)
	for _, r := range p.used[g] {
		setBits(b, r.start-base, r.n)
	}
	nb := uint64(p.sb.GroupBlocks(g))
	setBits(b, nb, p.bs*8-nb)
	return b
}

// setBits sets n bits from bit i.
func setBits(b []byte, i, n uint64) {
	for n > 0 && i%8 != 0 {
		b[i/8] |= 1 << (i % 8)
		i, n = i+1, n-1
	}
	for n >= 8 {
		b[i/8] = 0xFF
		i, n = i+8, n-8
	}
	for n > 0 {
		b[i/8] |= 1 << (i % 8)
		i, n = i+1, n-1
	}
}
