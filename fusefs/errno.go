//go:build linux

package fusefs

import (
	"errors"
	"io"
	"io/fs"
	"syscall"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/iomap"
)

// errno maps an ext4io error to the errno Linux's ext4 returns for the
// same condition. The more specific sentinels come first: ErrIsDir and
// ErrNotDir wrap ErrInvalid, a file-too-large error (EFBIG) matches
// ErrInvalid too, ErrTooManyLinks wraps ErrNoSpace and
// ErrNotExt4 matches ErrCorrupt.
func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var en syscall.Errno
	switch {
	case errors.As(err, &en):
		return en
	case errors.Is(err, ext4io.ErrIsDir):
		return syscall.EISDIR
	case errors.Is(err, ext4io.ErrNotDir):
		return syscall.ENOTDIR
	case errors.Is(err, ext4io.ErrTooManyLinks):
		return syscall.EMLINK
	case errors.Is(err, ext4io.ErrNotEmpty):
		return syscall.ENOTEMPTY
	case errors.Is(err, ext4io.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return syscall.ENOENT
	case errors.Is(err, ext4io.ErrExist), errors.Is(err, fs.ErrExist):
		return syscall.EEXIST
	case errors.Is(err, ext4io.ErrNoSpace):
		return syscall.ENOSPC
	case errors.Is(err, ext4io.ErrReadOnly):
		return syscall.EROFS
	case errors.Is(err, ext4io.ErrNoAttr):
		return syscall.ENODATA
	case errors.Is(err, ext4io.ErrRange):
		return syscall.ERANGE
	case errors.Is(err, iomap.ErrNoData):
		return syscall.ENXIO
	case errors.Is(err, ext4io.ErrCorrupt):
		return syscall.EUCLEAN // Linux's EFSCORRUPTED
	case errors.Is(err, ext4io.ErrUnsupported):
		return syscall.EOPNOTSUPP
	case errors.Is(err, ext4io.ErrBusy):
		return syscall.EBUSY
	case errors.Is(err, ext4io.ErrClosed), errors.Is(err, fs.ErrClosed):
		return syscall.EBADF
	case errors.Is(err, syscall.EFBIG):
		return syscall.EFBIG // past the largest file size; it matches ErrInvalid too
	case errors.Is(err, ext4io.ErrInvalid):
		return syscall.EINVAL
	case errors.Is(err, io.EOF):
		return 0
	}
	return syscall.EIO
}
