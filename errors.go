package ext4io

import "github.com/ext4io/ext4io/internal/errs"

// Sentinel errors. Every error ext4io returns for one of these conditions
// wraps the matching sentinel (test with errors.Is) and says which
// structure, block or inode it concerns. The same values are re-exported by
// the lower packages, so errors.Is works whichever package produced them.
var (
	// ErrCorrupt: on-disk metadata failed a magic, checksum, range or
	// structural check. The error is (or wraps) a *CorruptError.
	ErrCorrupt = errs.ErrCorrupt
	// ErrNoSpace: no free blocks or inodes for the request; nothing changed.
	ErrNoSpace = errs.ErrNoSpace
	// ErrReadOnly: a write to a read-only volume, device or file.
	ErrReadOnly = errs.ErrReadOnly
	// ErrUnsupported: a feature ext4io does not implement, such as an
	// unknown incompat feature flag; the message names it.
	ErrUnsupported = errs.ErrUnsupported
	// ErrIO: the device failed; the device's own error is wrapped too.
	ErrIO = errs.ErrIO
	// ErrInvalid: an argument that can never succeed (negative offset,
	// misaligned direct I/O, bad option).
	ErrInvalid = errs.ErrInvalid
	// ErrNotFound: no such file or directory (matches fs.ErrNotExist).
	ErrNotFound = errs.ErrNotFound
	// ErrClosed: the volume or file was closed.
	ErrClosed = errs.ErrClosed
	// ErrExist: a name to be created already exists (matches fs.ErrExist).
	ErrExist = errs.ErrExist
	// ErrBusy: a writable open (or Format) of an image another writer
	// holds, in this process or another, that Linux has mounted, or whose
	// multiple mount protection block shows another node (or e2fsck)
	// using it; the message names the holder, the mount point or the
	// node. Rename reports it too, as rename(2) does, for ".", ".." or
	// the root at either end.
	ErrBusy = errs.ErrBusy
	// ErrNotExt4: the device holds no ext4 file system (bad superblock
	// magic, or too small for a superblock), not an I/O error. Such errors
	// match ErrCorrupt too: a wiped superblock and other bytes look alike.
	ErrNotExt4 = errs.ErrNotExt4
)

// CorruptError describes corrupt metadata and where it was found. It
// wraps ErrCorrupt (and Err, when set). Every package of the module
// reports corruption with these fields: errors.As(err, &ce) with ce of
// type *CorruptError finds the error whichever package produced it.
type CorruptError struct {
	What  string // the structure: "superblock", "extent block", "inode", ...
	Ino   uint32 // inode the structure belongs to, 0 if none
	Block uint64 // filesystem block holding it, 0 if unknown
	Off   int    // byte offset within the block, -1 if not meaningful
	Msg   string // what is wrong
	Err   error  // optional underlying cause
}

func (e *CorruptError) Error() string { return (*errs.CorruptError)(e).Error() }

// Unwrap returns ErrCorrupt and the underlying cause.
func (e *CorruptError) Unwrap() []error { return (*errs.CorruptError)(e).Unwrap() }

// Every package, the root included, creates *errs.CorruptError, which has
// CorruptError's fields (so that code anywhere can fill in Ino or Block
// on its way up): errors.As converts it.
func init() {
	errs.AddTwin(func(e *errs.CorruptError) *CorruptError { return (*CorruptError)(e) })
}
