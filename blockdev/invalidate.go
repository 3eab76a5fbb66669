package blockdev

import "github.com/ext4io/ext4io/blockdev/internal/devutil"

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

// Invalidate drops [off, off+n) from the page cache
// (posix_fadvise(POSIX_FADV_DONTNEED); a no-op outside Linux).
func (d *File) Invalidate(off, n int64) error {
	if d.closed.Load() {
		return devutil.Closed("blockdev", d.path)
	}
	if err := dropCache(d.f, off, n); err != nil {
		return d.ioErr("invalidate", off, err)
	}
	return nil
}
