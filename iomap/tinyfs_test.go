package iomap_test

import (
	"fmt"
	"sync"

	"github.com/ext4io/ext4io/iomap"
)

// tinyFS is a test-double filesystem of one file: a per-block map from
// file block to device block over a bump allocator. It behaves like ext4's
// iomap ops in the ways the iomap package cares about: direct writes to
// holes allocate unwritten blocks converted by EndIO, buffered writes to
// holes reserve delalloc blocks that write-back allocates (unwritten) and
// End(Writeback) converts, and every change bumps a validity cookie.
type tinyFS struct {
	bs   int64
	base int64 // device byte address of device block 0

	mu struct {
		sync.Mutex
		blocks map[int64]blk // by file block
		next   int64         // next free device block
		limit  int64         // device blocks available
		cookie uint64
		calls  map[string]int
	}
}

type bstate uint8

const (
	bUnwritten bstate = iota + 1
	bWritten
	bDelalloc
)

type blk struct {
	st   bstate
	phys int64
}

func newTinyFS(bs, base, limit int64) *tinyFS {
	fs := &tinyFS{bs: bs, base: base}
	fs.mu.blocks = make(map[int64]blk)
	fs.mu.limit = limit
	fs.mu.calls = make(map[string]int)
	return fs
}

var _ iomap.Ops = (*tinyFS)(nil)
var _ iomap.Validator = (*tinyFS)(nil)

func (fs *tinyFS) allocLocked(n int64) (int64, error) {
	if fs.mu.next+n > fs.mu.limit {
		return 0, fmt.Errorf("tinyfs: out of space: %w", iomap.ErrInvalid)
	}
	p := fs.mu.next
	fs.mu.next += n
	return p, nil
}

// runLocked returns the length in blocks of the run at lb (< le) with the
// same state and contiguous physical blocks as lb.
func (fs *tinyFS) runLocked(lb, le int64) int64 {
	first, ok := fs.mu.blocks[lb]
	n := int64(1)
	for ; lb+n < le; n++ {
		b, ok2 := fs.mu.blocks[lb+n]
		if ok != ok2 || (ok && (b.st != first.st || (b.st != bDelalloc && b.phys != first.phys+n))) {
			break
		}
	}
	return n
}

func (fs *tinyFS) Begin(off, length int64, flags iomap.Flags) (iomap.Mapping, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.mu.calls[fmt.Sprintf("begin%#x", flags)]++
	lb, le := off/fs.bs, (off+length+fs.bs-1)/fs.bs
	n := fs.runLocked(lb, le)
	b, ok := fs.mu.blocks[lb]
	m := iomap.Mapping{Offset: lb * fs.bs, Length: n * fs.bs, Addr: iomap.NoAddr, Cookie: fs.mu.cookie}
	switch {
	case !ok && flags&iomap.Writeback != 0:
		return m, fmt.Errorf("tinyfs: write-back of hole at %d", off)
	case !ok && flags&iomap.Write != 0 && flags&iomap.Direct != 0:
		p, err := fs.allocLocked(n)
		if err != nil {
			return m, err
		}
		for i := range n {
			fs.mu.blocks[lb+i] = blk{bUnwritten, p + i}
		}
		fs.mu.cookie++
		m.Type, m.Addr, m.Flags, m.Cookie = iomap.Unwritten, fs.base+p*fs.bs, iomap.MapNew, fs.mu.cookie
	case !ok && flags&iomap.Write != 0 && flags&iomap.Zero == 0:
		for i := range n {
			fs.mu.blocks[lb+i] = blk{st: bDelalloc}
		}
		fs.mu.cookie++
		m.Type, m.Cookie = iomap.Delalloc, fs.mu.cookie
	case !ok:
		m.Type = iomap.Hole
	case b.st == bDelalloc && flags&iomap.Writeback != 0:
		p, err := fs.allocLocked(n)
		if err != nil {
			return m, err
		}
		for i := range n {
			fs.mu.blocks[lb+i] = blk{bUnwritten, p + i}
		}
		fs.mu.cookie++
		m.Type, m.Addr, m.Cookie = iomap.Unwritten, fs.base+p*fs.bs, fs.mu.cookie
	case b.st == bDelalloc && flags&iomap.Direct != 0:
		return m, fmt.Errorf("tinyfs: direct I/O over delalloc at %d", off)
	case b.st == bDelalloc:
		m.Type = iomap.Delalloc
	case b.st == bUnwritten:
		m.Type, m.Addr = iomap.Unwritten, fs.base+b.phys*fs.bs
	default:
		m.Type, m.Addr = iomap.Mapped, fs.base+b.phys*fs.bs
	}
	return m, nil
}

// convert marks the unwritten blocks overlapping [off, off+n) written.
func (fs *tinyFS) convert(off, n int64) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for lb := off / fs.bs; lb < (off+n+fs.bs-1)/fs.bs; lb++ {
		if b := fs.mu.blocks[lb]; b.st == bUnwritten {
			b.st = bWritten
			fs.mu.blocks[lb] = b
			fs.mu.cookie++
		}
	}
}

func (fs *tinyFS) End(off, length, written int64, flags iomap.Flags, m iomap.Mapping) error {
	fs.mu.Lock()
	fs.mu.calls[fmt.Sprintf("end%#x", flags)]++
	fs.mu.Unlock()
	if flags&iomap.Writeback != 0 && written > 0 && m.Type == iomap.Unwritten {
		fs.convert(off, written)
	}
	return nil
}

// EndIO is the direct-write completion hook: convert what was written.
func (fs *tinyFS) EndIO(off, n int64, m iomap.Mapping) error {
	if m.Type == iomap.Unwritten {
		fs.convert(off, n)
	}
	return nil
}

func (fs *tinyFS) Valid(m iomap.Mapping) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return m.Cookie == fs.mu.cookie
}

// punch removes the blocks in [off, end) (block aligned).
func (fs *tinyFS) punch(off, end int64) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for lb := off / fs.bs; lb < end/fs.bs; lb++ {
		delete(fs.mu.blocks, lb)
	}
	fs.mu.cookie++
}

// fallocate allocates unwritten blocks for the holes in [off, end).
func (fs *tinyFS) fallocate(off, end int64) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for lb := off / fs.bs; lb < (end+fs.bs-1)/fs.bs; lb++ {
		if _, ok := fs.mu.blocks[lb]; !ok {
			p, err := fs.allocLocked(1)
			if err != nil {
				return err
			}
			fs.mu.blocks[lb] = blk{bUnwritten, p}
		}
	}
	fs.mu.cookie++
	return nil
}

// state returns the state of file block lb (0 = hole).
func (fs *tinyFS) state(lb int64) bstate {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.mu.blocks[lb].st
}

// set installs block states directly (for table tests).
func (fs *tinyFS) set(lb int64, st bstate, phys int64) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.mu.blocks[lb] = blk{st, phys}
	fs.mu.cookie++
}

func (fs *tinyFS) dio() *iomap.DioOptions {
	return &iomap.DioOptions{BlockSize: fs.bs, EndIO: fs.EndIO}
}
