package blockdev

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// openNonblock is added to every open: a named pipe given as an image
// then fails init's type check at once instead of blocking open(2) until
// a writer comes. Regular files and block devices ignore it.
const openNonblock = unix.O_NONBLOCK

func fdatasync(f *os.File) error {
	return control(f, func(fd int) error { return ignoringEINTR(func() error { return unix.Fdatasync(fd) }) })
}

func blockDeviceGeometry(f *os.File) (size int64, lbs int, err error) {
	err = control(f, func(fd int) error {
		sz, err := unix.IoctlGetUint64(fd, unix.BLKGETSIZE64)
		if err != nil {
			return err
		}
		l, err := unix.IoctlGetInt(fd, unix.BLKSSZGET)
		if err != nil {
			return err
		}
		size, lbs = int64(sz), l
		return nil
	})
	return size, lbs, err
}

func ignoringEINTR(fn func() error) error {
	for {
		if err := fn(); err != unix.EINTR {
			return err
		}
	}
}

// ioctlRange issues a block-device ioctl taking a {start, length} pair of
// uint64 byte offsets (BLKZEROOUT, BLKDISCARD). This and alignedAddr are
// the package's only uses of unsafe: the kernel interface needs a pointer.
func ioctlRange(f *os.File, req uint, off, n int64) error {
	r := [2]uint64{uint64(off), uint64(n)}
	return control(f, func(fd int) error {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(unsafe.Pointer(&r)))
		if e != 0 {
			return e
		}
		return nil
	})
}

func fallocate(f *os.File, mode uint32, off, n int64) error {
	return control(f, func(fd int) error {
		return ignoringEINTR(func() error { return unix.Fallocate(fd, mode, off, n) })
	})
}

// punchHole deallocates [off, off+n) of regular file f (it reads as
// zeroes); an error wrapping errors.ErrUnsupported where f's file system
// cannot.
func punchHole(f *os.File, off, n int64) error {
	err := fallocate(f, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	if err != nil && unsupported(err) {
		return fmt.Errorf("fallocate(PUNCH_HOLE): %w: %w", errors.ErrUnsupported, err)
	}
	return err
}

// unsupported reports whether err says the file or device cannot do the
// requested fallocate or ioctl at all (as opposed to failing at it).
func unsupported(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.ENOTTY)
}

// zeroOut zeroes [off, off+n), already validated; write writes through the
// device (for edges and the write-zeroes fallback).
func (c *fileCore) zeroOut(off, n int64, write func([]byte, int64) (int, error)) error {
	if c.blk {
		return c.blockRange(unix.BLKZEROOUT, "BLKZEROOUT", off, n, write, true)
	}
	for {
		switch mode := c.zeroMode.Load(); mode {
		case zeroUnknown, zeroRange:
			err := fallocate(c.f, unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, off, n)
			if err == nil {
				c.zeroMode.Store(zeroRange)
				return nil
			}
			if !unsupported(err) {
				return c.ioErr("fallocate(ZERO_RANGE)", off, err)
			}
			c.zeroMode.CompareAndSwap(mode, zeroPunch)
		case zeroPunch:
			err := punchHole(c.f, off, n)
			if err == nil {
				return nil
			}
			if !errors.Is(err, errors.ErrUnsupported) {
				return c.ioErr("fallocate(PUNCH_HOLE)", off, err)
			}
			c.zeroMode.CompareAndSwap(mode, zeroWrite)
		default:
			return writeZeroes(write, off, n)
		}
	}
}

// discard releases [off, off+n), already validated.
func (c *fileCore) discard(off, n int64, write func([]byte, int64) (int, error)) error {
	if c.blk {
		return c.blockRange(unix.BLKDISCARD, "BLKDISCARD", off, n, write, false)
	}
	if c.zeroMode.Load() != zeroWrite {
		err := punchHole(c.f, off, n)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errors.ErrUnsupported) {
			return c.ioErr("fallocate(PUNCH_HOLE)", off, err)
		}
	}
	// Holes are not supported: keep the documented "reads zeroes".
	return c.zeroOut(off, n, write)
}

// blockRange issues req on the logical blocks of a block device that
// [off, off+n) covers entirely. With zero set, partial edge blocks are
// written with zeroes, and an unsupported ioctl falls back to writing zeroes;
// otherwise (discard) edges are skipped and an unsupported ioctl is a no-op.
func (c *fileCore) blockRange(req uint, name string, off, n int64, write func([]byte, int64) (int, error), zero bool) error {
	lbs := int64(c.lbs)
	a, b := alignUp(off, lbs), alignDown(off+n, lbs)
	if a >= b {
		if zero {
			return writeZeroes(write, off, n)
		}
		return nil
	}
	if zero && a > off {
		if err := writeZeroes(write, off, a-off); err != nil {
			return err
		}
	}
	if err := ioctlRange(c.f, req, a, b-a); err != nil {
		if !unsupported(err) {
			return c.ioErr(name, a, err)
		}
		if zero {
			if err := writeZeroes(write, a, b-a); err != nil {
				return err
			}
		}
	}
	if zero && off+n > b {
		return writeZeroes(write, b, off+n-b)
	}
	return nil
}

// dropCache drops the clean page-cache pages of [off, off+n).
func dropCache(f *os.File, off, n int64) error {
	return control(f, func(fd int) error { return unix.Fadvise(fd, off, n, unix.FADV_DONTNEED) })
}
