// Package devutil holds the argument checks shared by the blockdev backends,
// so every backend rejects the same bad offsets with the same errors.
package devutil

import (
	"fmt"
	"io"

	"github.com/ext4io/ext4io/internal/errs"
)

// ClipRead validates a read of n bytes at off on a device of size bytes and
// returns how many bytes can be read and the error to return after them:
// nil, or io.EOF when the read runs past the end. A negative off is an
// error wrapping errs.ErrInvalid.
func ClipRead(op string, off int64, n int, size int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("%s: read at negative offset %d: %w", op, off, errs.ErrInvalid)
	}
	if off >= size {
		if n == 0 && off == size {
			return 0, nil
		}
		return 0, io.EOF
	}
	if rem := size - off; int64(n) > rem {
		return int(rem), io.EOF
	}
	return n, nil
}

// CheckRange validates that [off, off+n) lies inside a device of size bytes,
// without overflowing. what names the operation for the error message.
func CheckRange(op, what string, off, n, size int64) error {
	if off < 0 || n < 0 || off > size || n > size-off {
		return fmt.Errorf("%s: %s [%d, +%d) outside device of %d bytes: %w", op, what, off, n, size, errs.ErrInvalid)
	}
	return nil
}

// Closed returns the error for an operation on a closed device.
func Closed(op, what string) error {
	return fmt.Errorf("%s: %s: %w", op, what, errs.ErrClosed)
}

// ReadOnly returns the error for a modification of a read-only device.
func ReadOnly(op, what string) error {
	return fmt.Errorf("%s: %s: %w", op, what, errs.ErrReadOnly)
}
