package layout

import "github.com/ext4io/ext4io/internal/errs"

// CorruptError describes corrupt metadata and where it was found; it
// wraps ErrCorrupt (and Err, when set). Decoders and checks of this
// package, and the other packages of the module, report corruption with
// these fields: errors.As(err, &ce) with ce of type *CorruptError finds
// the error whichever package produced it. ext4io.CorruptError is the
// same for callers of the root package.
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

// The errors are *errs.CorruptError, which has CorruptError's fields:
// errors.As converts them.
func init() {
	errs.AddTwin(func(e *errs.CorruptError) *CorruptError { return (*CorruptError)(e) })
}
