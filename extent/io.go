package extent

import (
	"errors"
	"fmt"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/internal/errs"
)

// BlockIO reads and writes whole tree blocks (and indirect blocks).
//
// The tree calls ReadBlock when it first needs a block and WriteBlock once
// per changed or new block at the end of a successful mutation, always with
// the block's complete new contents (checksum tail included). A journaling
// implementation logs WriteBlock's bytes in its running transaction instead
// of writing in place; later ReadBlock calls must then return those bytes.
// Blocks the tree stops using are reported through Allocator.FreeTreeBlock,
// where a journal can revoke them. buf is only valid during the call.
// Calls for one Tree are serialized by the Tree; an implementation shared
// by several trees must be safe for concurrent use.
type BlockIO interface {
	ReadBlock(pblk uint64, buf []byte) error
	WriteBlock(pblk uint64, buf []byte) error
}

// NewDeviceIO returns a BlockIO that reads and writes blocks of blockSize
// bytes directly on dev (block n at byte n*blockSize). It is safe for
// concurrent use when dev is. Errors wrap ErrIO.
func NewDeviceIO(dev blockdev.Device, blockSize int) BlockIO {
	return deviceIO{dev: dev, bs: blockSize}
}

type deviceIO struct {
	dev blockdev.Device
	bs  int
}

func (d deviceIO) check(pblk uint64, buf []byte) (int64, error) {
	if len(buf) != d.bs {
		return 0, invalidf("buffer of %d bytes for %d-byte blocks", len(buf), d.bs)
	}
	if pblk > uint64(d.dev.Size())/uint64(d.bs) {
		return 0, fmt.Errorf("extent: block %d beyond device end: %w", pblk, ErrIO)
	}
	return int64(pblk) * int64(d.bs), nil
}

func (d deviceIO) ReadBlock(pblk uint64, buf []byte) error {
	off, err := d.check(pblk, buf)
	if err != nil {
		return err
	}
	if _, err := d.dev.ReadAt(buf, off); err != nil {
		return ioErr("read", pblk, err)
	}
	return nil
}

func (d deviceIO) WriteBlock(pblk uint64, buf []byte) error {
	off, err := d.check(pblk, buf)
	if err != nil {
		return err
	}
	if _, err := d.dev.WriteAt(buf, off); err != nil {
		return ioErr("write", pblk, err)
	}
	return nil
}

func ioErr(op string, pblk uint64, err error) error {
	if errors.Is(err, ErrIO) {
		return fmt.Errorf("extent: %s block %d: %w", op, pblk, err)
	}
	return fmt.Errorf("extent: %s block %d: %w: %w", op, pblk, ErrIO, err)
}

// Allocator supplies and takes back blocks for a Tree's mutations.
//
// Every tree block allocated or freed goes through it, so the caller keeps
// i_blocks (and the bitmaps) up to date from these calls alone. Data blocks
// a Remove unmaps are handed to FreeData. Free calls happen only after the
// mutation's blocks were written; AllocTreeBlock calls of a mutation that
// then fails are undone with FreeTreeBlock.
type Allocator interface {
	// AllocTreeBlock returns a free block for a tree node, preferably near
	// goal (0: no preference). It returns an error wrapping ErrNoSpace when
	// none is free; with mustSucceed set it may draw on blocks reserved for
	// operations that cannot fail (I/O completion), as ext4 does with its
	// reserved clusters.
	AllocTreeBlock(goal uint64, mustSucceed bool) (uint64, error)
	// FreeTreeBlock returns a tree block no longer used.
	FreeTreeBlock(pblk uint64) error
	// FreeData returns n data blocks starting at pblk unmapped by Remove.
	FreeData(pblk, n uint64) error
}

// Config describes the inode and filesystem a Tree belongs to.
type Config struct {
	BlockSize      int    // filesystem block size: 1024..65536, a power of two
	Ino            uint32 // inode number, for error messages
	Seed           uint32 // inode checksum seed (InodeSeed), used when Csum
	Csum           bool   // metadata_csum: verify and write ext4_extent_tail
	FirstDataBlock uint64 // s_first_data_block: lowest valid physical block
	BlocksCount    uint64 // s_blocks_count: one past the highest valid block
	// SystemZone, when set, reports whether the n blocks at pblk overlap
	// file-system metadata this inode must not map (superblocks,
	// descriptors, bitmaps, inode tables, the journal: Linux's
	// block_validity). Extents, index entries and indirect pointers that
	// do are corrupt when decoded; Insert and new tree blocks refuse them.
	SystemZone func(pblk, n uint64) bool
	IO         BlockIO
	// Alloc is needed by mutations only.
	Alloc Allocator
	// Goal is the allocation goal for the first tree block when the tree
	// has no extent to place it near (usually the inode's group start).
	Goal uint64
	// ZeroOut, when set, writes zeroes to n blocks at pblk; MarkWritten
	// uses it for unwritten pieces of at most ZeroOutMax blocks instead of
	// splitting them off (ext4's extent_max_zeroout_kb, 32 KiB by default).
	ZeroOut    func(pblk, n uint64) error
	ZeroOutMax uint32
	// EOFBlock, when set, returns the first logical block past the end of
	// the file; MarkWritten zeroes out only extents ending at or before it
	// (e2fsck rejects written extents past EOF).
	EOFBlock func() uint64
	// MaxEntries, when nonzero, caps eh_max of new tree blocks (a test mode
	// like the kernel's AGGRESSIVE_TEST: small nodes make deep trees; e2fsck
	// rejects blocks with eh_max below (blockSize-12)/12-2). At least 4.
	MaxEntries int
}

// blockCap returns eh_max of a full-size tree block.
func (c *Config) blockCap() int { return (c.BlockSize - HeaderSize) / EntrySize }

// newCap returns eh_max for new tree blocks.
func (c *Config) newCap() int {
	if c.MaxEntries != 0 {
		return c.MaxEntries
	}
	return c.blockCap()
}

func (c *Config) validate() error {
	bs := c.BlockSize
	if bs < 1024 || bs > 65536 || bs&(bs-1) != 0 {
		return invalidf("block size %d", bs)
	}
	if c.MaxEntries != 0 && (c.MaxEntries < RootMax || c.MaxEntries > c.blockCap()) {
		return invalidf("MaxEntries %d not in [3, %d]", c.MaxEntries, c.blockCap())
	}
	if c.BlocksCount <= c.FirstDataBlock {
		return invalidf("BlocksCount %d <= FirstDataBlock %d", c.BlocksCount, c.FirstDataBlock)
	}
	return nil
}

// pblkOK reports whether [p, p+n) lies within the filesystem's data area.
func (c *Config) pblkOK(p, n uint64) bool {
	return p >= c.FirstDataBlock && p < c.BlocksCount && n <= c.BlocksCount-p
}

// inSystemZone reports whether [p, p+n) overlaps the system zone.
func (c *Config) inSystemZone(p, n uint64) bool {
	return c.SystemZone != nil && c.SystemZone(p, n)
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("extent: "+format+": %w", append(args, ErrInvalid)...)
}

func (c *Config) corrupt(block uint64, off int, format string, args ...any) error {
	return &errs.CorruptError{What: "extent tree", Ino: c.Ino, Block: block, Off: off, Msg: fmt.Sprintf(format, args...)}
}
