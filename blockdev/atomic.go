package blockdev

// AtomicWriter is implemented by devices that never tear a write up to
// some size: after a power cut such a write is on the media entirely or
// not at all (NVMe's atomic write unit, a SCSI device's atomic transfer
// length, a backend that logs whole writes). Linux reports the same limits
// as a block device's atomic_write_unit_max_bytes.
type AtomicWriter interface {
	// AtomicWriteUnitMax returns the largest untorn write in bytes, a
	// power of two, or 0 when the device guarantees nothing beyond its
	// logical block size. The guarantee holds for a write of a power of
	// two bytes up to it at an offset that is a multiple of its length.
	AtomicWriteUnitMax() int64
}
