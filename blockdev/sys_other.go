//go:build !linux

package blockdev

import (
	"errors"
	"os"
)

// Outside Linux the file backend works with reduced features: the size of
// block devices is unknown (they are refused), Flush is fsync, and ZeroOut
// and Discard write zeroes.

func fdatasync(f *os.File) error { return f.Sync() }

func punchHole(*os.File, int64, int64) error { return errors.ErrUnsupported }

func blockDeviceGeometry(f *os.File) (int64, int, error) {
	return 0, 0, errors.New("block devices are supported on Linux only")
}

func (c *fileCore) zeroOut(off, n int64, write func([]byte, int64) (int, error)) error {
	return writeZeroes(write, off, n)
}

func (c *fileCore) discard(off, n int64, write func([]byte, int64) (int, error)) error {
	return writeZeroes(write, off, n)
}

func dropCache(*os.File, int64, int64) error { return nil }

// openNonblock is O_NONBLOCK on Linux (sys_linux.go).
const openNonblock = 0
