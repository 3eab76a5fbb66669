package ext4io

import (
	"fmt"
)

// Trim discards the free space of a writable volume, like Linux's FITRIM
// ioctl (fstrim): every free run of at least minLen bytes inside the byte
// range [start, start+length) is passed to the device's Discard, group
// by group, and Trim returns the bytes discarded. start rounds down and
// length and minLen round down to whole blocks; minLen 0 means one
// block. It fails with ErrInvalid when length is less than a block, start
// lies past the end of the filesystem or minLen exceeds a block group, as
// FITRIM does; a range reaching past the end is clipped.
//
// Each run is held out of the allocator only while it is discarded (a
// writer that needs the space waits for that one discard, see
// alloc.Allocator.Trim), so Trim can run beside writers. Blocks freed by
// transactions that have not committed yet are not free for Trim: it
// never discards a block the committed metadata may still map. Like
// ext4, a group trimmed as a whole is skipped by later Trims (with the
// same or a larger minLen) until blocks are freed in it, for as long as
// the volume stays open.
//
// A discard error stops Trim; it returns the bytes discarded before it
// and the error, which wraps ErrUnsupported when the device cannot
// discard. A read-only volume fails with ErrReadOnly. A Trim running when
// Close is called stops before its next discard with an error wrapping
// ErrClosed, and Close waits for it.
func (v *Volume) Trim(start, length, minLen int64) (int64, error) {
	if err := v.checkOpen(); err != nil {
		return 0, err
	}
	// Close waits for the Trim (trimMu), which stops at its next discard
	// once Close has begun: none reaches the device after Close.
	v.trimMu.RLock()
	defer v.trimMu.RUnlock()
	if err := v.checkOpen(); err != nil {
		return 0, err
	}
	if v.alloc == nil {
		return 0, fmt.Errorf("ext4io: trim: the volume is read-only: %w", ErrReadOnly)
	}
	if err := v.failed(); err != nil {
		return 0, fmt.Errorf("ext4io: trim: %w", err)
	}
	bs := int64(v.bs)
	blocks := int64(v.sb.BlocksCount)
	if start < 0 || minLen < 0 || length < bs || start/bs >= blocks {
		return 0, fmt.Errorf("ext4io: trim [%d, +%d) minimum %d on %d blocks of %d bytes: %w", start, length, minLen, blocks, bs, ErrInvalid)
	}
	first := start / bs
	end := blocks
	if n := length / bs; n < end-first {
		end = first + n
	}
	n, err := v.alloc.Trim(uint64(first), uint64(end), uint64(minLen/bs), func(s, n uint64) error {
		if v.closed.Load() {
			return ErrClosed
		}
		return v.dev.Discard(int64(s)*bs, int64(n)*bs)
	})
	trimmed := int64(n) * bs
	v.disc.trims.Add(uint64(trimmed))
	if err != nil {
		return trimmed, fmt.Errorf("ext4io: trim: %w", err)
	}
	return trimmed, nil
}
