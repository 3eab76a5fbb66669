package blockdev

import (
	"fmt"
	"io"
	"sync"
	"unsafe"

	"github.com/ext4io/ext4io/blockdev/internal/devutil"
)

// Direct is a Device using O_DIRECT, bypassing the page cache. It is safe
// for concurrent use.
//
// Buffers whose address, offset and length are aligned (see Alignment) go
// straight to the kernel. Others go through aligned bounce buffers from a
// pool; an unaligned write reads the partial logical blocks at its edges,
// patches them and writes them back. Two such read-modify-writes sharing a
// logical block are serialised by a mutex striped on the block number, so
// concurrent writes to disjoint byte ranges never lose each other's bytes.
// ZeroOut and Discard take the same stripes for their partial edge blocks.
//
// The device size must be a multiple of the offset alignment (O_DIRECT
// cannot write a partial final block without growing the file).
// ZeroOut and Discard behave as for File.
type Direct struct {
	fileCore
	memAlign, offAlign int // from statx(STATX_DIOALIGN) or probed; immutable
	bounceSize         int // multiple of offAlign; immutable
	pool               sync.Pool
	stripes            [64]sync.Mutex // guard read-modify-write of a logical block, by blockStripe
}

var (
	_ Device  = (*Direct)(nil)
	_ Aligner = (*Direct)(nil)
)

// Alignment implements Aligner: buffer address alignment and offset/length
// alignment for the zero-copy path.
func (d *Direct) Alignment() (mem, off int) { return d.memAlign, d.offAlign }

func (d *Direct) initDirect(memAlign, offAlign int) error {
	if memAlign <= 0 || offAlign <= 0 || memAlign&(memAlign-1) != 0 || offAlign&(offAlign-1) != 0 {
		return fmt.Errorf("blockdev: %s: bad direct I/O alignment mem %d off %d: %w", d.path, memAlign, offAlign, ErrInvalid)
	}
	if d.size%int64(offAlign) != 0 {
		return fmt.Errorf("blockdev: %s: size %d is not a multiple of the direct I/O alignment %d: %w", d.path, d.size, offAlign, ErrInvalid)
	}
	d.memAlign, d.offAlign = memAlign, offAlign
	d.bounceSize = int(alignUp(256<<10, int64(offAlign)))
	bufAlign := max(memAlign, offAlign)
	d.pool.New = func() any {
		b := alignedBuf(d.bounceSize, bufAlign)
		return &b
	}
	return nil
}

// alignedAddr reports whether p's first byte is at an address that is a
// multiple of align. Direct I/O needs the address; see ioctlRange.
func alignedAddr(p []byte, align int) bool {
	return uintptr(unsafe.Pointer(unsafe.SliceData(p)))%uintptr(align) == 0
}

// alignedBuf returns n bytes whose address is a multiple of align.
func alignedBuf(n, align int) []byte {
	b := make([]byte, n+align)
	for i := range align {
		if alignedAddr(b[i:], align) {
			return b[i : i+n : i+n]
		}
	}
	panic("unreachable: no aligned offset in an over-allocated buffer")
}

func (d *Direct) aligned(p []byte, off int64) bool {
	a := int64(d.offAlign)
	return off%a == 0 && int64(len(p))%a == 0 && alignedAddr(p, d.memAlign)
}

func blockStripe(block int64) int { return int(uint64(block) * 0x9E3779B97F4A7C15 >> 58) }

// lockEdges locks the stripes of the partial logical blocks at the edges of
// [off, off+n) and returns the unlock function. Stripes are taken in
// increasing index order so two callers cannot deadlock.
func (d *Direct) lockEdges(off, n int64) func() {
	a := int64(d.offAlign)
	var idx [2]int
	k := 0
	if off%a != 0 {
		idx[k] = blockStripe(off / a)
		k++
	}
	if end := off + n; end%a != 0 {
		s := blockStripe(end / a)
		if k == 0 || idx[0] != s {
			idx[k] = s
			k++
		}
	}
	if k == 2 && idx[0] > idx[1] {
		idx[0], idx[1] = idx[1], idx[0]
	}
	for i := range k {
		d.stripes[idx[i]].Lock()
	}
	return func() {
		for i := range k {
			d.stripes[idx[i]].Unlock()
		}
	}
}

// ReadAt implements io.ReaderAt.
func (d *Direct) ReadAt(p []byte, off int64) (int, error) {
	if d.closed.Load() {
		return 0, devutil.Closed("blockdev", d.path)
	}
	n, tail := devutil.ClipRead(d.name(), off, len(p), d.size)
	if n == 0 {
		return 0, tail
	}
	if d.aligned(p[:n], off) {
		got, err := d.f.ReadAt(p[:n], off)
		if err != nil {
			return got, d.readErr(off+int64(got), err)
		}
		return got, tail
	}
	bp := d.pool.Get().(*[]byte)
	defer d.pool.Put(bp)
	a := int64(d.offAlign)
	for done := 0; done < n; {
		cur := off + int64(done)
		aoff := alignDown(cur, a)
		skip := int(cur - aoff)
		want := min(n-done, d.bounceSize-skip)
		span := int(alignUp(int64(skip+want), a))
		got, err := d.f.ReadAt((*bp)[:span], aoff)
		if got < skip+want {
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			c := max(0, got-skip)
			copy(p[done:], (*bp)[skip:skip+c])
			return done + c, d.readErr(aoff+int64(got), err)
		}
		copy(p[done:], (*bp)[skip:skip+want])
		done += want
	}
	return n, tail
}

func (d *Direct) readErr(off int64, err error) error {
	if err == io.EOF {
		return io.EOF // the file shrank underneath us
	}
	return d.ioErr("pread", off, err)
}

// WriteAt implements io.WriterAt.
func (d *Direct) WriteAt(p []byte, off int64) (int, error) {
	if err := d.checkWrite("write", off, int64(len(p))); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if d.aligned(p, off) {
		n, err := d.f.WriteAt(p, off)
		if err != nil {
			return n, d.ioErr("pwrite", off+int64(n), err)
		}
		return n, nil
	}
	bp := d.pool.Get().(*[]byte)
	defer d.pool.Put(bp)
	buf := *bp
	a := int64(d.offAlign)
	for done := 0; done < len(p); {
		cur := off + int64(done)
		aoff := alignDown(cur, a)
		skip := int(cur - aoff)
		want := min(len(p)-done, d.bounceSize-skip)
		span := int(alignUp(int64(skip+want), a))
		if err := d.patchWrite(buf[:span], aoff, skip, p[done:done+want]); err != nil {
			return done, err
		}
		done += want
	}
	return len(p), nil
}

// patchWrite writes data at aoff+skip using buf, which covers the aligned
// span [aoff, aoff+len(buf)), reading the partial edge blocks first.
func (d *Direct) patchWrite(buf []byte, aoff int64, skip int, data []byte) error {
	a := d.offAlign
	end := skip + len(data)
	head, tail := skip != 0, end%a != 0
	if head || tail {
		defer d.lockEdges(aoff+int64(skip), int64(len(data)))()
	}
	if head {
		if _, err := d.f.ReadAt(buf[:a], aoff); err != nil {
			return d.ioErr("pread for read-modify-write", aoff, err)
		}
	}
	if last := len(buf) - a; tail && (last != 0 || !head) {
		if _, err := d.f.ReadAt(buf[last:], aoff+int64(last)); err != nil {
			return d.ioErr("pread for read-modify-write", aoff+int64(last), err)
		}
	}
	copy(buf[skip:], data)
	if _, err := d.f.WriteAt(buf, aoff); err != nil {
		return d.ioErr("pwrite", aoff, err)
	}
	return nil
}

// Flush calls fdatasync.
func (d *Direct) Flush() error { return d.flush() }

var _ SyncWriter = (*Direct)(nil)

// WriteAtSync implements SyncWriter: an aligned write is one
// pwritev2(RWF_DSYNC), which the kernel sends as a FUA write where the
// device and file system allow. An unaligned one (a read-modify-write),
// and every write on kernels that refuse the flag, is WriteAt and Flush.
func (d *Direct) WriteAtSync(p []byte, off int64) (int, error) {
	if len(p) == 0 || !d.aligned(p, off) {
		if err := d.checkWrite("write", off, int64(len(p))); err != nil {
			return 0, err
		}
		n, err := d.WriteAt(p, off)
		if err != nil {
			return n, err
		}
		return n, d.flush()
	}
	return d.writeSync(p, off, d.WriteAt)
}

// ZeroOut makes [off, off+n) read as zeroes. Partial logical blocks at
// the edges are written with zeroes through WriteAt (so they take part in
// the stripe locking); the aligned middle is zeroed as for File.
func (d *Direct) ZeroOut(off, n int64) error {
	if err := d.checkWrite("zero out", off, n); err != nil || n == 0 {
		return err
	}
	return d.edgesAndMiddle(off, n, func(a, m int64) error { return d.zeroOut(a, m, d.WriteAt) })
}

// Discard releases [off, off+n) as File.Discard does; partial edge blocks
// are written with zeroes.
func (d *Direct) Discard(off, n int64) error {
	if err := d.checkWrite("discard", off, n); err != nil || n == 0 {
		return err
	}
	return d.edgesAndMiddle(off, n, func(a, m int64) error { return d.discard(a, m, d.WriteAt) })
}

// edgesAndMiddle writes zeroes on the partial logical blocks at the edges
// of [off, off+n) and calls middle on the aligned rest, if any.
func (d *Direct) edgesAndMiddle(off, n int64, middle func(off, n int64) error) error {
	a := int64(d.offAlign)
	lo, hi := alignUp(off, a), alignDown(off+n, a)
	if lo >= hi {
		return writeZeroes(d.WriteAt, off, n)
	}
	if lo > off {
		if err := writeZeroes(d.WriteAt, off, lo-off); err != nil {
			return err
		}
	}
	if err := middle(lo, hi-lo); err != nil {
		return err
	}
	if off+n > hi {
		return writeZeroes(d.WriteAt, hi, off+n-hi)
	}
	return nil
}

// Close closes the file. A second Close returns ErrClosed.
func (d *Direct) Close() error { return d.close() }
