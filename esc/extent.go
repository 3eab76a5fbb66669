package esc

import (
	"fmt"

	"github.com/ext4io/ext4io/internal/errs"
)

// Sentinels re-exported so errors.Is works for callers of esc.
var (
	ErrInvalid = errs.ErrInvalid
	ErrCorrupt = errs.ErrCorrupt
)

// MaxBlocks bounds logical blocks: every cached range ends at or before it.
// It mirrors the kernel's EXT_MAX_BLOCKS (0xffffffff); valid logical blocks
// are 0..MaxBlocks-1.
const MaxBlocks = 0xFFFFFFFF

// MaxPblk is the largest physical block an entry can hold (60 bits; ext4
// itself uses 48).
const MaxPblk = 1<<statusShift - 1

const statusShift = 60

// Status is the state of a cached range. It mirrors the kernel's
// EXTENT_STATUS_{WRITTEN,UNWRITTEN,DELAYED,HOLE}. The zero value is invalid.
// It is a plain value, safe to copy and share.
type Status uint8

const (
	// Written: mapped to initialized physical blocks.
	Written Status = iota + 1
	// Unwritten: mapped to allocated blocks that read as zeros.
	Unwritten
	// Delayed: dirty data with no blocks allocated yet (delalloc). Never
	// reclaimed.
	Delayed
	// Hole: not mapped on disk and not delayed.
	Hole
)

func (s Status) String() string {
	switch s {
	case Written:
		return "written"
	case Unwritten:
		return "unwritten"
	case Delayed:
		return "delayed"
	case Hole:
		return "hole"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

func (s Status) valid() bool { return s >= Written && s <= Hole }

// mapped reports whether ranges of this status carry a physical block.
func (s Status) mapped() bool { return s == Written || s == Unwritten }

// Extent is a range of logical blocks [Lblk, Lblk+Len) with one status. Pblk
// is the physical block of Lblk for Written and Unwritten ranges and is
// ignored (reported as 0) for Delayed and Hole. It is a plain value, safe to
// copy and share; the cache never aliases it.
type Extent struct {
	Lblk   uint32
	Len    uint32
	Pblk   uint64
	Status Status
}

// End returns the first logical block after e.
func (e Extent) End() uint32 { return e.Lblk + e.Len }

// Contains reports whether lblk lies in e.
func (e Extent) Contains(lblk uint32) bool { return lblk >= e.Lblk && lblk-e.Lblk < e.Len }

// PblkOf returns the physical block for lblk, which must lie in e, for a
// Written or Unwritten extent.
func (e Extent) PblkOf(lblk uint32) uint64 { return e.Pblk + uint64(lblk-e.Lblk) }

func (e Extent) String() string {
	if e.Status.mapped() {
		return fmt.Sprintf("[%d+%d %v @%d]", e.Lblk, e.Len, e.Status, e.Pblk)
	}
	return fmt.Sprintf("[%d+%d %v]", e.Lblk, e.Len, e.Status)
}

// validate checks e against I2 and the status/pblk rules.
func (e Extent) validate() error {
	switch {
	case !e.Status.valid():
		return fmt.Errorf("extent %v: bad status: %w", e, ErrInvalid)
	case e.Len == 0:
		return fmt.Errorf("extent %v: zero length: %w", e, ErrInvalid)
	case uint64(e.Lblk)+uint64(e.Len) > MaxBlocks:
		return fmt.Errorf("extent %v: ends past logical block %d: %w", e, uint64(MaxBlocks), ErrInvalid)
	case e.Status.mapped() && e.Pblk+uint64(e.Len) > MaxPblk:
		return fmt.Errorf("extent %v: physical block out of range: %w", e, ErrInvalid)
	}
	return nil
}

// entry is the btree item: 16 bytes (see the package doc for the layout).
type entry struct {
	lblk uint32
	len  uint32
	pst  uint64 // pblk | status<<statusShift
}

func lessEntry(a, b entry) bool { return a.lblk < b.lblk }

// toEntry packs a validated extent.
func toEntry(e Extent) entry {
	p := e.Pblk
	if !e.Status.mapped() {
		p = 0
	}
	return entry{lblk: e.Lblk, len: e.Len, pst: p | uint64(e.Status)<<statusShift}
}

func (x entry) status() Status { return Status(x.pst >> statusShift) }
func (x entry) pblk() uint64   { return x.pst & MaxPblk }
func (x entry) end() uint32    { return x.lblk + x.len }

func (x entry) extent() Extent {
	return Extent{Lblk: x.lblk, Len: x.len, Pblk: x.pblk(), Status: x.status()}
}

// sub returns the part of x covering [from, to).
//
// Preconditions: x.lblk <= from < to <= x.end().
func (x entry) sub(from, to uint32) entry {
	out := entry{lblk: from, len: to - from, pst: x.pst}
	if x.status().mapped() {
		out.pst += uint64(from - x.lblk)
	}
	return out
}

// withStatus returns x with status s, keeping the mapping.
//
// Preconditions: x and s are both mapped or both unmapped statuses.
func (x entry) withStatus(s Status) entry {
	x.pst = x.pblk() | uint64(s)<<statusShift
	return x
}

// mergeable reports whether b can be appended to a.
//
// Preconditions: a.end() <= b.lblk (a before b, not overlapping).
func mergeable(a, b entry) bool {
	if a.end() != b.lblk || a.status() != b.status() {
		return false
	}
	if uint64(a.len)+uint64(b.len) > MaxBlocks {
		return false
	}
	return !a.status().mapped() || a.pblk()+uint64(a.len) == b.pblk()
}

// merge returns the entry covering a then b.
//
// Preconditions: mergeable(a, b), so a.end() == b.lblk.
// Postconditions: result starts at a.lblk with a's pblk and status and ends
// at b.end().
func merge(a, b entry) entry {
	a.len += b.len
	return a
}
