package nbd

import (
	"fmt"

	"github.com/ext4io/ext4io/blockdev"
)

// Errno is an error value of the NBD protocol, as a server returns it in a
// reply. The values happen to equal Linux errno numbers, but the protocol
// fixes them: they are part of the wire format and must not change.
type Errno uint32

// The error values the protocol defines, and EROFS, which some servers
// send as is.
const (
	EPERM     Errno = 1   // operation not permitted (a write to a read-only export)
	EIO       Errno = 5   // input/output error
	ENOMEM    Errno = 12  // out of memory
	EINVAL    Errno = 22  // invalid argument
	ENOSPC    Errno = 28  // no space left on the server's storage
	EROFS     Errno = 30  // read-only file system (not an NBD value)
	EOVERFLOW Errno = 75  // value too large
	ENOTSUP   Errno = 95  // operation not supported
	ESHUTDOWN Errno = 108 // server shutting down
)

func (e Errno) String() string {
	switch e {
	case EPERM:
		return "EPERM"
	case EIO:
		return "EIO"
	case ENOMEM:
		return "ENOMEM"
	case EINVAL:
		return "EINVAL"
	case ENOSPC:
		return "ENOSPC"
	case EROFS:
		return "EROFS"
	case EOVERFLOW:
		return "EOVERFLOW"
	case ENOTSUP:
		return "ENOTSUP"
	case ESHUTDOWN:
		return "ESHUTDOWN"
	}
	return fmt.Sprintf("error %d", uint32(e))
}

// ServerError is an error value the server returned for a request. It wraps
// blockdev.ErrIO and, where one fits, a more precise sentinel:
//
//	EPERM, EROFS  ErrReadOnly (a write or trim on a read-only export)
//	EINVAL        ErrInvalid (a request the server refused as malformed:
//	              after this package's own checks, a client or server bug)
//	ENOTSUP       ErrUnsupported (mkfs, for one, tolerates it from Discard)
//
// ENOSPC deliberately wraps ErrIO only: ext4io's ErrNoSpace promises that
// nothing changed and invites a retry after a commit, while a server out
// of space (thin provisioning) may have applied part of the request, so
// the volume must stop as on any I/O error. Callers that want to tell it
// apart check Errno. Every other value (EIO, ENOMEM, EOVERFLOW, ESHUTDOWN,
// unknown) wraps ErrIO only.
type ServerError struct {
	Cmd   string // "read", "write", "flush", "trim", "write zeroes"
	Off   int64  // offset of the failed request
	Len   int64  // length of the failed request
	Errno Errno
}

func (e *ServerError) Error() string {
	return fmt.Sprintf("server returned %v for %s [%d, +%d)", e.Errno, e.Cmd, e.Off, e.Len)
}

// Unwrap returns ErrIO and the sentinel matching Errno, if any.
func (e *ServerError) Unwrap() []error {
	switch e.Errno {
	case EPERM, EROFS:
		return []error{blockdev.ErrIO, blockdev.ErrReadOnly}
	case EINVAL:
		return []error{blockdev.ErrIO, blockdev.ErrInvalid}
	case ENOTSUP:
		return []error{blockdev.ErrIO, blockdev.ErrUnsupported}
	}
	return []error{blockdev.ErrIO}
}
