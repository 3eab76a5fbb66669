// Package errs holds the sentinel errors shared by every ext4io package and
// the CorruptError type that carries the location of bad metadata.
//
// The sentinels are re-exported by the public packages (ext4io.ErrCorrupt is
// errs.ErrCorrupt, and so on), so errors.Is works whichever package a caller
// imports.
package errs

import (
	"errors"
	"fmt"
	"io/fs"
)

var (
	// ErrCorrupt is returned when on-disk metadata fails a magic, checksum,
	// range or structural check.
	ErrCorrupt = errors.New("ext4: corrupt metadata")
	// ErrNoSpace is returned when an allocation cannot be satisfied. Nothing
	// was changed when it is returned.
	ErrNoSpace = errors.New("ext4: no space left on device")
	// ErrReadOnly is returned for a write to a volume or device opened
	// read-only, or one turned read-only after an error.
	ErrReadOnly = errors.New("ext4: read-only")
	// ErrUnsupported is returned for a feature or operation ext4io does not
	// implement (for example an unknown incompat feature flag).
	ErrUnsupported = errors.New("ext4: unsupported")
	// ErrIO wraps an error from the underlying device.
	ErrIO = errors.New("ext4: I/O error")
	// ErrInvalid (which matches fs.ErrInvalid) is returned for arguments that can never succeed:
	// negative or overflowing offsets, misaligned direct I/O, bad options.
	ErrInvalid = fmt.Errorf("ext4: %w", fs.ErrInvalid)
	// ErrNotFound (which matches fs.ErrNotExist) is returned when a path or inode does not exist.
	ErrNotFound = fmt.Errorf("ext4: %w", fs.ErrNotExist)
	// ErrClosed (which matches fs.ErrClosed) is returned by operations on a closed object.
	ErrClosed = fmt.Errorf("ext4: %w", fs.ErrClosed)
	// ErrExist is returned when a name to be created already exists.
	ErrExist = fmt.Errorf("ext4: %w", fs.ErrExist)
	// ErrBusy is returned when a writable open finds the image in use: held
	// by another writer (in this process or another) or mounted by Linux.
	ErrBusy = errors.New("ext4: device busy")
	// ErrNotExt4 is returned when a device holds no ext4 file system: bad
	// superblock magic, or too small to hold a superblock. The error also
	// matches ErrCorrupt (it is a *CorruptError wrapping ErrNotExt4):
	// wiped or damaged ext4 and other bytes cannot be told apart, and
	// callers that treat a bad superblock as corruption keep working.
	ErrNotExt4 = errors.New("ext4: not an ext4 file system")
)

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

// Corruptf returns a *CorruptError for structure what at block (byte offset
// off, -1 for none).
func Corruptf(what string, block uint64, off int, format string, args ...any) error {
	return &CorruptError{What: what, Block: block, Off: off, Msg: fmt.Sprintf(format, args...)}
}
