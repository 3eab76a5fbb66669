//go:build unix

package blockdev

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"os"
	"runtime/debug"
	"sync/atomic"

	"github.com/ext4io/ext4io/blockdev/internal/devutil"
	"github.com/ext4io/ext4io/internal/stripe"
	"golang.org/x/sys/unix"
)

// Mmap is a pmem-like Device: the whole file or device is mapped shared,
// ReadAt and WriteAt are memory copies, and Flush makes the pages written
// since the last Flush durable. It is safe for concurrent use.
//
// OpenMmap takes a regular file, a block device, or a device DAX
// character device (/dev/daxX.Y). A writable mapping is MAP_SYNC where
// the kernel grants it (DAX: a file on a DAX-mounted file system on
// persistent memory, or device DAX): the file system's metadata for each
// page is durable when the page is first written, so Flush only writes
// back the CPU cache lines of the dirty pages (CLWB, on amd64) instead
// of calling msync. Elsewhere the mapping is plain MAP_SHARED, Flush
// msyncs, and Mode says why MAP_SYNC was refused.
//
// If the file is truncated underneath the mapping, the copy touching the
// missing pages faults (SIGBUS); the fault is turned into an error wrapping
// ErrIO instead of crashing the program. ZeroOut clears the memory;
// Discard also gives whole pages back where it can; both ranges read as
// zeroes. The logical block size is 512, or a block device's own.
type Mmap struct {
	f     *os.File
	path  string
	label string // "blockdev: " + path, for errors (built once, not per I/O)
	size  int64
	ro    bool
	page  int
	lbs   int

	// How writes reach stable storage (Mode); immutable after open.
	mapSync  bool         // the mapping is MAP_SYNC
	cpuFlush func([]byte) // Flush writes back cache lines with it; nil: msync
	fallback error        // why the mapping is not MAP_SYNC

	// life is held shared by every operation that touches data and
	// exclusively by Close, so the mapping is never unmapped under a copy.
	// Reads and writes take the stripe of their buffer, so concurrent I/O
	// from different CPUs does not move one reader count between them.
	life struct {
		stripe.RWMutex
		data   []byte // the mapping; nil for an empty file
		closed bool
	}

	// dirty tracks pages written since the last Flush without a lock, so
	// that writers on different CPUs share no cache line unless they write
	// pages within 256 KiB of each other: bit i of bits is page i, and
	// bit w of sum is set when word w of bits may be non-zero. A writer
	// sets its page bits, then the word's sum bit; Flush swaps each sum
	// word to zero, then each word it names. A write that returned before
	// Flush began is in the words Flush takes; a mark that races with
	// Flush is taken by it or left for the next.
	dirty struct {
		bits []atomic.Uint64
		sum  []atomic.Uint64
	}
}

var _ Device = (*Mmap)(nil)

func (d *Mmap) devPath() string { return d.path }

// OpenMmap maps the regular file, block device or device DAX at path. A
// file larger than the address space can hold is refused with ErrInvalid,
// as is any other kind of file. Writable device DAX needs a CPU cache
// write-back (amd64) and is refused with ErrUnsupported elsewhere: it has
// no msync.
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
	lbs, dax := 512, false
	var size int64
	switch mode := st.Mode(); {
	case mode.IsRegular():
		size = st.Size()
	case mode&os.ModeDevice != 0 && mode&os.ModeCharDevice == 0:
		if size, lbs, err = blockDeviceGeometry(f); err != nil {
			return nil, fmt.Errorf("blockdev: %s: block device geometry: %w: %w", path, ErrIO, err)
		}
		if lbs <= 0 || lbs&(lbs-1) != 0 {
			return nil, fmt.Errorf("blockdev: %s: logical block size %d is not a power of two: %w", path, lbs, ErrInvalid)
		}
	case mode&os.ModeCharDevice != 0:
		if size, err = daxSize(path, st); err != nil {
			return nil, err
		}
		dax = true
	default:
		return nil, fmt.Errorf("blockdev: mmap %s: not a regular file, block device or device DAX: %w", path, ErrInvalid)
	}
	if uint64(size) > math.MaxInt {
		return nil, fmt.Errorf("blockdev: mmap %s: %d bytes do not fit the address space: %w", path, size, ErrInvalid)
	}
	m := &Mmap{f: f, path: path, label: "blockdev: " + path, size: size, ro: readOnly, page: os.Getpagesize(), lbs: lbs}
	if size == 0 {
		m.fallback = fmt.Errorf("empty, nothing mapped: %w", ErrUnsupported)
		return m, nil
	}
	prot := unix.PROT_READ
	if !readOnly {
		prot |= unix.PROT_WRITE
	}
	var data []byte
	err = control(f, func(fd int) error {
		var err error
		data, m.mapSync, m.fallback, err = mapShared(fd, int(size), prot)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("blockdev: mmap %s (%d bytes): %w: %w", path, size, ErrIO, err)
	}
	if m.mapSync {
		m.cpuFlush = cacheFlush
	}
	if dax && !readOnly && m.cpuFlush == nil {
		unix.Munmap(data)
		return nil, fmt.Errorf("blockdev: mmap %s: device DAX needs a CPU cache write-back, which ext4io has on amd64 only: %w", path, ErrUnsupported)
	}
	m.life.data = data
	pages := (size + int64(m.page) - 1) / int64(m.page)
	words := (pages + 63) / 64
	m.dirty.bits = make([]atomic.Uint64, words)
	m.dirty.sum = make([]atomic.Uint64, (words+63)/64)
	return m, nil
}

// MmapMode says how an Mmap device makes writes durable.
type MmapMode struct {
	// MapSync reports a MAP_SYNC mapping (persistent memory through DAX).
	MapSync bool
	// Flush names what Flush does: "msync", or the CPU instruction that
	// writes back the dirty cache lines of a MAP_SYNC mapping ("clwb",
	// "clflushopt", "clflush"), followed by SFENCE.
	Flush string
	// Fallback says why the mapping is not MAP_SYNC (nil when it is): the
	// kernel refused it (wrapping ErrUnsupported and the errno, EOPNOTSUPP
	// for a file or device that is not DAX), the device is read-only or
	// empty, or the platform has no MAP_SYNC.
	Fallback error
}

// Mode reports how m makes writes durable.
func (m *Mmap) Mode() MmapMode {
	md := MmapMode{MapSync: m.mapSync, Flush: "msync", Fallback: m.fallback}
	if m.cpuFlush != nil {
		md.Flush = cacheFlushName
	}
	return md
}

// Size implements Device.
func (m *Mmap) Size() int64 { return m.size }

// LogicalBlockSize implements Device: 512, or a block device's own.
func (m *Mmap) LogicalBlockSize() int { return m.lbs }

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
	defer m.life.RUnlock(m.life.RLock(stripe.OfBuf(p)))
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
	defer m.life.RUnlock(m.life.RLock(stripe.OfBuf(p)))
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

// Discard clears [off, off+n) and, where the file system can punch holes
// (Linux), gives the whole pages in it back: the file's blocks, or the
// memory of a file in tmpfs, as a device's discard deallocates. Later
// writes there fault the pages in again. Elsewhere it is ZeroOut.
func (m *Mmap) Discard(off, n int64) error {
	defer m.life.RUnlock(m.life.RLock(0))
	if err := m.checkWriteLocked("discard", off, n); err != nil || n == 0 {
		return err
	}
	pg := int64(m.page)
	if a, b := (off+pg-1)/pg*pg, (off+n)/pg*pg; a < b {
		err := punchHole(m.f, a, b-a)
		if err == nil {
			// The pages in between read zeroes now; clear the edges.
			if err := m.clearLocked("discard", off, a-off); err != nil {
				return err
			}
			return m.clearLocked("discard", b, off+n-b)
		}
		if !errors.Is(err, errors.ErrUnsupported) {
			return fmt.Errorf("blockdev: mmap discard %s at %d: %w: %w", m.path, a, ErrIO, err)
		}
	}
	return m.clearLocked("discard", off, n)
}

func (m *Mmap) zero(what string, off, n int64) error {
	defer m.life.RUnlock(m.life.RLock(0))
	if err := m.checkWriteLocked(what, off, n); err != nil || n == 0 {
		return err
	}
	return m.clearLocked(what, off, n)
}

// clearLocked zeroes [off, off+n), checked, under the life lock.
func (m *Mmap) clearLocked(what string, off, n int64) error {
	if n == 0 {
		return nil
	}
	err := m.protected(what, off, func() { clear(m.life.data[off : off+n]) })
	m.markDirty(off, n)
	return err
}

func (m *Mmap) markDirty(off, n int64) {
	p0, p1 := int(off/int64(m.page)), int((off+n-1)/int64(m.page))
	for w := p0 / 64; w <= p1/64; w++ {
		lo, hi := max(p0, w*64)-w*64, min(p1, w*64+63)-w*64
		mask := (^uint64(0) >> (63 - hi)) &^ (1<<lo - 1)
		// Loads first: a page written again before the next Flush, or a
		// word already named in sum, costs no store to a shared line.
		if b := &m.dirty.bits[w]; b.Load()&mask != mask {
			b.Or(mask)
		}
		if s, bit := &m.dirty.sum[w/64], uint64(1)<<(w%64); s.Load()&bit == 0 {
			s.Or(bit)
		}
	}
}

// takeDirty returns the runs of dirty pages as [first, last+1) page pairs
// and clears them.
func (m *Mmap) takeDirty() [][2]int {
	var runs [][2]int
	for s := range m.dirty.sum {
		for x := m.dirty.sum[s].Swap(0); x != 0; x &= x - 1 {
			w := s*64 + bits.TrailingZeros64(x)
			for y := m.dirty.bits[w].Swap(0); y != 0; y &= y - 1 {
				p := w*64 + bits.TrailingZeros64(y)
				if k := len(runs); k > 0 && runs[k-1][1] == p {
					runs[k-1][1] = p + 1
				} else {
					runs = append(runs, [2]int{p, p + 1})
				}
			}
		}
	}
	return runs
}

// Flush makes the pages written since the last Flush durable: it writes
// back their CPU cache lines on a MAP_SYNC mapping, and msyncs them
// otherwise. If that fails the pages stay dirty for the next Flush.
func (m *Mmap) Flush() error {
	defer m.life.RUnlock(m.life.RLock(0))
	if m.life.closed {
		return devutil.Closed("blockdev", m.path)
	}
	if m.ro || m.size == 0 {
		return nil
	}
	runs := m.takeDirty()
	for i, r := range runs {
		lo, hi := r[0]*m.page, min(r[1]*m.page, len(m.life.data))
		if m.cpuFlush != nil {
			if err := m.protected("flush", int64(lo), func() { m.cpuFlush(m.life.data[lo:hi]) }); err != nil {
				for _, r := range runs[i:] {
					m.markDirty(int64(r[0]*m.page), int64((r[1]-r[0])*m.page))
				}
				return err
			}
			continue
		}
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
