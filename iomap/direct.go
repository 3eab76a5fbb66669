package iomap

import (
	"fmt"
	"math"

	"github.com/ext4io/ext4io/blockdev"
)

// DioOptions configure DirectRead and DirectWrite. The zero value (or nil)
// means no sub-block zeroing, no completion hook and no counting.
type DioOptions struct {
	// BlockSize is the filesystem block size, a power of two. When a write
	// does not cover whole blocks of a mapping that is New or Unwritten,
	// the rest of those blocks is zeroed on the device first
	// (iomap_dio_zero), so converting or exposing the blocks never exposes
	// stale data. 0 disables zeroing; Ops whose blocks are bigger than the
	// device's logical block must set it.
	BlockSize int64
	// EndIO is the completion hook (iomap_dio_ops->end_io): it is called
	// for each mapping segment of a write once its data (and its zeroed
	// head and tail) is on the device, before End, with the file range
	// written and its mapping. It is where the Ops converts unwritten
	// extents. It is never called for bytes that failed: a device error in
	// a segment counts none of that segment as written. An error from
	// EndIO stops the write, and the segment counts as not written.
	EndIO func(off, n int64, m Mapping) error
	// Align, when set, is the device's I/O alignment as the caller
	// computed it (its logical block size, or its Aligner offset
	// alignment if larger), saving the device calls per I/O that find it.
	Align int64
	// Flags are request flags added to every Begin and End of the
	// operation, on top of Direct (and Write for writes): NoWait (the Ops
	// return ErrWouldBlock rather than block) and OverwriteOnly (the Ops
	// map only ranges they need not allocate or convert, else return
	// ErrNeedNormal), as the kernel's iomap_dio_rw passes IOMAP_NOWAIT and
	// IOMAP_OVERWRITE_ONLY. Other flags fail with ErrInvalid.
	Flags Flags
	// Counters, when set, counts the operation's Begin and End calls and
	// device I/O; nil counts nothing.
	Counters *CounterSet
}

// dioRequestFlags are the flags DioOptions.Flags may carry.
const dioRequestFlags = NoWait | OverwriteOnly

// zeroes is a shared source of zero bytes for sub-block zeroing (the
// kernel's ZERO_PAGE). It is never written.
var zeroes = make([]byte, 64<<10)

// dioAlignment returns the offset and length alignment direct I/O on dev
// requires: its logical block size, or its Aligner offset alignment if
// larger.
func dioAlignment(dev blockdev.Device) int64 {
	a := int64(dev.LogicalBlockSize())
	if al, ok := dev.(blockdev.Aligner); ok {
		if _, off := al.Alignment(); int64(off) > a {
			a = int64(off)
		}
	}
	if a <= 0 {
		a = 1
	}
	return a
}

// aligned reports whether x is a multiple of a (> 0), without a division
// when a is a power of two (device block sizes are).
func aligned(x, a int64) bool {
	if a&(a-1) == 0 {
		return x&(a-1) == 0
	}
	return x%a == 0
}

func checkDio(what string, dev blockdev.Device, n int, off int64, opt *DioOptions) error {
	if err := checkRange(what, off, int64(n)); err != nil {
		return err
	}
	a := int64(0)
	if opt != nil {
		a = opt.Align
	}
	if a <= 0 {
		a = dioAlignment(dev)
	}
	if !aligned(off, a) || !aligned(int64(n), a) {
		return fmt.Errorf("iomap: %s [%d, +%d) not aligned to the device's %d-byte logical block: %w",
			what, off, n, a, ErrInvalid)
	}
	if opt != nil && opt.Flags&^dioRequestFlags != 0 {
		return fmt.Errorf("iomap: %s: request flags %#x: only NoWait and OverwriteOnly: %w", what, opt.Flags, ErrInvalid)
	}
	if opt != nil && opt.BlockSize != 0 && (opt.BlockSize < 0 || opt.BlockSize&(opt.BlockSize-1) != 0) {
		return fmt.Errorf("iomap: %s: block size %d not a power of two: %w", what, opt.BlockSize, ErrInvalid)
	}
	return nil
}

// DirectRead reads len(p) bytes at file offset off straight from the
// device, mapping with Begin(Direct) (iomap_dio_rw for reads): one ReadAt
// per Mapped segment; Hole and Unwritten read as zeroes; Inline is copied.
// off and len(p) must be multiples of the device's logical block size (or
// its Aligner offset alignment); otherwise the error wraps ErrInvalid.
// Delalloc mappings are an error wrapping ErrBadMapping: callers write back
// the page cache over the range first. The caller clips reads at EOF.
// It returns the bytes read before the first error. An ops that
// implements Overwriter is asked MapOverwrite first; when it answers, the
// read is that one ReadAt.
//
// DirectRead is safe for concurrent use if ops and dev are.
func DirectRead(dev blockdev.Device, ops Ops, p []byte, off int64, opt *DioOptions) (int, error) {
	if err := checkDio("direct read", dev, len(p), off, opt); err != nil {
		return 0, err
	}
	flags := Direct
	var ctr *atomicCounters
	if opt != nil {
		flags |= opt.Flags
		ctr = opt.Counters.forBuf(p)
	}
	if ow, ok := ops.(Overwriter); ok {
		if addr, ok := ow.MapOverwrite(off, int64(len(p)), flags); ok && addr >= 0 {
			if ctr != nil {
				ctr.dioReadsDev.Add(1)
			}
			if _, err := dev.ReadAt(p, addr); err != nil {
				return 0, fmt.Errorf("iomap: direct read file [%d, +%d) at device %d: %w", off, len(p), addr, err)
			}
			return len(p), nil
		}
	}
	c := cursor{ops: ops, pos: off, end: off + int64(len(p)), flags: flags, ctr: ctr}
	if ctr != nil {
		c.fused, c.fusedDev = &ctr.dioReads, &ctr.dioReadsDev
	}
	for c.more() {
		if err := c.begin(); err != nil {
			return int(c.done), err
		}
		b := p[c.pos-off : c.pos-off+c.n]
		var err error
		switch c.m.Type {
		case Mapped:
			c.devIO = true // counted with End
			if _, rerr := dev.ReadAt(b, c.m.Addr+(c.pos-c.m.Offset)); rerr != nil {
				err = fmt.Errorf("iomap: direct read file [%d, +%d) at device %d: %w", c.pos, c.n, c.m.Addr+(c.pos-c.m.Offset), rerr)
			}
		case Hole, Unwritten:
			clear(b)
		case Inline:
			copy(b, c.m.InlineData[c.pos-c.m.Offset:])
		default:
			err = fmt.Errorf("iomap: direct read at %d got %v mapping (write back first): %w", c.pos, c.m.Type, ErrBadMapping)
		}
		processed := c.n
		if err != nil {
			processed = 0
		}
		if err := c.finish(processed, err); err != nil {
			return int(c.done), err
		}
	}
	return int(c.done), nil
}

// DirectWrite writes p at file offset off straight to the device
// (iomap_dio_rw for writes). For each mapping from Begin(Write|Direct,
// plus opt.Flags) it
// zeroes the uncovered parts of partial blocks of New or Unwritten
// mappings (when opt.BlockSize is set), issues one WriteAt for the data,
// calls opt.EndIO for the completed segment, then End with the bytes
// written. Hole and Delalloc mappings are errors wrapping ErrBadMapping
// (the Ops must allocate for direct writes). Alignment as for DirectRead.
// It returns the bytes written and converted before the first error; End
// and EndIO only ever see completed bytes. Without opt.EndIO, an ops that
// implements Completer has its EndIO called instead. An overwrite Ops that
// refuses the rest of the range stops the write with an error matching
// ErrNeedNormal, after the bytes it did map. When opt sets Align and no
// EndIO, an ops that implements Overwriter is asked MapOverwrite first;
// when it answers, the write is that one WriteAt (DirectOverwrite). A
// caller's EndIO is called for every write, so it turns that path off.
//
// DirectWrite is safe for concurrent use if ops and dev are; concurrent
// sub-block writes into the same New or Unwritten block race on the zeroing
// (as in Linux), so callers serialise unaligned writes.
func DirectWrite(dev blockdev.Device, ops Ops, p []byte, off int64, opt *DioOptions) (int, error) {
	// The single-extent fast path (DirectOverwrite's); the iterator and
	// its frame are directWrite's.
	if ow, ok := ops.(Overwriter); ok && opt != nil && opt.Align > 0 && opt.EndIO == nil {
		n := int64(len(p))
		if off >= 0 && n > 0 && n <= math.MaxInt64-off && aligned(off, opt.Align) && aligned(n, opt.Align) &&
			opt.Flags&^dioRequestFlags == 0 && opt.BlockSize >= 0 && opt.BlockSize&(opt.BlockSize-1) == 0 {
			if addr, ok := ow.MapOverwrite(off, n, Write|Direct|opt.Flags); ok && addr >= 0 {
				if ctr := opt.Counters.forBuf(p); ctr != nil {
					ctr.dioWritesDev.Add(1)
				}
				if _, err := dev.WriteAt(p, addr); err != nil {
					return 0, overwriteError("write", off, n, addr, err)
				}
				return len(p), nil
			}
		}
	}
	return directWrite(dev, ops, p, off, opt)
}

// DirectOverwrite is DirectWrite's single-extent fast path alone, for a
// caller that goes on another way when it does not apply: when
// MapOverwrite (asked with Write, Direct and opt.Flags) maps all of [off,
// off+len(p)), DirectOverwrite issues the one WriteAt and returns
// len(p), or 0 and the device's error. Otherwise it writes nothing, calls
// no Begin or End and returns an error matching ErrNeedNormal, as
// DirectWrite does when OverwriteOnly ops refuse a range; the caller then
// writes the range through DirectWrite (or its own path). Requests are
// checked as DirectWrite checks them (errors wrapping ErrInvalid; an
// empty one writes nothing); opt must set Align, and no EndIO, which the
// fast path never calls.
//
// It is what DirectWrite with OverwriteOnly does for the common case
// without the iterator's second look at a range MapOverwrite refused.
// DirectOverwrite is safe for concurrent use if ow and dev are.
func DirectOverwrite(dev blockdev.Device, ow Overwriter, p []byte, off int64, opt *DioOptions) (int, error) {
	n := int64(len(p))
	if opt == nil || opt.Align <= 0 || opt.EndIO != nil || !(off >= 0 && n > 0 && n <= math.MaxInt64-off && aligned(off, opt.Align) && aligned(n, opt.Align) &&
		opt.Flags&^dioRequestFlags == 0 && opt.BlockSize >= 0 && opt.BlockSize&(opt.BlockSize-1) == 0) {
		// Bad options, or a request checkDio refuses (or an empty one).
		return 0, overwriteRequest(dev, len(p), off, opt)
	}
	addr, ok := ow.MapOverwrite(off, n, Write|Direct|opt.Flags)
	if !ok || addr < 0 {
		return 0, ErrNeedNormal
	}
	if ctr := opt.Counters.forBuf(p); ctr != nil {
		ctr.dioWritesDev.Add(1)
	}
	if _, err := dev.WriteAt(p, addr); err != nil {
		return 0, overwriteError("write", off, n, addr, err)
	}
	return len(p), nil
}

// overwriteRequest is DirectOverwrite's error for options without Align
// or with EndIO, or for a request its checks refused: checkDio's, nil for
// an empty request.
func overwriteRequest(dev blockdev.Device, n int, off int64, opt *DioOptions) error {
	if opt == nil || opt.Align <= 0 || opt.EndIO != nil {
		return fmt.Errorf("iomap: direct overwrite: the options must set Align and no EndIO: %w", ErrInvalid)
	}
	return checkDio("direct overwrite", dev, n, off, opt)
}

// overwriteError wraps the device error of a fast-path I/O.
func overwriteError(what string, off, n, addr int64, err error) error {
	return fmt.Errorf("iomap: direct %s file [%d, +%d) at device %d: %w", what, off, n, addr, err)
}

// directWrite is DirectWrite's iterator: Begin, the segment's write,
// EndIO and End for each mapping.
func directWrite(dev blockdev.Device, ops Ops, p []byte, off int64, opt *DioOptions) (int, error) {
	if err := checkDio("direct write", dev, len(p), off, opt); err != nil {
		return 0, err
	}
	var o DioOptions
	if opt != nil {
		o = *opt
	}
	// The Completer is called through its interface: a method value
	// would be allocated on every write.
	var comp Completer
	if o.EndIO == nil {
		comp, _ = ops.(Completer)
	}
	ctr := o.Counters.forBuf(p)
	flags := Write | Direct | o.Flags
	c := cursor{ops: ops, pos: off, end: off + int64(len(p)), flags: flags, ctr: ctr}
	if ctr != nil {
		c.fused, c.fusedDev = &ctr.dioWrites, &ctr.dioWritesDev
	}
	for c.more() {
		if err := c.begin(); err != nil {
			return int(c.done), err
		}
		b := p[c.pos-off : c.pos-off+c.n]
		var err error
		switch c.m.Type {
		case Mapped, Unwritten:
			c.devIO, err = dioWriteSegment(dev, o.BlockSize, ctr, c.m, b, c.pos) // the data write, counted with End
		case Inline:
			copy(c.m.InlineData[c.pos-c.m.Offset:], b)
		default:
			err = fmt.Errorf("iomap: direct write at %d got %v mapping (Begin must allocate): %w", c.pos, c.m.Type, ErrBadMapping)
		}
		if err == nil && (o.EndIO != nil || comp != nil) {
			if o.EndIO != nil {
				err = o.EndIO(c.pos, c.n, c.m)
			} else {
				err = comp.EndIO(c.pos, c.n, c.m)
			}
			if err != nil {
				err = fmt.Errorf("iomap: end io [%d, +%d): %w", c.pos, c.n, err)
			} else if ctr != nil {
				ctr.endIO.Add(c.n)
			}
		}
		processed := c.n
		if err != nil {
			processed = 0
		}
		if err := c.finish(processed, err); err != nil {
			return int(c.done), err
		}
	}
	return int(c.done), nil
}

// dioWriteSegment writes b at file offset pos inside mapping m, zeroing the
// rest of partial blocks first when m is New or Unwritten. issued reports
// whether the data's WriteAt was called, for the caller to count (the
// zeroing writes count themselves, on ctr).
func dioWriteSegment(dev blockdev.Device, bs int64, ctr *atomicCounters, m Mapping, b []byte, pos int64) (issued bool, err error) {
	addr := m.Addr + (pos - m.Offset)
	n := int64(len(b))
	if bs > 0 && (m.Flags&MapNew != 0 || m.Type == Unwritten) {
		if head := pos & (bs - 1); head != 0 {
			head = min(head, pos-m.Offset) // never zero outside the mapping
			if err := zeroDevice(dev, ctr, addr-head, head); err != nil {
				return false, err
			}
		}
		if e := pos + n; e&(bs-1) != 0 {
			tail := min(bs-e&(bs-1), m.End()-e)
			if err := zeroDevice(dev, ctr, addr+n, tail); err != nil {
				return false, err
			}
		}
	}
	if _, err := dev.WriteAt(b, addr); err != nil {
		return true, fmt.Errorf("iomap: direct write file [%d, +%d) at device %d: %w", pos, n, addr, err)
	}
	return true, nil
}

// zeroDevice writes n zero bytes at device address addr (iomap_dio_zero),
// counting on ctr (nil: not counted).
func zeroDevice(dev blockdev.Device, ctr *atomicCounters, addr, n int64) error {
	for n > 0 {
		l := min(n, int64(len(zeroes)))
		if ctr != nil {
			ctr.devWrites.Add(1)
		}
		if _, err := dev.WriteAt(zeroes[:l], addr); err != nil {
			return fmt.Errorf("iomap: zeroing partial block at device %d (+%d): %w", addr, l, err)
		}
		if ctr != nil {
			ctr.zeroed.Add(l)
		}
		addr += l
		n -= l
	}
	return nil
}
