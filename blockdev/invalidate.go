package blockdev

import (
	"fmt"
	"os"

	"github.com/ext4io/ext4io/blockdev/internal/devutil"
)

// Invalidator is implemented by devices whose reads may be served from a
// host cache (the page cache of a file or block device): Invalidate drops
// the clean cached copy of [off, off+n) so that the next read of it comes
// from the device. Whoever must see other hosts' writes to shared storage
// (multiple mount protection) calls it before reading; data the device
// itself wrote must be flushed first.
type Invalidator interface {
	Invalidate(off, n int64) error
}

var (
	_ Invalidator = (*File)(nil)
)

// Invalidate drops the pages holding [off, off+n) from the page cache
// (posix_fadvise(POSIX_FADV_DONTNEED), which drops only whole pages inside
// its range: the range is widened to page boundaries first; a no-op
// outside Linux).
func (d *File) Invalidate(off, n int64) error {
	if d.closed.Load() {
		return devutil.Closed("blockdev", d.path)
	}
	if off < 0 || n < 0 {
		return fmt.Errorf("blockdev: invalidate %s: range %d+%d: %w", d.path, off, n, ErrInvalid)
	}
	pg := int64(os.Getpagesize())
	start, end := alignDown(off, pg), alignUp(off+n, pg)
	if err := dropCache(d.f, start, end-start); err != nil {
		return d.ioErr("invalidate", off, err)
	}
	return nil
}
