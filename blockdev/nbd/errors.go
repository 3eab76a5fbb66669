package nbd

import (
	"fmt"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/internal/errs"
)

// ServerError is an error value the server returned for a request. It wraps
// blockdev.ErrIO and, where one fits, a more precise sentinel:
//
//	EPERM, EROFS  ErrReadOnly (a write or trim on a read-only export)
//	ENOSPC        ErrNoSpace (the server's storage is full; part of the
//	              request may have been applied, unlike the file-system
//	              ErrNoSpace, which promises nothing changed)
//	EINVAL        ErrInvalid (a request the server refused as malformed:
//	              after this package's own checks, a client or server bug)
//	ENOTSUP       ErrUnsupported
//
// Every other value (EIO, ENOMEM, EOVERFLOW, ESHUTDOWN, unknown) wraps
// ErrIO only.
type ServerError struct {
	Cmd   string // "read", "write", "flush", "trim", "write zeroes"
	Off   int64  // offset of the failed request
	Len   int64  // length of the failed request
	Errno uint32 // the NBD error value (NBD_EIO is 5, and so on)
}

func (e *ServerError) Error() string {
	return fmt.Sprintf("server returned %s for %s [%d, +%d)", errnoName(e.Errno), e.Cmd, e.Off, e.Len)
}

// Unwrap returns ErrIO and the sentinel matching Errno, if any.
func (e *ServerError) Unwrap() []error {
	switch e.Errno {
	case errPerm, errROFS:
		return []error{blockdev.ErrIO, blockdev.ErrReadOnly}
	case errNoSpc:
		return []error{blockdev.ErrIO, errs.ErrNoSpace}
	case errInval:
		return []error{blockdev.ErrIO, blockdev.ErrInvalid}
	case errNotSup:
		return []error{blockdev.ErrIO, blockdev.ErrUnsupported}
	}
	return []error{blockdev.ErrIO}
}
