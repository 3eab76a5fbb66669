package ext4io

import (
	"syscall"

	"github.com/ext4io/ext4io/internal/errs"
)

// Errors as the os package reports them. Like ErrNotDir, ErrIsDir and
// ErrNotEmpty, each matches the syscall.Errno an os call would fail with,
// so code written against os keeps working: errors.Is(err,
// syscall.ENAMETOOLONG), errors.Is(err, fs.ErrPermission).
var (
	// ErrNameTooLong: a path component is longer than 255 bytes
	// (ENAMETOOLONG).
	ErrNameTooLong = errs.ErrNameTooLong
	// ErrPermission: an operation ext4 never allows, such as a hard link
	// to a directory (EPERM; matches fs.ErrPermission). ext4io does not
	// check owners and permission bits: a Volume acts as root does.
	ErrPermission = errs.ErrPermission
	// ErrBadFile: a write through a File opened read-only, or a read
	// through one opened write-only (EBADF, as os reports it).
	ErrBadFile = errs.ErrBadFile
)

// errLoop: too many symlinks on a path (ELOOP). It matches ErrInvalid too,
// as symlink loops did before they matched ELOOP.
var errLoop error = &errs.Errno{Msg: "too many levels of symbolic links", Errno: syscall.ELOOP, Also: ErrInvalid}

// errFileTooBig: a write, truncate or fallocate that would take a file
// past the largest size its block size allows (EFBIG, as Linux's
// s_maxbytes checks). It matches ErrInvalid too, as such ranges did
// before they matched EFBIG.
var errFileTooBig error = &errs.Errno{Msg: "file too large", Errno: syscall.EFBIG, Also: ErrInvalid}
