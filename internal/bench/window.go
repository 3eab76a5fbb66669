package bench

import (
	"fmt"
	"io"
	"sync/atomic"

	"github.com/ext4io/ext4io/blockdev"
)

// devCounts counts the operations that reach a device window. The fields
// are atomics: safe for concurrent use.
type devCounts struct {
	reads, writes, flushes, zeroOuts, discards atomic.Uint64
	readBytes, writeBytes                      atomic.Uint64
}

// devSnap is a snapshot of devCounts.
type devSnap struct {
	Reads, Writes, Flushes, ZeroOuts, Discards uint64
	ReadBytes, WriteBytes                      uint64
}

func (c *devCounts) snap() devSnap {
	return devSnap{Reads: c.reads.Load(), Writes: c.writes.Load(), Flushes: c.flushes.Load(),
		ZeroOuts: c.zeroOuts.Load(), Discards: c.discards.Load(),
		ReadBytes: c.readBytes.Load(), WriteBytes: c.writeBytes.Load()}
}

func (s devSnap) add(o devSnap) devSnap {
	return devSnap{s.Reads + o.Reads, s.Writes + o.Writes, s.Flushes + o.Flushes, s.ZeroOuts + o.ZeroOuts,
		s.Discards + o.Discards, s.ReadBytes + o.ReadBytes, s.WriteBytes + o.WriteBytes}
}

func (s devSnap) sub(o devSnap) devSnap {
	return devSnap{s.Reads - o.Reads, s.Writes - o.Writes, s.Flushes - o.Flushes, s.ZeroOuts - o.ZeroOuts,
		s.Discards - o.Discards, s.ReadBytes - o.ReadBytes, s.WriteBytes - o.WriteBytes}
}

// window is a blockdev.Device over the byte range [off, off+size) of
// another device, counting the operations it passes on. The bench splits
// one backing device into the filesystem's window and the raw region's
// window, so engine and raw run on the same backend, file and disk. It is
// safe for concurrent use; Close does not close the underlying device.
type window struct {
	dev       blockdev.Device
	off, size int64 // immutable
	c         devCounts
	closed    atomic.Bool
}

// alignedWindow is a window over a device with alignment needs; it passes
// blockdev.Aligner through.
type alignedWindow struct{ *window }

func (w alignedWindow) Alignment() (mem, off int) { return w.dev.(blockdev.Aligner).Alignment() }

// newWindow returns the window and the Device to use it through (which
// implements blockdev.Aligner or blockdev.VectorWriter when dev does, and
// blockdev.SyncWriter always).
func newWindow(dev blockdev.Device, off, size int64) (*window, blockdev.Device) {
	w := &window{dev: dev, off: off, size: size}
	if _, ok := dev.(blockdev.Aligner); ok {
		return w, alignedWindow{w}
	}
	if _, ok := dev.(blockdev.VectorWriter); ok {
		return w, vectorWindow{w}
	}
	return w, w
}

// vectorWindow is a window over a device that writes several buffers in
// one request; it passes blockdev.VectorWriter through.
type vectorWindow struct{ *window }

func (w vectorWindow) WriteVAt(bufs [][]byte, off int64) (int, error) {
	n := int64(0)
	for _, b := range bufs {
		n += int64(len(b))
	}
	if err := w.check("write", off, n); err != nil {
		return 0, err
	}
	w.c.writes.Add(1)
	w.c.writeBytes.Add(uint64(n))
	return w.dev.(blockdev.VectorWriter).WriteVAt(bufs, w.off+off)
}

func (w *window) check(what string, off, n int64) error {
	if w.closed.Load() {
		return fmt.Errorf("bench window: %s: %w", what, blockdev.ErrClosed)
	}
	if off < 0 || n < 0 || off > w.size || n > w.size-off {
		return fmt.Errorf("bench window: %s [%d,+%d) outside 0..%d: %w", what, off, n, w.size, blockdev.ErrInvalid)
	}
	return nil
}

func (w *window) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || w.closed.Load() {
		return 0, w.check("read", off, 0)
	}
	if off >= w.size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), w.size-off)
	w.c.reads.Add(1)
	w.c.readBytes.Add(uint64(n))
	k, err := w.dev.ReadAt(p[:n], w.off+off)
	if err == nil && k < len(p) {
		err = io.EOF
	}
	return k, err
}

func (w *window) WriteAt(p []byte, off int64) (int, error) {
	if err := w.check("write", off, int64(len(p))); err != nil {
		return 0, err
	}
	w.c.writes.Add(1)
	w.c.writeBytes.Add(uint64(len(p)))
	return w.dev.WriteAt(p, w.off+off)
}

// WriteAtSync implements blockdev.SyncWriter for every window: one
// durable write on a device that has it, else WriteAt and Flush. It
// counts as one write and one flush either way (a FUA write counts as a
// flush), so per-op counts compare across backends and versions.
func (w *window) WriteAtSync(p []byte, off int64) (int, error) {
	if err := w.check("write", off, int64(len(p))); err != nil {
		return 0, err
	}
	w.c.writes.Add(1)
	w.c.writeBytes.Add(uint64(len(p)))
	w.c.flushes.Add(1)
	return blockdev.WriteAtSync(w.dev, p, w.off+off)
}

func (w *window) Flush() error {
	if err := w.check("flush", 0, 0); err != nil {
		return err
	}
	w.c.flushes.Add(1)
	return w.dev.Flush()
}

func (w *window) ZeroOut(off, n int64) error {
	if err := w.check("zero out", off, n); err != nil {
		return err
	}
	w.c.zeroOuts.Add(1)
	return w.dev.ZeroOut(w.off+off, n)
}

func (w *window) Discard(off, n int64) error {
	if err := w.check("discard", off, n); err != nil {
		return err
	}
	w.c.discards.Add(1)
	return w.dev.Discard(w.off+off, n)
}

func (w *window) Size() int64           { return w.size }
func (w *window) LogicalBlockSize() int { return w.dev.LogicalBlockSize() }

// Close marks the window closed (later operations fail with ErrClosed); the
// underlying device stays open.
func (w *window) Close() error {
	if w.closed.Swap(true) {
		return fmt.Errorf("bench window: close: %w", blockdev.ErrClosed)
	}
	return nil
}
