// Package errs holds the sentinel errors shared by every ext4io package and
// the CorruptError type that carries the location of bad metadata (which
// ext4io.CorruptError and layout.CorruptError mirror; see AddTwin).
//
// The sentinels are re-exported by the public packages (ext4io.ErrCorrupt is
// errs.ErrCorrupt, and so on), so errors.Is works whichever package a caller
// imports.
package errs

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
)

var (
	// ErrCorrupt is returned when on-disk metadata fails a magic, checksum,
	// range or structural check.
	ErrCorrupt = errors.New("ext4: corrupt metadata")
	// ErrNoSpace is returned when an allocation cannot be satisfied. Nothing
	// was changed when it is returned. It matches syscall.ENOSPC.
	ErrNoSpace error = &Errno{Msg: "no space left on device", Errno: syscall.ENOSPC}
	// ErrReadOnly is returned for a write to a volume or device opened
	// read-only, or one turned read-only after an error. It matches
	// syscall.EROFS.
	ErrReadOnly error = &Errno{Msg: "read-only file system", Errno: syscall.EROFS}
	// ErrUnsupported is returned for a feature or operation ext4io does not
	// implement (for example an unknown incompat feature flag).
	ErrUnsupported = errors.New("ext4: unsupported")
	// ErrIO wraps an error from the underlying device.
	ErrIO = errors.New("ext4: I/O error")
	// ErrInvalid (which matches fs.ErrInvalid and syscall.EINVAL) is
	// returned for arguments that can never succeed: negative or
	// overflowing offsets, misaligned direct I/O, bad options.
	ErrInvalid error = &Errno{Msg: "invalid argument", Errno: syscall.EINVAL, Also: fs.ErrInvalid}
	// ErrNotFound (which matches fs.ErrNotExist and syscall.ENOENT) is
	// returned when a path or inode does not exist.
	ErrNotFound error = &Errno{Msg: "no such file or directory", Errno: syscall.ENOENT}
	// ErrClosed (which matches fs.ErrClosed) is returned by operations on a closed object.
	// Its message is fs.ErrClosed's, as os's: "read f: file already closed".
	ErrClosed = fmt.Errorf("%w", fs.ErrClosed)
	// ErrExist (which matches fs.ErrExist and syscall.EEXIST) is returned
	// when a name to be created already exists.
	ErrExist error = &Errno{Msg: "file exists", Errno: syscall.EEXIST}
	// ErrNotDir matches syscall.ENOTDIR: a path component or a directory
	// operation's target is not a directory.
	ErrNotDir error = &Errno{Msg: "not a directory", Errno: syscall.ENOTDIR}
	// ErrIsDir matches syscall.EISDIR: a file operation named a directory.
	ErrIsDir error = &Errno{Msg: "is a directory", Errno: syscall.EISDIR}
	// ErrNotEmpty matches syscall.ENOTEMPTY: a directory to be removed or
	// replaced has entries.
	ErrNotEmpty error = &Errno{Msg: "directory not empty", Errno: syscall.ENOTEMPTY}
	// ErrNameTooLong matches syscall.ENAMETOOLONG: a path component is
	// longer than 255 bytes.
	ErrNameTooLong error = &Errno{Msg: "file name too long", Errno: syscall.ENAMETOOLONG}
	// ErrPermission matches fs.ErrPermission and syscall.EPERM: an
	// operation the file system never allows (a hard link to a directory).
	ErrPermission error = &Errno{Msg: "operation not permitted", Errno: syscall.EPERM}
	// ErrBadFile matches syscall.EBADF: a write to a File opened read-only,
	// or a read from one opened write-only, as os reports it.
	ErrBadFile error = &Errno{Msg: "bad file descriptor", Errno: syscall.EBADF}
	// ErrBusy is returned when a writable open finds the image in use: held
	// by another writer (in this process or another), mounted by Linux, or
	// in use by another node (multiple mount protection). It matches
	// syscall.EBUSY.
	ErrBusy error = &Errno{Msg: "device or resource busy", Errno: syscall.EBUSY}
	// ErrNotExt4 is returned when a device holds no ext4 file system: bad
	// superblock magic, or too small to hold a superblock. The error also
	// matches ErrCorrupt (it is a *CorruptError wrapping ErrNotExt4):
	// wiped or damaged ext4 and other bytes cannot be told apart, and
	// callers that treat a bad superblock as corruption keep working.
	ErrNotExt4 = errors.New("ext4: not an ext4 file system")
)

// Errno is a sentinel error that matches a syscall.Errno as the os
// package's errors do: errors.Is(err, syscall.ENOTDIR) holds for an error
// wrapping ErrNotDir, and so does errors.Is(err, fs.ErrNotExist) for one
// wrapping ErrNotFound (through syscall.Errno's own Is). Its message is the
// Errno's, without a prefix: it is always wrapped in an error (usually an
// *fs.PathError) that names the operation.
type Errno struct {
	Msg   string
	Errno syscall.Errno
	Also  error // another error it matches (fs.ErrInvalid), or nil
}

func (e *Errno) Error() string { return e.Msg }

// Is reports whether target is e's Errno or an error the Errno matches.
func (e *Errno) Is(target error) bool {
	return target == e.Errno || e.Errno.Is(target) || (e.Also != nil && target == e.Also)
}

// CorruptError describes corrupt metadata and where it was found. It wraps
// ErrCorrupt (and Err, when set).
type CorruptError struct {
	What  string // the structure: "superblock", "extent block", "inode", ...
	Ino   uint32 // inode the structure belongs to, 0 if none
	Block uint64 // filesystem block holding it, 0 if unknown
	Off   int    // byte offset within the block, -1 if not meaningful
	Msg   string // what is wrong
	Err   error  // optional underlying cause
}

func (e *CorruptError) Error() string {
	s := "ext4: corrupt " + e.What
	if e.Ino != 0 {
		s += fmt.Sprintf(" (inode %d)", e.Ino)
	}
	s += ": " + e.Msg
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	if e.Block != 0 {
		s += fmt.Sprintf(" in block %d", e.Block)
		if e.Off >= 0 {
			s += fmt.Sprintf(" at byte %#x", e.Off)
		}
	}
	return s
}

// Unwrap returns ErrCorrupt and the underlying cause.
func (e *CorruptError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrCorrupt, e.Err}
	}
	return []error{ErrCorrupt}
}

// twins are the conversions to CorruptError's public twins (AddTwin).
// They are appended by init functions only, so they need no lock.
var twins []func(e *CorruptError, target any) bool

// AddTwin registers T, a public package's copy of CorruptError (the same
// fields, declared where go doc shows them to that package's callers),
// so that errors.As(err, &t) with t of type *T finds a *CorruptError in
// err's chain, whichever package produced it: conv converts the pointer,
// a conversion between the two struct types that compiles only while
// their fields agree. Call it from an init function.
func AddTwin[T any](conv func(*CorruptError) *T) {
	twins = append(twins, func(e *CorruptError, target any) bool {
		p, ok := target.(**T)
		if ok {
			*p = conv(e)
		}
		return ok
	})
}

// As lets errors.As fill a pointer to one of the twins registered with
// AddTwin: it sets *target to e seen as that type.
func (e *CorruptError) As(target any) bool {
	for _, as := range twins {
		if as(e, target) {
			return true
		}
	}
	return false
}

// Corruptf returns a *CorruptError for structure what at block (byte offset
// off, -1 for none).
func Corruptf(what string, block uint64, off int, format string, args ...any) error {
	return &CorruptError{What: what, Block: block, Off: off, Msg: fmt.Sprintf(format, args...)}
}

// Join returns nil if every err is nil, the error itself if one is not,
// and otherwise one error for them all whose message is one line: how
// many failed and the first one's message. errors.Is and errors.As look
// at every error, first to last, as for errors.Join; errors Join made
// among errs count one by one.
func Join(errs ...error) error {
	var all []error
	for _, err := range errs {
		if m, ok := err.(*multiError); ok {
			all = append(all, m.errs...)
		} else if err != nil {
			all = append(all, err)
		}
	}
	switch len(all) {
	case 0:
		return nil
	case 1:
		return all[0]
	}
	return &multiError{all}
}

type multiError struct{ errs []error }

func (e *multiError) Error() string {
	return fmt.Sprintf("%d errors, the first: %v", len(e.errs), e.errs[0])
}

func (e *multiError) Unwrap() []error { return e.errs }
