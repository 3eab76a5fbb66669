package extent

import (
	"encoding/binary"
	"fmt"
)

// Block-mapped (ext2/ext3) files keep 15 le32 block pointers in i_block:
//
//	i_block[0..11]  direct blocks, logical 0..11
//	i_block[12]     single indirect: a block of blockSize/4 le32 pointers
//	i_block[13]     double indirect: pointers to single indirect blocks
//	i_block[14]     triple indirect
//
// A zero pointer is a hole (for an indirect pointer, a hole as large as the
// whole subtree). These constants are part of the on-disk format.
const (
	NDirect   = 12 // EXT4_NDIR_BLOCKS
	indSingle = 12 // EXT4_IND_BLOCK
	indDouble = 13 // EXT4_DIND_BLOCK
	indTriple = 14 // EXT4_TIND_BLOCK
)

func iblockPtr(iblock *[RootSize]byte, i int) uint64 {
	return uint64(binary.LittleEndian.Uint32(iblock[4*i:]))
}

// MapIndirect maps logical block lblk of a block-mapped file whose i_block
// is iblock. found is false for a hole (or a block beyond the triple
// indirect range). cfg.IO reads the indirect blocks; pointers outside
// [FirstDataBlock, BlocksCount) or inside cfg.SystemZone are reported as
// corrupt.
func MapIndirect(iblock *[RootSize]byte, cfg Config, lblk uint32) (pblk uint64, found bool, err error) {
	pblk, found, _, err = MapIndirectHole(iblock, cfg, lblk)
	return pblk, found, err
}

// MapIndirectHole is MapIndirect that also measures a hole: hole is the
// number of blocks from lblk to the end of the zero pointer's subtree and
// those of the zero pointers after it in the same indirect block (1 for a
// direct pointer; up to EndLblk past the triple indirect range), so
// that a scan of a sparse file skips a missing indirect block in one step,
// as ext4_ind_map_blocks does with the hole's length.
func MapIndirectHole(iblock *[RootSize]byte, cfg Config, lblk uint32) (pblk uint64, found bool, hole uint64, err error) {
	if err := cfg.validate(); err != nil {
		return 0, false, 0, err
	}
	per := uint64(cfg.BlockSize / 4)
	l := uint64(lblk)
	if l < NDirect {
		p, ok, err := checkPtr(&cfg, iblockPtr(iblock, int(l)), 0, -1, "direct pointer")
		return p, ok, 1, err
	}
	l -= NDirect
	level, span := 1, per
	for l >= span {
		l -= span
		level++
		if level > 3 {
			return 0, false, max(EndLblk-uint64(lblk), 1), nil
		}
		span *= per
	}
	p, ok, err := checkPtr(&cfg, iblockPtr(iblock, indSingle+level-1), 0, -1, "indirect pointer in i_block")
	if !ok || err != nil {
		return 0, false, span - l, err
	}
	buf := make([]byte, cfg.BlockSize)
	for ; level > 0; level-- {
		span /= per
		i := l / span
		l %= span
		if cfg.IO == nil {
			return 0, false, 0, invalidf("Config.IO is nil")
		}
		if err := cfg.IO.ReadBlock(p, buf); err != nil {
			return 0, false, 0, fmt.Errorf("extent: inode %d: indirect block %d: %w", cfg.Ino, p, err)
		}
		parent := p
		if p, ok, err = checkPtr(&cfg, uint64(binary.LittleEndian.Uint32(buf[4*i:])), parent, int(4*i), "pointer in indirect block"); err != nil {
			return 0, false, 0, err
		}
		if !ok {
			// The hole runs over the zero pointers that follow, too.
			j := i + 1
			for j < per && binary.LittleEndian.Uint32(buf[4*j:]) == 0 {
				j++
			}
			return 0, false, (j-i)*span - l, nil
		}
	}
	return p, true, 0, nil
}

func checkPtr(cfg *Config, p, block uint64, off int, what string) (uint64, bool, error) {
	if p == 0 {
		return 0, false, nil
	}
	if !cfg.pblkOK(p, 1) {
		return 0, false, cfg.corrupt(block, off, "%s %d outside [%d,%d)", what, p, cfg.FirstDataBlock, cfg.BlocksCount)
	}
	if cfg.inSystemZone(p, 1) {
		return 0, false, cfg.corrupt(block, off, "%s %d is file-system metadata", what, p)
	}
	return p, true, nil
}

// WalkIndirect walks a block-mapped file: fn (if not nil) gets the mapped
// blocks in logical order as runs of logically and physically contiguous
// blocks (Unwritten is always false), and meta (if not nil) gets each
// indirect block, parents before children, as it is reached. An indirect
// block reached twice is reported as corrupt, so the work is bounded by the
// number of distinct blocks.
func WalkIndirect(iblock *[RootSize]byte, cfg Config, fn func(Extent) error, meta func(pblk uint64) error) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	w := indWalker{cfg: &cfg, fn: fn, meta: meta, seen: make(map[uint64]bool), per: uint64(cfg.BlockSize / 4)}
	for i := 0; i < NDirect; i++ {
		p, ok, err := checkPtr(&cfg, iblockPtr(iblock, i), 0, -1, "direct pointer")
		if err != nil {
			return err
		}
		if ok {
			if err := w.add(uint64(i), p); err != nil {
				return err
			}
		}
	}
	base, span := uint64(NDirect), w.per
	for level := 1; level <= 3 && base < EndLblk; level++ {
		p, ok, err := checkPtr(&cfg, iblockPtr(iblock, indSingle+level-1), 0, -1, "indirect pointer in i_block")
		if err != nil {
			return err
		}
		if ok {
			if err := w.walk(p, level, base); err != nil {
				return err
			}
		}
		base += span
		span *= w.per
	}
	return w.flush()
}

type indWalker struct {
	cfg  *Config
	fn   func(Extent) error
	meta func(uint64) error
	seen map[uint64]bool
	per  uint64
	run  Extent
}

func (w *indWalker) add(lblk, pblk uint64) error {
	if w.fn == nil {
		return nil
	}
	r := &w.run
	if r.Len > 0 && r.End() == lblk && r.Pblk+uint64(r.Len) == pblk && r.Len < 1<<31 {
		r.Len++
		return nil
	}
	if err := w.flush(); err != nil {
		return err
	}
	*r = Extent{Lblk: uint32(lblk), Len: 1, Pblk: pblk}
	return nil
}

func (w *indWalker) flush() error {
	if w.run.Len == 0 || w.fn == nil {
		return nil
	}
	r := w.run
	w.run = Extent{}
	return w.fn(r)
}

// walk visits the level-deep indirect block p mapping logical blocks from
// base.
func (w *indWalker) walk(p uint64, level int, base uint64) error {
	if w.seen[p] {
		return w.cfg.corrupt(p, -1, "indirect block %d reached twice", p)
	}
	w.seen[p] = true
	if w.meta != nil {
		if err := w.meta(p); err != nil {
			return err
		}
	}
	if w.cfg.IO == nil {
		return invalidf("Config.IO is nil")
	}
	buf := make([]byte, w.cfg.BlockSize)
	if err := w.cfg.IO.ReadBlock(p, buf); err != nil {
		return fmt.Errorf("extent: inode %d: indirect block %d: %w", w.cfg.Ino, p, err)
	}
	span := uint64(1)
	for i := 1; i < level; i++ {
		span *= w.per
	}
	for i := uint64(0); i < w.per; i++ {
		l := base + i*span
		if l >= EndLblk {
			break
		}
		c, ok, err := checkPtr(w.cfg, uint64(binary.LittleEndian.Uint32(buf[4*i:])), p, int(4*i), "pointer in indirect block")
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if level == 1 {
			err = w.add(l, c)
		} else {
			err = w.walk(c, level-1, l)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
