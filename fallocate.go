package ext4io

import (
	"errors"
	"fmt"
	"io/fs"
	"math"

	"github.com/ext4io/ext4io/extent"
)

// FallocMode selects what Fallocate does (Linux's fallocate modes).
type FallocMode int

const (
	// FallocAllocate preallocates unwritten blocks for the holes in the
	// range and grows the file to cover it.
	FallocAllocate FallocMode = iota
	// FallocKeepSize preallocates like FallocAllocate without changing
	// the size (FALLOC_FL_KEEP_SIZE).
	FallocKeepSize
	// FallocPunchHole frees the whole blocks of the range and zeroes the
	// partial ones; the size is unchanged (FALLOC_FL_PUNCH_HOLE).
	FallocPunchHole
	// FallocZeroRange makes the range read as zeroes, leaving it
	// allocated as unwritten extents, and grows the file to cover it
	// (FALLOC_FL_ZERO_RANGE).
	FallocZeroRange
	// FallocWriteZeroes allocates written blocks filled with zeroes by the
	// device's ZeroOut, so later writes are overwrites
	// (FALLOC_FL_WRITE_ZEROES); it grows the file to cover the range.
	FallocWriteZeroes
	// FallocCollapseRange removes the range and shifts everything after
	// it down, shrinking the file (FALLOC_FL_COLLAPSE_RANGE). Offset and
	// length must be block-aligned and the range must end before EOF.
	// The shift is one journal transaction: on a journal too small for
	// the extent tree past the offset it fails with ErrNoSpace and
	// changes nothing.
	FallocCollapseRange
	// FallocInsertRange shifts everything from the offset up by the
	// length, inserting a hole and growing the file
	// (FALLOC_FL_INSERT_RANGE). Offset and length must be block-aligned
	// and the offset inside the file. Like FallocCollapseRange, it fails
	// with ErrNoSpace when the journal is too small for the shift.
	FallocInsertRange
)

var fallocNames = map[FallocMode]string{
	FallocAllocate: "allocate", FallocKeepSize: "keep-size", FallocPunchHole: "punch-hole",
	FallocZeroRange: "zero-range", FallocWriteZeroes: "write-zeroes",
	FallocCollapseRange: "collapse-range", FallocInsertRange: "insert-range",
}

func (m FallocMode) String() string {
	if s, ok := fallocNames[m]; ok {
		return s
	}
	return fmt.Sprintf("FallocMode(%d)", int(m))
}

// ParseFallocMode parses a mode name as String prints it.
func ParseFallocMode(s string) (FallocMode, error) {
	for m, n := range fallocNames {
		if n == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("unknown fallocate mode %q: %w", s, ErrInvalid)
}

// Fallocate changes the allocation of [off, off+length) as mode says.
func (f *File) Fallocate(mode FallocMode, off, length int64) error {
	if err := f.writable("fallocate"); err != nil {
		return err
	}
	if err := f.checkRange("fallocate", off, length); err != nil {
		return err
	}
	if length == 0 {
		return &fs.PathError{Op: "fallocate", Path: f.name, Err: fmt.Errorf("zero length: %w", ErrInvalid)}
	}
	defer f.n.dataGen.Add(1) // read-ahead windows (readahead.go)
	defer f.n.dataChanged()
	punch := mode == FallocPunchHole || mode == FallocZeroRange
	shift := mode == FallocCollapseRange || mode == FallocInsertRange
	retried, steps := false, punch
	var seen uint64 // the mapping's seq after punchSteps
	for {
		if steps {
			var err error
			if seen, err = f.punchSteps(off, length); err != nil {
				return &fs.PathError{Op: "fallocate " + mode.String(), Path: f.name, Err: err}
			}
			steps = false
		}
		if shift {
			// Everything from off moves: write back the dirty pages first.
			if err := f.flushCache(off, math.MaxInt64); err != nil {
				return &fs.PathError{Op: "fallocate " + mode.String(), Path: f.name, Err: err}
			}
		}
		err := f.v.beginOp()
		if err == nil {
			err = f.v.endOpErr(f.fallocate(mode, off, length, seen))
		}
		if err == errCacheRace {
			continue
		}
		if err == errStepsAgain {
			steps = true
			continue
		}
		if !retried && f.v.retryNoSpace(err) {
			retried = true
			continue
		}
		if err != nil {
			return &fs.PathError{Op: "fallocate " + mode.String(), Path: f.name, Err: err}
		}
		return nil
	}
}

// errStepsAgain sends Fallocate back to punchSteps: the mapping changed
// after the steps, leaving more than one step's worth to free.
var errStepsAgain = errors.New("more steps")

// fallocate is one operation of Fallocate; seen is the mapping's seq
// after punchSteps, for a punch or zero-range.
func (f *File) fallocate(mode FallocMode, off, length int64, seen uint64) error {
	f.n.mu.Lock()
	defer f.n.mu.Unlock()
	if err := f.closedLocked(); err != nil {
		return err
	}
	if bs := uint64(f.v.bs); mode == FallocPunchHole || mode == FallocZeroRange {
		first, last := (uint64(off)+bs-1)/bs, uint64(off+length)/bs
		if first < last {
			again, err := f.stepsAgainLocked(seen, first, last)
			if err != nil {
				return err
			}
			if again {
				return errStepsAgain
			}
		}
	}
	if err := f.v.applyConversionsLocked(f.n); err != nil {
		return err
	}
	switch mode {
	case FallocCollapseRange, FallocInsertRange:
		if !f.cacheCleanLocked(off, math.MaxInt64) {
			return errCacheRace
		}
	case FallocPunchHole, FallocZeroRange, FallocWriteZeroes:
		f.dropCacheLocked(off, length)
	}
	var err error
	var reached uint64 // preallocLocked's progress: [off, reached) is allocated
	switch mode {
	case FallocAllocate, FallocKeepSize:
		reached, err = f.preallocLocked(off, length, false)
	case FallocPunchHole:
		err = f.punchLocked(off, length)
	case FallocZeroRange:
		if err = f.punchLocked(off, length); err == nil {
			reached, err = f.preallocLocked(off, length, false)
		}
	case FallocWriteZeroes:
		reached, err = f.preallocLocked(off, length, true)
	case FallocCollapseRange, FallocInsertRange:
		err = f.shiftRangeLocked(mode, off, length)
	default:
		err = fmt.Errorf("fallocate mode %v: %w", mode, ErrUnsupported)
	}
	grows := mode == FallocAllocate || mode == FallocZeroRange || mode == FallocWriteZeroes
	if err == nil {
		if end := uint64(off + length); grows && end > f.in.Size {
			f.n.setSizeLocked(end)
		} else if mode == FallocWriteZeroes {
			f.n.coverLocked(end) // written blocks inside i_size, maybe past i_disksize
		}
		f.touchLocked()
		err = f.v.writeInodeLocked(f.n)
	} else if f.m != nil && f.m.tree != nil && (f.n.blocksChanged || f.m.tree.Root() != f.in.Block) {
		// A failure half-way (ErrNoSpace after some runs were allocated,
		// or after zero-range's punch) keeps what was done, as Linux's
		// ext4_alloc_file_blocks does, i_size growing over the allocated
		// part (no written block past EOF, which e2fsck clears). The
		// bitmap and tree-block changes are in the running transaction,
		// and the inode (i_block, i_blocks, i_size) must commit with them,
		// or a crash leaves blocks marked used that no file maps, or freed
		// blocks the inode still maps. The error returned is the
		// operation's.
		if grows && reached > f.in.Size {
			f.n.setSizeLocked(reached)
		} else if mode == FallocWriteZeroes {
			f.n.coverLocked(reached)
		}
		f.touchLocked()
		_ = f.v.writeInodeLocked(f.n)
	}
	return err
}

// preallocLocked allocates the holes of the range: unwritten extents, or
// with written set, zeroed written blocks (unwritten blocks are zeroed and
// converted too, written ones zeroed). It returns the byte offset up to
// which the range is done: off+length, less when it failed half-way.
func (f *File) preallocLocked(off, length int64, written bool) (uint64, error) {
	bs := uint64(f.v.bs)
	lblk := uint64(off) / bs
	end := (uint64(off+length) + bs - 1) / bs
	done := func() uint64 { return min(lblk*bs, uint64(off+length)) }
	if written {
		// Partial edge blocks: zero their bytes in the range.
		if err := f.zeroPartial(uint64(off), uint64(length)); err != nil {
			return done(), err
		}
		if e := uint64(off+length) / bs * bs; e > uint64(off) {
			if err := f.zeroPartial(e, uint64(off+length)-e); err != nil {
				return done(), err
			}
		}
	}
	for lblk < end {
		m, err := f.m.lookup(lblk)
		if err != nil {
			return done(), err
		}
		n := min(m.n, end-lblk)
		switch {
		case m.kind == mapHole && written:
			start, got, err := f.allocRun(lblk, n, extent.MaxWrittenLen)
			if err != nil {
				return done(), err
			}
			if err := f.v.zeroBlocks(start, got, false); err != nil {
				f.v.alloc.Free(start, got)
				return done(), err
			}
			if err := f.mapRun(lblk, start, got, false); err != nil {
				return done(), err
			}
			n = got
		case m.kind == mapHole:
			start, got, err := f.allocRun(lblk, n, extent.MaxUnwrittenLen)
			if err != nil {
				return done(), err
			}
			if err := f.mapRun(lblk, start, got, true); err != nil {
				return done(), err
			}
			n = got
		case written && m.kind == mapUnwritten:
			n = min(n, extent.MaxWrittenLen)
			if err := f.v.zeroBlocks(m.pblk, n, false); err != nil {
				return done(), err
			}
			if err := f.convertLocked(lblk, n); err != nil {
				return done(), err
			}
		case written && m.kind == mapWritten:
			// Whole blocks inside the range; edges were zeroed above.
			first, last := lblk, lblk+n
			if first*bs < uint64(off) {
				first++
			}
			if last*bs > uint64(off+length) {
				last--
			}
			if last > first {
				f.v.liveZeroed(m.pblk+(first-lblk), last-first)
				if err := f.v.zeroBlocks(m.pblk+(first-lblk), last-first, false); err != nil {
					return done(), err
				}
			}
		}
		lblk += n
	}
	return done(), nil
}

// shiftRangeLocked implements collapse-range and insert-range with
// extent.Tree.Shift, as ext4_collapse_range/ext4_insert_range do.
//
// The shift runs in one operation, so it commits in one journal
// transaction: a crash leaves the file as before or as after it. Linux
// restarts its handle while shifting, holding i_rwsem across the
// restarts; here the transaction gate is outer to the inode lock, so
// nothing would keep the file's other writers off a half-shifted mapping
// between steps (docs/design.md). A shift (with a collapse's removal)
// that would change more metadata blocks than one operation may
// (shiftFitsLocked) is refused before anything changes, with ErrNoSpace,
// and the volume goes on committing. On the smallest journal (1024
// blocks of 1 KiB) that is about 500 tree blocks past the offset (some
// 20,000 to 40,000 extents).
//
// Fast commits cannot express a shift (ADD_RANGE and DEL_RANGE place
// blocks, they do not move the mapping): the Sync after it commits the
// journal in full (Linux's EXT4_FC_REASON_FALLOC_RANGE).
func (f *File) shiftRangeLocked(mode FallocMode, off, length int64) error {
	f.v.fcIneligible("collapse or insert range")
	bs := int64(f.v.bs)
	size := int64(f.in.Size)
	if off%bs != 0 || length%bs != 0 {
		return fmt.Errorf("%v needs block-aligned offset and length (block size %d): %w", mode, bs, ErrInvalid)
	}
	first, n := uint32(off/bs), length/bs
	if mode == FallocCollapseRange {
		if off+length >= size {
			return fmt.Errorf("collapse-range [%d,+%d) reaches EOF %d: %w", off, length, size, ErrInvalid)
		}
		if _, err := f.v.checkRemoveLocked(f.n, first, uint32(off/bs+n-1)); err != nil {
			return err
		}
		if err := f.shiftFitsLocked(mode, first+uint32(n), uint64(first), uint64(first)+uint64(n)); err != nil {
			return err
		}
		if err := f.m.tree.Remove(first, uint32(off/bs+n-1)); err != nil {
			return err
		}
		if err := f.m.tree.Shift(first+uint32(n), -n); err != nil {
			return err
		}
		f.n.setSizeLocked(f.in.Size - uint64(length))
	} else {
		if off >= size {
			return fmt.Errorf("insert-range at %d is not inside the file (size %d): %w", off, size, ErrInvalid)
		}
		if uint64(size+length) > uint64(maxFileBlocks)*uint64(bs) {
			return fmt.Errorf("insert-range: file would exceed the largest size: %w", errFileTooBig)
		}
		if err := f.shiftFitsLocked(mode, first, 0, 0); err != nil {
			return err
		}
		if err := f.m.tree.SplitAt(first, false); err != nil {
			return err
		}
		if err := f.m.tree.Shift(first, n); err != nil {
			return err
		}
		f.n.setSizeLocked(f.in.Size + uint64(length))
	}
	f.m.drop(first, uint32(maxFileBlocks-uint64(first)))
	return nil
}

// shiftSlack is what a shift changes besides the tree blocks
// extent.Tree.ShiftBlocks counts and a collapse's removal: the inode, and
// for an insert's split of a full leaf a new leaf, its parent, a bitmap
// and a group descriptor (a tree that grows a level needs one more).
const shiftSlack = 8

// shiftFitsLocked fails with an error matching ErrNoSpace when shifting
// the mapping from block from, after removing [rmFirst, rmLast) for a
// collapse, would change more metadata blocks than one operation may:
// half the largest transaction the journal takes (MaxLargeCredits), the
// other half left to the pending set the operation joins. It reads the
// whole tree, as the shift does. Without a journal there is no limit.
func (f *File) shiftFitsLocked(mode FallocMode, from uint32, rmFirst, rmLast uint64) error {
	v := f.v
	if v.jm == nil || f.m == nil || f.m.tree == nil {
		return nil
	}
	w, err := f.m.tree.ShiftBlocks(from)
	if err != nil {
		return fmt.Errorf("ext4io: inode %d: %w", f.ino, err)
	}
	if rmFirst < rmLast {
		_, rest, err := v.treeCutsBudgetLocked(f.n, rmFirst, rmLast, math.MaxInt)
		if err != nil {
			return err
		}
		w += rest
	}
	w += shiftSlack
	if limit := v.jm.j.MaxLargeCredits() / 2; w > limit {
		return fmt.Errorf("%v: the shift changes up to %d metadata blocks, more than one operation may (%d, half the journal's largest transaction): %w",
			mode, w, limit, ErrNoSpace)
	}
	return nil
}

// punchSteps frees the whole blocks of [off, off+length) in steps of
// their own operations, from the range's end, when freeing them in one
// would change more metadata than a pending set may hold (truncateSteps),
// leaving at most one step's worth to the operation of the punch itself,
// as ext4_punch_hole restarts its handle. A crash between steps leaves
// part of the range punched: it reads as zeroes, as after the punch. It
// returns the mapping's seq after its last operation (removeSteps).
func (f *File) punchSteps(off, length int64) (uint64, error) {
	if f.v.jm == nil {
		return 0, nil
	}
	bs := uint64(f.v.bs)
	first, last := (uint64(off)+bs-1)/bs, uint64(off+length)/bs
	if first >= last {
		return 0, nil
	}
	return f.removeSteps(func() bool { return true }, first, last)
}

// punchLocked frees the whole blocks of the range and zeroes partial ones.
func (f *File) punchLocked(off, length int64) error {
	bs := uint64(f.v.bs)
	start, end := uint64(off), uint64(off+length)
	first := (start + bs - 1) / bs
	last := end / bs // exclusive
	if first >= last {
		// Inside one block, or spanning a block boundary without a whole block.
		if err := f.zeroPartial(start, min(end, (start/bs+1)*bs)-start); err != nil {
			return err
		}
		if end > (start/bs+1)*bs {
			return f.zeroPartial(end/bs*bs, end%bs)
		}
		return nil
	}
	if _, err := f.v.checkRemoveLocked(f.n, uint32(first), uint32(last-1)); err != nil {
		return err
	}
	if err := f.zeroPartial(start, first*bs-start); err != nil {
		return err
	}
	if err := f.zeroPartial(last*bs, end-last*bs); err != nil {
		return err
	}
	if err := f.m.tree.Remove(uint32(first), uint32(last-1)); err != nil {
		return err
	}
	f.m.drop(uint32(first), uint32(last-first))
	return nil
}
