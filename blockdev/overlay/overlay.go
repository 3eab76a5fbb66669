// Package overlay is a copy-on-write blockdev.Device over a base Device.
//
// Writes land in memory, in 4 KiB chunks copied from the base on their
// first write; reads see them over the base. The base is never written, so
// an overlay makes a read-only device writable without changing it: ext4io
// replays the journal of a read-only open into one, as Linux replays even
// for a read-only mount, and tests damage a shared pristine image in one
// overlay per case.
//
// Semantics, where they differ from a device of its own:
//   - The base must not change while the overlay is in use: bytes the
//     overlay has not written are read from it.
//   - ZeroOut makes the range read as zeroes, in memory; a whole chunk
//     zeroed holds no memory.
//   - Discard changes nothing: a discarded range reads as its old contents.
//   - Flush returns nil and makes nothing durable: the written bytes live
//     only in memory and vanish with the overlay.
//   - Size and LogicalBlockSize are the base's. Close drops the written
//     bytes and closes the base, like errordev.
//
// Memory is proportional to the chunks written (Allocated), not to the
// device size.
package overlay

import (
	"fmt"
	"sync"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/internal/devutil"
)

// ChunkSize is the unit, in bytes, in which writes are copied from the base.
const ChunkSize = 4096

// Device is a copy-on-write view of a base Device. It is safe for
// concurrent use if the base is.
type Device struct {
	base blockdev.Device // immutable; never written

	mu struct {
		sync.RWMutex
		// chunks holds every chunk written, by chunk index; a nil slice
		// is a chunk ZeroOut cleared whole. Absent chunks read from base.
		chunks map[int64][]byte
		closed bool
	}
}

var _ blockdev.Device = (*Device)(nil)

// New returns an overlay over base that has written nothing yet.
func New(base blockdev.Device) *Device {
	d := &Device{base: base}
	d.mu.chunks = make(map[int64][]byte)
	return d
}

// Size implements blockdev.Device: the base's size.
func (d *Device) Size() int64 { return d.base.Size() }

// LogicalBlockSize implements blockdev.Device: the base's.
func (d *Device) LogicalBlockSize() int { return d.base.LogicalBlockSize() }

// ReadAt implements io.ReaderAt: the base's bytes, with the chunks written
// copied over them.
func (d *Device) ReadAt(p []byte, off int64) (int, error) {
	if d.isClosed() {
		return 0, devutil.Closed("overlay", "read")
	}
	n, err := d.base.ReadAt(p, off)
	if n <= 0 {
		return n, err
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	end := off + int64(n)
	for c := off / ChunkSize; c*ChunkSize < end; c++ {
		b, ok := d.mu.chunks[c]
		if !ok {
			continue
		}
		lo, hi := max(c*ChunkSize, off), min((c+1)*ChunkSize, end)
		if b == nil {
			clear(p[lo-off : hi-off])
		} else {
			copy(p[lo-off:hi-off], b[lo-c*ChunkSize:hi-c*ChunkSize])
		}
	}
	return n, err
}

// WriteAt implements io.WriterAt: the bytes go to memory only.
func (d *Device) WriteAt(p []byte, off int64) (int, error) {
	if err := d.check("write", off, int64(len(p))); err != nil {
		return 0, err
	}
	end := off + int64(len(p))
	for c := off / ChunkSize; c*ChunkSize < end; c++ {
		lo, hi := max(c*ChunkSize, off), min((c+1)*ChunkSize, end)
		if err := d.modify(c, func(b []byte) {
			copy(b[lo-c*ChunkSize:hi-c*ChunkSize], p[lo-off:hi-off])
		}); err != nil {
			return int(lo - off), err
		}
	}
	return len(p), nil
}

// ZeroOut makes [off, off+n) read as zeroes, in memory.
func (d *Device) ZeroOut(off, n int64) error {
	if err := d.check("zero out", off, n); err != nil {
		return err
	}
	end := off + n
	for c := off / ChunkSize; c*ChunkSize < end; c++ {
		lo, hi := max(c*ChunkSize, off), min((c+1)*ChunkSize, end)
		if hi-lo == ChunkSize {
			d.mu.Lock()
			closed := d.mu.closed
			if !closed {
				d.mu.chunks[c] = nil
			}
			d.mu.Unlock()
			if closed {
				return devutil.Closed("overlay", "zero out")
			}
			continue
		}
		if err := d.modify(c, func(b []byte) { clear(b[lo-c*ChunkSize : hi-c*ChunkSize]) }); err != nil {
			return err
		}
	}
	return nil
}

// modify calls fn with chunk c under the lock, copying it from the base
// first if it has not been written.
func (d *Device) modify(c int64, fn func(b []byte)) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.mu.chunks[c]
	if !ok && !d.mu.closed {
		// Read the base outside the lock; a concurrent writer of the same
		// chunk may win the race to insert it, and then its copy is used.
		d.mu.Unlock()
		fresh := make([]byte, ChunkSize)
		n, err := d.base.ReadAt(fresh, c*ChunkSize) // short at the device end
		d.mu.Lock()
		if n < ChunkSize && c*ChunkSize+int64(n) < d.base.Size() {
			if err == nil {
				err = fmt.Errorf("short read of %d bytes: %w", n, blockdev.ErrIO)
			}
			return fmt.Errorf("overlay: copying chunk %d from the base: %w", c, err)
		}
		if b, ok = d.mu.chunks[c]; !ok {
			b = fresh
		}
	}
	if d.mu.closed {
		return devutil.Closed("overlay", "write")
	}
	if b == nil { // zeroed whole: now partly written
		b = make([]byte, ChunkSize)
	}
	d.mu.chunks[c] = b
	fn(b)
	return nil
}

// Discard implements blockdev.Device. It changes nothing: a discarded
// range reads as its old contents.
func (d *Device) Discard(off, n int64) error { return d.check("discard", off, n) }

// Flush implements blockdev.Device. It returns nil without touching the
// base: nothing written to an overlay is ever durable.
func (d *Device) Flush() error {
	if d.isClosed() {
		return devutil.Closed("overlay", "flush")
	}
	return nil
}

// Allocated returns the bytes of memory the written chunks hold.
func (d *Device) Allocated() int64 {
	d.mu.RLock()
	defer d.mu.RUnlock()
	var n int64
	for _, b := range d.mu.chunks {
		n += int64(len(b))
	}
	return n
}

// Close drops the written bytes and closes the base. A second Close
// returns ErrClosed.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.mu.closed {
		d.mu.Unlock()
		return devutil.Closed("overlay", "close")
	}
	d.mu.closed = true
	d.mu.chunks = nil
	d.mu.Unlock()
	return d.base.Close()
}

func (d *Device) isClosed() bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.mu.closed
}

// check validates a modification of [off, off+n).
func (d *Device) check(what string, off, n int64) error {
	if d.isClosed() {
		return devutil.Closed("overlay", what)
	}
	return devutil.CheckRange("overlay", what, off, n, d.base.Size())
}
