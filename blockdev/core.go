package blockdev

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync/atomic"

	"github.com/ext4io/ext4io/blockdev/internal/devutil"
)

// zeroMode records how a regular file's ZeroOut is carried out, probed on
// the first call and cached.
const (
	zeroUnknown int32 = iota // nothing tried yet: start with zero-range
	zeroRange                // fallocate(ZERO_RANGE|KEEP_SIZE) works
	zeroPunch                // zero-range refused; fallocate(PUNCH_HOLE|KEEP_SIZE) works
	zeroWrite                // both refused: write zeroes
)

// fileCore is the state File and Direct share: an open descriptor on a
// regular file or block device whose size and logical block size were read
// at open. Every field but closed and zeroMode is immutable after open.
type fileCore struct {
	f     *os.File
	path  string
	label string // "blockdev: " + path, for error messages
	size  int64
	lbs   int
	blk   bool // a block device, not a regular file
	ro    bool

	closed   atomic.Bool
	zeroMode atomic.Int32 // one of the zero* constants; files only
	noDsync  atomic.Bool  // the kernel refused RWF_DSYNC: WriteAtSync writes and flushes
}

func (c *fileCore) Size() int64           { return c.size }
func (c *fileCore) LogicalBlockSize() int { return c.lbs }

func (c *fileCore) name() string { return c.label }

// ioErr wraps an error from the OS with the operation and offset. An error
// caused by a concurrent Close becomes ErrClosed.
func (c *fileCore) ioErr(op string, off int64, err error) error {
	if errors.Is(err, os.ErrClosed) {
		return devutil.Closed("blockdev", c.path)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("blockdev: %s %s at %d: %w: %w", op, c.path, off, ErrIO, err)
}

// checkWrite validates a modification of [off, off+n).
func (c *fileCore) checkWrite(what string, off, n int64) error {
	if c.closed.Load() {
		return devutil.Closed("blockdev", c.path)
	}
	if c.ro {
		return devutil.ReadOnly("blockdev", c.path)
	}
	return devutil.CheckRange(c.name(), what, off, n, c.size)
}

// flush makes completed writes durable.
func (c *fileCore) flush() error {
	if c.closed.Load() {
		return devutil.Closed("blockdev", c.path)
	}
	if err := fdatasync(c.f); err != nil {
		return c.ioErr("fdatasync", 0, err)
	}
	return nil
}

// writeSync writes p at off with one durable write (pwritev2 with
// RWF_DSYNC) where the kernel has it, else with write and a flush. The
// first refusal (EOPNOTSUPP, ENOSYS, or EINVAL where the plain write then
// succeeds) is remembered.
func (c *fileCore) writeSync(p []byte, off int64, write func([]byte, int64) (int, error)) (int, error) {
	if err := c.checkWrite("write", off, int64(len(p))); err != nil {
		return 0, err
	}
	if !c.noDsync.Load() {
		n, err := c.pwriteDsync(p, off)
		if !errors.Is(err, errNoDsync) {
			if err != nil {
				return n, c.ioErr("pwritev2(RWF_DSYNC)", off+int64(n), err)
			}
			return n, nil
		}
		if _, isInval := err.(invalDsync); !isInval {
			c.noDsync.Store(true)
		}
		n, err = write(p, off)
		if err != nil {
			return n, err
		}
		c.noDsync.Store(true)
		return n, c.flush()
	}
	n, err := write(p, off)
	if err != nil {
		return n, err
	}
	return n, c.flush()
}

func (c *fileCore) close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return devutil.Closed("blockdev", c.path)
	}
	if err := c.f.Close(); err != nil {
		return c.ioErr("close", 0, err)
	}
	return nil
}

// control runs fn on the descriptor of f, holding a reference that keeps a
// concurrent Close from recycling the descriptor number.
func control(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// zeroBuf is a shared, never-written buffer of zeroes for ZeroOut
// fallbacks and WriteZeroes, page-aligned so that Direct takes it without
// a bounce copy.
var zeroBuf = alignedBuf(256<<10, 4096)

// WriteZeroes writes zeroes to [off, off+n) of dev with ordinary writes
// (what ZeroOut falls back to where the device has no zeroing command).
// Unlike ZeroOut on a regular file, which leaves the range unwritten in
// the host file system (FALLOC_FL_ZERO_RANGE), it leaves the blocks
// allocated and written there too.
func WriteZeroes(dev Device, off, n int64) error { return writeZeroes(dev.WriteAt, off, n) }

// writeZeroes writes n zero bytes at off through write, in chunks.
func writeZeroes(write func(p []byte, off int64) (int, error), off, n int64) error {
	for n > 0 {
		c := min(n, int64(len(zeroBuf)))
		if _, err := write(zeroBuf[:c], off); err != nil {
			return err
		}
		off += c
		n -= c
	}
	return nil
}

func alignDown(v, a int64) int64 { return v - v%a }
func alignUp(v, a int64) int64 {
	if r := v % a; r != 0 {
		return v + a - r
	}
	return v
}
