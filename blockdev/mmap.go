//go:build unix

package blockdev

import (
	"fmt"
	"math"
	"math/bits"
	"os"
	"runtime/debug"
	"sync"

	"github.com/ext4io/ext4io/blockdev/internal/devutil"
	"golang.org/x/sys/unix"
)

// Mmap is a pmem-like Device: the whole file is mapped shared, ReadAt and
// WriteAt are memory copies, and Flush msyncs only the pages written since
// the last Flush. It is safe for concurrent use.
//
// If the file is truncated underneath the mapping, the copy touching the
// missing pages faults (SIGBUS); the fault is turned into an error wrapping
// ErrIO instead of crashing the program. ZeroOut and Discard clear the
// memory: discarded ranges read as zeroes. The logical block size is 512.
type Mmap struct {
	f     *os.File
	path  string
	label string // "blockdev: " + path, for errors (built once, not per I/O)
	size  int64
	ro    bool
	page  int

	// life is held shared by every operation that touches data and
	// exclusively by Close, so the mapping is never unmapped under a copy.
	life struct {
		sync.RWMutex
		data   []byte // the mapping; nil for an empty file
		closed bool
	}

	// dirty tracks pages written since the last Flush: bit i of bits is
	// page i. Only words in [lo, hi) may be non-zero.
	dirty struct {
		sync.Mutex
		bits   []uint64
		lo, hi int
	}
}

var _ Device = (*Mmap)(nil)

// OpenMmap maps the regular file at path. A file larger than the address
// space can hold is refused with ErrInvalid.
func OpenMmap(path string, readOnly bool) (*Mmap, error) {
	f, err := openOS(path, readOnly, 0)
	if err != nil {
		return nil, err
	}
	m, err := newMmap(f, path, readOnly)
	if err != nil {
		f.Close()
		return nil, err
	}
	return m, nil
}

func newMmap(f *os.File, path string, readOnly bool) (*Mmap, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("blockdev: stat %s: %w: %w", path, ErrIO, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("blockdev: mmap %s: not a regular file: %w", path, ErrInvalid)
	}
	size := st.Size()
	if uint64(size) > math.MaxInt {
		return nil, fmt.Errorf("blockdev: mmap %s: %d bytes do not fit the address space: %w", path, size, ErrInvalid)
	}
	m := &Mmap{f: f, path: path, label: "blockdev: " + path, size: size, ro: readOnly, page: os.Getpagesize()}
	if size == 0 {
		return m, nil
	}
	prot := unix.PROT_READ
	if !readOnly {
		prot |= unix.PROT_WRITE
	}
	var data []byte
	err = control(f, func(fd int) error {
		var err error
		data, err = unix.Mmap(fd, 0, int(size), prot, unix.MAP_SHARED)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("blockdev: mmap %s (%d bytes): %w: %w", path, size, ErrIO, err)
	}
	m.life.data = data
	pages := (size + int64(m.page) - 1) / int64(m.page)
	m.dirty.bits = make([]uint64, (pages+63)/64)
	return m, nil
}

// Size implements Device.
func (m *Mmap) Size() int64 { return m.size }

// LogicalBlockSize implements Device.
func (m *Mmap) LogicalBlockSize() int { return 512 }

// protected runs fn, which copies to or from the mapping, turning a memory
// fault (SIGBUS after the file shrank) into an error.
func (m *Mmap) protected(op string, off int64, fn func()) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			fault, ok := r.(interface{ Addr() uintptr })
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("blockdev: mmap %s %s at %d: %w: memory fault at %#x (file truncated underneath?)", op, m.path, off, ErrIO, fault.Addr())
		}
	}()
	fn()
	return nil
}

// ReadAt implements io.ReaderAt.
func (m *Mmap) ReadAt(p []byte, off int64) (int, error) {
	m.life.RLock()
	defer m.life.RUnlock()
	if m.life.closed {
		return 0, devutil.Closed("blockdev", m.path)
	}
	n, tail := devutil.ClipRead(m.label, off, len(p), m.size)
	if n == 0 {
		return 0, tail
	}
	if err := m.protected("read", off, func() { copy(p[:n], m.life.data[off:]) }); err != nil {
		return 0, err
	}
	return n, tail
}

func (m *Mmap) checkWriteLocked(what string, off, n int64) error {
	if m.life.closed {
		return devutil.Closed("blockdev", m.path)
	}
	if m.ro {
		return devutil.ReadOnly("blockdev", m.path)
	}
	return devutil.CheckRange(m.label, what, off, n, m.size)
}

// WriteAt implements io.WriterAt.
func (m *Mmap) WriteAt(p []byte, off int64) (int, error) {
	m.life.RLock()
	defer m.life.RUnlock()
	if err := m.checkWriteLocked("write", off, int64(len(p))); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	err := m.protected("write", off, func() { copy(m.life.data[off:], p) })
	// Mark even on a fault: part of the range may have been written.
	m.markDirty(off, int64(len(p)))
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// ZeroOut clears [off, off+n).
func (m *Mmap) ZeroOut(off, n int64) error { return m.zero("zero out", off, n) }

// Discard clears [off, off+n), like ZeroOut.
func (m *Mmap) Discard(off, n int64) error { return m.zero("discard", off, n) }

func (m *Mmap) zero(what string, off, n int64) error {
	m.life.RLock()
	defer m.life.RUnlock()
	if err := m.checkWriteLocked(what, off, n); err != nil || n == 0 {
		return err
	}
	err := m.protected(what, off, func() { clear(m.life.data[off : off+n]) })
	m.markDirty(off, n)
	return err
}

func (m *Mmap) markDirty(off, n int64) {
	p0, p1 := int(off/int64(m.page)), int((off+n-1)/int64(m.page))
	m.dirty.Lock()
	defer m.dirty.Unlock()
	for p := p0; p <= p1; p++ {
		m.dirty.bits[p/64] |= 1 << (p % 64)
	}
	w0, w1 := p0/64, p1/64+1
	if m.dirty.lo == m.dirty.hi {
		m.dirty.lo, m.dirty.hi = w0, w1
	} else {
		m.dirty.lo, m.dirty.hi = min(m.dirty.lo, w0), max(m.dirty.hi, w1)
	}
}

// takeDirty returns the runs of dirty pages as [first, last+1) page pairs
// and clears them.
func (m *Mmap) takeDirty() [][2]int {
	m.dirty.Lock()
	defer m.dirty.Unlock()
	var runs [][2]int
	for w := m.dirty.lo; w < m.dirty.hi; w++ {
		for x := m.dirty.bits[w]; x != 0; x &= x - 1 {
			p := w*64 + bits.TrailingZeros64(x)
			if k := len(runs); k > 0 && runs[k-1][1] == p {
				runs[k-1][1] = p + 1
			} else {
				runs = append(runs, [2]int{p, p + 1})
			}
		}
		m.dirty.bits[w] = 0
	}
	m.dirty.lo, m.dirty.hi = 0, 0
	return runs
}

// Flush msyncs the pages written since the last Flush. If msync fails the
// pages stay dirty for the next Flush.
func (m *Mmap) Flush() error {
	m.life.RLock()
	defer m.life.RUnlock()
	if m.life.closed {
		return devutil.Closed("blockdev", m.path)
	}
	if m.ro || m.size == 0 {
		return nil
	}
	runs := m.takeDirty()
	for i, r := range runs {
		lo, hi := r[0]*m.page, min(r[1]*m.page, len(m.life.data))
		if err := unix.Msync(m.life.data[lo:hi], unix.MS_SYNC); err != nil {
			for _, r := range runs[i:] {
				m.markDirty(int64(r[0]*m.page), int64((r[1]-r[0])*m.page))
			}
			return fmt.Errorf("blockdev: msync %s at %d: %w: %w", m.path, lo, ErrIO, err)
		}
	}
	return nil
}

// Close unmaps and closes the file, waiting for operations in progress. It
// does not flush. A second Close returns ErrClosed.
func (m *Mmap) Close() error {
	m.life.Lock()
	defer m.life.Unlock()
	if m.life.closed {
		return devutil.Closed("blockdev", m.path)
	}
	m.life.closed = true
	var err error
	if m.life.data != nil {
		err = unix.Munmap(m.life.data)
		m.life.data = nil
	}
	if cerr := m.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("blockdev: close mmap %s: %w: %w", m.path, ErrIO, err)
	}
	return nil
}
