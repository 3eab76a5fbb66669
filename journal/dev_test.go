package journal

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// memDev is an in-memory device for tests that separates written from
// durable bytes: a crash keeps only what a Flush made durable.
type memDev struct {
	mu       sync.Mutex
	cur      []byte    // what reads see
	durable  []byte    // what survives a crash
	pending  []wrEvent // writes since the last flush
	flushes  int
	latency  time.Duration
	onFlush  func(d *memDev) // called (locked) before a flush applies
	failNext error
}

type wrEvent struct {
	off  int64
	data []byte
}

func newMemDev(size int64) *memDev {
	return &memDev{cur: make([]byte, size), durable: make([]byte, size)}
}

func (d *memDev) ReadAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if off < 0 || off >= int64(len(d.cur)) {
		return 0, io.EOF
	}
	n := copy(p, d.cur[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (d *memDev) WriteAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failNext != nil {
		err := d.failNext
		d.failNext = nil
		return 0, err
	}
	if off < 0 || off+int64(len(p)) > int64(len(d.cur)) {
		return 0, fmt.Errorf("memdev: write past end: %w", ErrInvalid)
	}
	copy(d.cur[off:], p)
	d.pending = append(d.pending, wrEvent{off, append([]byte(nil), p...)})
	return len(p), nil
}

func (d *memDev) Flush() error {
	if d.latency > 0 {
		time.Sleep(d.latency)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.onFlush != nil {
		d.onFlush(d)
	}
	for _, w := range d.pending {
		copy(d.durable[w.off:], w.data)
	}
	d.pending = d.pending[:0]
	d.flushes++
	return nil
}

func (d *memDev) ZeroOut(off, n int64) error { _, err := d.WriteAt(make([]byte, n), off); return err }
func (d *memDev) Discard(off, n int64) error { return nil }
func (d *memDev) Size() int64                { return int64(len(d.cur)) }
func (d *memDev) LogicalBlockSize() int      { return 512 }
func (d *memDev) Close() error               { return nil }
func (d *memDev) flushCount() int            { d.mu.Lock(); defer d.mu.Unlock(); return d.flushes }
func memDevFrom(img []byte) *memDev {
	d := newMemDev(int64(len(img)))
	copy(d.cur, img)
	copy(d.durable, img)
	return d
}

// durableCopy returns what a crash now would leave: the flushed writes.
// The journal's background checkpoint may be flushing meanwhile.
func (d *memDev) durableCopy() []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]byte(nil), d.durable...)
}
func (d *memDev) snapshot() []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]byte(nil), d.cur...)
}

// fileDev is a device on an image file for the e2fsprogs tests.
type fileDev struct{ f *os.File }

func openFileDev(path string) (*fileDev, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	return &fileDev{f}, nil
}

func (d *fileDev) ReadAt(p []byte, off int64) (int, error)  { return d.f.ReadAt(p, off) }
func (d *fileDev) WriteAt(p []byte, off int64) (int, error) { return d.f.WriteAt(p, off) }
func (d *fileDev) Flush() error                             { return d.f.Sync() }
func (d *fileDev) ZeroOut(off, n int64) error {
	_, err := d.f.WriteAt(make([]byte, n), off)
	return err
}
func (d *fileDev) Discard(off, n int64) error { return nil }
func (d *fileDev) LogicalBlockSize() int      { return 512 }
func (d *fileDev) Close() error               { return d.f.Close() }
func (d *fileDev) Size() int64 {
	st, err := d.f.Stat()
	if err != nil {
		return 0
	}
	return st.Size()
}
