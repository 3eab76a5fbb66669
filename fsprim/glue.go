package fsprim

import (
	"fmt"
	"sync/atomic"

	"github.com/ext4io/ext4io/alloc"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/esc"
	"github.com/ext4io/ext4io/extent"
	"github.com/ext4io/ext4io/internal/errs"
	"github.com/ext4io/ext4io/journal"
)

// Sentinels shared with every ext4io package.
var (
	ErrInvalid     = errs.ErrInvalid
	ErrCorrupt     = errs.ErrCorrupt
	ErrNoSpace     = errs.ErrNoSpace
	ErrUnsupported = errs.ErrUnsupported
	ErrExist       = errs.ErrExist
)

// TreeAlloc is an extent.Allocator over an alloc.Allocator for the tree of
// inode Ino. Blocks counts the file-system blocks the tree took (tree
// blocks) minus those it gave back (tree blocks and data blocks freed by
// Remove): add it to i_blocks. It is safe for concurrent use.
type TreeAlloc struct {
	A      *alloc.Allocator
	Ino    uint32
	Blocks atomic.Int64
}

var _ extent.Allocator = (*TreeAlloc)(nil)

// AllocTreeBlock implements extent.Allocator: one block near goal, from
// the reserved pool too when mustSucceed.
func (t *TreeAlloc) AllocTreeBlock(goal uint64, mustSucceed bool) (uint64, error) {
	var flags alloc.Flags
	if mustSucceed {
		flags |= alloc.MustSucceed
	}
	start, _, err := t.A.Allocate(alloc.Request{Ino: t.Ino, Goal: goal, Min: 1, Max: 1, Flags: flags})
	if err != nil {
		return 0, err
	}
	t.Blocks.Add(1)
	return start, nil
}

// FreeTreeBlock implements extent.Allocator.
func (t *TreeAlloc) FreeTreeBlock(pblk uint64) error {
	if err := t.A.Free(pblk, 1); err != nil {
		return err
	}
	t.Blocks.Add(-1)
	return nil
}

// FreeData implements extent.Allocator.
func (t *TreeAlloc) FreeData(pblk, n uint64) error {
	if err := t.A.Free(pblk, n); err != nil {
		return err
	}
	t.Blocks.Add(-int64(n))
	return nil
}

// Lookup returns an esc.LookupFunc over tr, for esc.Tree.Fill: the whole
// on-disk extent holding lblk, or the whole hole from lblk to the next
// extent, bounded by esc.MaxBlocks (EXT_MAX_BLOCKS) so its length fits a
// uint32. (A hole starts at lblk, not at the end of the previous extent:
// Fill needs only that it contains lblk.) inRoot is true for a tree of
// depth 0.
func Lookup(tr *extent.Tree) esc.LookupFunc {
	return func(lblk uint32) (esc.Extent, bool, error) {
		e, found, hole, err := tr.Lookup(lblk)
		if err != nil {
			return esc.Extent{}, false, err
		}
		inRoot := tr.Depth() == 0
		if !found {
			n := min(hole, uint64(esc.MaxBlocks)-uint64(lblk))
			if n == 0 {
				return esc.Extent{}, false, fmt.Errorf("fsprim: lookup of block %d past EXT_MAX_BLOCKS: %w", lblk, ErrInvalid)
			}
			return esc.Extent{Lblk: lblk, Len: uint32(n), Status: esc.Hole}, inRoot, nil
		}
		st := esc.Written
		if e.Unwritten {
			st = esc.Unwritten
		}
		return esc.Extent{Lblk: e.Lblk, Len: e.Len, Pblk: e.Pblk, Status: st}, inRoot, nil
	}
}

// DirectIO is an alloc.MetaIO and an extent.BlockIO writing straight to a
// device, without a journal: alloc.DirectIO plus the BlockIO methods. It
// is safe for concurrent use.
type DirectIO struct {
	*alloc.DirectIO
	bio extent.BlockIO
}

// NewDirectIO returns a DirectIO on dev with the file system's block size.
func NewDirectIO(dev blockdev.Device, blockSize int) *DirectIO {
	return &DirectIO{DirectIO: alloc.NewDirectIO(dev, blockSize), bio: extent.NewDeviceIO(dev, blockSize)}
}

// ReadBlock implements extent.BlockIO.
func (d *DirectIO) ReadBlock(pblk uint64, buf []byte) error { return d.bio.ReadBlock(pblk, buf) }

// WriteBlock implements extent.BlockIO.
func (d *DirectIO) WriteBlock(pblk uint64, buf []byte) error { return d.bio.WriteBlock(pblk, buf) }

var (
	_ alloc.MetaIO   = (*DirectIO)(nil)
	_ extent.BlockIO = (*DirectIO)(nil)
)

// JournalIO is an alloc.MetaIO and an extent.BlockIO over a journal: every
// read sees the newest copy of a block (the running transaction's, then a
// committing or committed one not yet checkpointed, via journal.Lookup,
// then the device); every change goes to the handle of the running
// operation, opened by Begin and closed by End. Changes outside Begin..End
// fail with ErrInvalid. A JournalIO is used by one goroutine at a time
// (one operation at a time); ZeroOut writes the device directly, as
// alloc.MetaIO allows.
type JournalIO struct {
	J   *journal.Journal
	Dev blockdev.Device
	BS  int
	h   *journal.Handle
}

var (
	_ alloc.MetaIO   = (*JournalIO)(nil)
	_ extent.BlockIO = (*JournalIO)(nil)
)

// Begin starts an operation: a journal handle with room for credits
// changed blocks.
func (m *JournalIO) Begin(credits int) error {
	if m.h != nil {
		return fmt.Errorf("fsprim: JournalIO.Begin inside an operation: %w", ErrInvalid)
	}
	h, err := m.J.Start(credits)
	if err != nil {
		return err
	}
	m.h = h
	return nil
}

// End stops the operation's handle; the changes commit with the running
// transaction (journal.Journal.Commit forces that).
func (m *JournalIO) End() error {
	if m.h == nil {
		return nil
	}
	err := m.h.Stop()
	m.h = nil
	return err
}

// Read implements alloc.MetaIO.
func (m *JournalIO) Read(blk uint64) ([]byte, error) {
	b := make([]byte, m.BS)
	return b, m.ReadBlock(blk, b)
}

// GetWrite implements alloc.MetaIO: it declares blk to the handle.
func (m *JournalIO) GetWrite(blk uint64) ([]byte, error) {
	if m.h == nil {
		return nil, fmt.Errorf("fsprim: change of block %d outside JournalIO.Begin/End: %w", blk, ErrInvalid)
	}
	if err := m.h.GetWriteAccess(blk); err != nil {
		return nil, err
	}
	return m.Read(blk)
}

// Dirty implements alloc.MetaIO.
func (m *JournalIO) Dirty(blk uint64, b []byte) error {
	if m.h == nil {
		return fmt.Errorf("fsprim: change of block %d outside JournalIO.Begin/End: %w", blk, ErrInvalid)
	}
	return m.h.Dirty(blk, b)
}

// ZeroOut implements alloc.MetaIO: directly on the device, outside the
// transaction, as alloc.DirectIO zeroes.
func (m *JournalIO) ZeroOut(blk, n uint64) error {
	return alloc.NewDirectIO(m.Dev, m.BS).ZeroOut(blk, n)
}

// ReadBlock implements extent.BlockIO: the newest copy of pblk.
func (m *JournalIO) ReadBlock(pblk uint64, buf []byte) error {
	if len(buf) != m.BS {
		return fmt.Errorf("fsprim: %d-byte buffer for %d-byte blocks: %w", len(buf), m.BS, ErrInvalid)
	}
	if m.J.Lookup(pblk, buf) {
		return nil
	}
	if _, err := m.Dev.ReadAt(buf, int64(pblk)*int64(m.BS)); err != nil {
		return fmt.Errorf("fsprim: read block %d: %w: %w", pblk, errs.ErrIO, err)
	}
	return nil
}

// WriteBlock implements extent.BlockIO: GetWrite and Dirty in one.
func (m *JournalIO) WriteBlock(pblk uint64, buf []byte) error {
	if m.h == nil {
		return fmt.Errorf("fsprim: change of block %d outside JournalIO.Begin/End: %w", pblk, ErrInvalid)
	}
	if err := m.h.GetWriteAccess(pblk); err != nil {
		return err
	}
	return m.h.Dirty(pblk, buf)
}
