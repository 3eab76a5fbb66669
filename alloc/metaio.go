package alloc

import (
	"fmt"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/internal/errs"
)

// MetaIO is how the allocator reads and changes metadata blocks (bitmaps
// and descriptor blocks). A journaled implementation declares each block
// to the running transaction in GetWrite and logs it in Dirty.
//
// Implementations must be safe for concurrent use on different blocks;
// the allocator never uses one block from two goroutines at once.
type MetaIO interface {
	// Read returns the contents of block blk. The caller does not
	// modify the slice.
	Read(blk uint64) ([]byte, error)
	// GetWrite returns block blk for modification (jbd2's
	// get_write_access). The caller changes the returned slice and then
	// calls Dirty with it.
	GetWrite(blk uint64) ([]byte, error)
	// Dirty records b, obtained from GetWrite(blk), as blk's new contents.
	// The caller does not use b afterwards: an implementation may keep it.
	Dirty(blk uint64, b []byte) error
	// ZeroOut zeroes n blocks from blk directly on the device, outside
	// any transaction (used for inode tables no metadata references yet,
	// as the kernel's ext4_init_inode_table does), leaving them written
	// (allocated in an image file), and makes the zeroes durable before it
	// returns: a fast commit written later without a preflush relies on
	// them.
	ZeroOut(blk, n uint64) error
}

// MetaUpdater is implemented by a MetaIO that can change a block in place:
// Update calls fn with blk's current contents, to be changed, and records
// the result as with GetWrite and Dirty, without copying the block twice.
// fn must not call the MetaIO. The Allocator uses it when available.
type MetaUpdater interface {
	Update(blk uint64, fn func(b []byte)) error
}

// updateBlock changes block blk with fn through io: in place with
// MetaUpdater, else with GetWrite and Dirty.
func updateBlock(io MetaIO, blk uint64, fn func(b []byte)) error {
	if u, ok := io.(MetaUpdater); ok {
		return u.Update(blk, fn)
	}
	buf, err := io.GetWrite(blk)
	if err != nil {
		return err
	}
	fn(buf)
	return io.Dirty(blk, buf)
}

// DirectIO is a MetaIO writing straight to a device, without a journal.
// It is safe for concurrent use.
type DirectIO struct {
	dev blockdev.Device
	bs  int
}

var _ MetaIO = (*DirectIO)(nil)

// NewDirectIO returns a MetaIO on dev with the given filesystem block size.
func NewDirectIO(dev blockdev.Device, blockSize int) *DirectIO {
	return &DirectIO{dev: dev, bs: blockSize}
}

// Read implements MetaIO.
func (d *DirectIO) Read(blk uint64) ([]byte, error) {
	b := make([]byte, d.bs)
	if _, err := d.dev.ReadAt(b, int64(blk)*int64(d.bs)); err != nil {
		return nil, fmt.Errorf("alloc: read block %d: %w: %w", blk, errs.ErrIO, err)
	}
	return b, nil
}

// GetWrite implements MetaIO.
func (d *DirectIO) GetWrite(blk uint64) ([]byte, error) { return d.Read(blk) }

// Dirty implements MetaIO.
func (d *DirectIO) Dirty(blk uint64, b []byte) error {
	if _, err := d.dev.WriteAt(b, int64(blk)*int64(d.bs)); err != nil {
		return fmt.Errorf("alloc: write block %d: %w: %w", blk, errs.ErrIO, err)
	}
	return nil
}

// ZeroOut implements MetaIO.
func (d *DirectIO) ZeroOut(blk, n uint64) error {
	// Written zeroes, not the device's ZeroOut: in an image file that
	// leaves the blocks unallocated or unwritten in the host file system,
	// and each later write of an inode table block would allocate or
	// convert it there.
	if err := blockdev.WriteZeroes(d.dev, int64(blk)*int64(d.bs), int64(n)*int64(d.bs)); err != nil {
		return fmt.Errorf("alloc: zero blocks %d+%d: %w", blk, n, err)
	}
	if err := d.dev.Flush(); err != nil {
		return fmt.Errorf("alloc: zero blocks %d+%d: flush: %w", blk, n, err)
	}
	return nil
}
