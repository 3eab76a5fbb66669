// Package memdev is a sparse in-process blockdev.Device for tests and crash
// images.
//
// The device is a map from chunk index to 4 KiB chunks. Chunks never
// written read as zeroes, so memory is proportional to the data written,
// not to the device size. ZeroOut and Discard drop whole chunks and clear
// partial ones: discarded ranges read as zeroes.
//
// Clone is O(number of chunks) and copy-on-write: the clone and the
// original share chunks until either writes one. Invariant: a chunk is
// mutated only by the device whose current owner token it carries; a chunk
// with any other owner is shared and immutable.
//
// For a copy-on-write view of any other Device (a file, a read-only image),
// see blockdev/overlay.
package memdev

import (
	"fmt"
	"sync"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/internal/devutil"
)

// ChunkSize is the allocation unit in bytes.
const ChunkSize = 4096

// token identifies the owner of a chunk; a fresh one is made at each Clone.
// It has a field so that distinct tokens have distinct addresses.
type token struct{ _ byte }

type chunk struct {
	owner *token
	data  [ChunkSize]byte
}

// Device is a sparse in-memory Device. It is safe for concurrent use.
type Device struct {
	size int64 // immutable
	lbs  int   // immutable

	mu struct {
		sync.RWMutex
		chunks map[int64]*chunk // by chunk index; absent = zeroes
		tok    *token           // owner token of chunks this device may mutate
		closed bool
	}
}

var _ blockdev.Device = (*Device)(nil)

// New returns an all-zero device of size bytes with 512-byte logical blocks.
// It panics if size is negative.
func New(size int64) *Device { return NewBlockSize(size, 512) }

// NewBlockSize is New with a given logical block size, a power of two
// between 512 and ChunkSize. It panics on a bad size or block size.
func NewBlockSize(size int64, lbs int) *Device {
	if size < 0 || lbs < 512 || lbs > ChunkSize || lbs&(lbs-1) != 0 {
		panic(fmt.Sprintf("memdev: bad size %d or logical block size %d", size, lbs))
	}
	d := &Device{size: size, lbs: lbs}
	d.mu.chunks = make(map[int64]*chunk)
	d.mu.tok = new(token)
	return d
}

// Size implements blockdev.Device.
func (d *Device) Size() int64 { return d.size }

// LogicalBlockSize implements blockdev.Device.
func (d *Device) LogicalBlockSize() int { return d.lbs }

// ReadAt implements io.ReaderAt.
func (d *Device) ReadAt(p []byte, off int64) (int, error) {
	n, tail := devutil.ClipRead("memdev: read", off, len(p), d.size)
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.mu.closed {
		return 0, devutil.Closed("memdev", "read")
	}
	for done := 0; done < n; {
		pos := off + int64(done)
		ci, co := pos/ChunkSize, int(pos%ChunkSize)
		l := min(n-done, ChunkSize-co)
		if c := d.mu.chunks[ci]; c != nil {
			copy(p[done:done+l], c.data[co:])
		} else {
			clear(p[done : done+l])
		}
		done += l
	}
	return n, tail
}

// WriteAt implements io.WriterAt.
func (d *Device) WriteAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkLocked("write", off, int64(len(p))); err != nil {
		return 0, err
	}
	for done := 0; done < len(p); {
		pos := off + int64(done)
		ci, co := pos/ChunkSize, int(pos%ChunkSize)
		l := min(len(p)-done, ChunkSize-co)
		c := d.ownedLocked(ci)
		copy(c.data[co:co+l], p[done:])
		done += l
	}
	return len(p), nil
}

// ownedLocked returns chunk ci, allocated or copied so this device may
// mutate it.
func (d *Device) ownedLocked(ci int64) *chunk {
	c := d.mu.chunks[ci]
	switch {
	case c == nil:
		c = &chunk{owner: d.mu.tok}
		d.mu.chunks[ci] = c
	case c.owner != d.mu.tok:
		nc := &chunk{owner: d.mu.tok, data: c.data}
		d.mu.chunks[ci] = nc
		c = nc
	}
	return c
}

func (d *Device) checkLocked(what string, off, n int64) error {
	if d.mu.closed {
		return devutil.Closed("memdev", what)
	}
	return devutil.CheckRange("memdev", what, off, n, d.size)
}

// Flush implements blockdev.Device; memory is as durable as it gets.
func (d *Device) Flush() error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.mu.closed {
		return devutil.Closed("memdev", "flush")
	}
	return nil
}

// ZeroOut drops the chunks inside [off, off+n) and clears partial ones.
func (d *Device) ZeroOut(off, n int64) error { return d.zero("zero out", off, n) }

// Discard is ZeroOut: discarded ranges read as zeroes.
func (d *Device) Discard(off, n int64) error { return d.zero("discard", off, n) }

func (d *Device) zero(what string, off, n int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkLocked(what, off, n); err != nil {
		return err
	}
	for end := off + n; off < end; {
		ci, co := off/ChunkSize, off%ChunkSize
		l := min(end-off, ChunkSize-co)
		if l == ChunkSize {
			delete(d.mu.chunks, ci)
		} else if d.mu.chunks[ci] != nil {
			clear(d.ownedLocked(ci).data[co : co+l])
		}
		off += l
	}
	return nil
}

// Clone returns an independent copy of the device's current contents. It is
// cheap: chunks are shared copy-on-write. Cloning a closed device returns
// ErrClosed.
func (d *Device) Clone() (*Device, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.closed {
		return nil, devutil.Closed("memdev", "clone")
	}
	c := &Device{size: d.size, lbs: d.lbs}
	c.mu.chunks = make(map[int64]*chunk, len(d.mu.chunks))
	for i, ch := range d.mu.chunks {
		c.mu.chunks[i] = ch
	}
	// Every existing chunk is now shared: neither device owns it.
	d.mu.tok = new(token)
	c.mu.tok = new(token)
	return c, nil
}

// Allocated returns the bytes of chunk memory the device references.
func (d *Device) Allocated() int64 {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return int64(len(d.mu.chunks)) * ChunkSize
}

// Close drops the contents. A second Close returns ErrClosed.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.closed {
		return devutil.Closed("memdev", "close")
	}
	d.mu.closed = true
	d.mu.chunks = nil
	return nil
}
