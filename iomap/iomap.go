package iomap

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"syscall"

	"github.com/ext4io/ext4io/internal/errs"
)

// Sentinel errors re-exported from internal/errs so errors.Is works for
// callers that import only iomap.
var (
	ErrInvalid = errs.ErrInvalid
	ErrIO      = errs.ErrIO
	ErrClosed  = errs.ErrClosed
)

var (
	// ErrBadMapping is returned when an Ops returns a mapping that breaks
	// the Begin contract (M1-M4 in the package doc), or a mapping type the
	// operation cannot use (a hole for a direct write, delalloc for direct
	// I/O). It is a bug in the Ops, not a device error. It wraps ErrInvalid.
	ErrBadMapping = fmt.Errorf("iomap: bad mapping: %w", errs.ErrInvalid)
	// ErrNoProgress is returned by Iter when an iteration processed zero
	// bytes without an error (the kernel's WARN + -EIO): it turns a would-be
	// infinite loop into an error. It wraps ErrIO.
	ErrNoProgress = fmt.Errorf("iomap: iteration made no progress: %w", errs.ErrIO)
	// ErrStale is returned by an iteration body (and by Valid-checking
	// operations internally) when the mapping it was given is no longer
	// valid (the kernel's IOMAP_F_STALE). Iter then calls End with the bytes
	// processed so far and asks Begin for a fresh mapping; it is never
	// returned to callers of Iter unless the mapping stays stale
	// maxStaleRetries times in a row without progress.
	ErrStale = errors.New("iomap: stale mapping")
	// ErrNoData is returned by SeekData when there is no data at or after
	// the offset, and by SeekData and SeekHole for an offset at or past the
	// size: lseek's ENXIO. It matches syscall.ENXIO with errors.Is.
	ErrNoData = fmt.Errorf("iomap: no data at or after offset: %w", syscall.ENXIO)
	// ErrWouldBlock is returned by Begin for a NoWait request that would
	// block (take a lock held elsewhere, allocate, start a journal
	// handle): the kernel's -EAGAIN under IOMAP_NOWAIT. It matches
	// syscall.EAGAIN with errors.Is.
	ErrWouldBlock = fmt.Errorf("iomap: would block: %w", syscall.EAGAIN)
	// ErrNeedNormal is returned by an overwrite variant of an Ops (such as
	// ext4's overwrite ops), and by any Ops given OverwriteOnly, when the
	// range is not one it serves (a hole, delalloc, past the on-disk size):
	// the caller retries the rest of the I/O with the normal ops under the
	// lock those expect. Like ext4's overwrite path returning -EAGAIN, it
	// wraps ErrWouldBlock (and so syscall.EAGAIN). Iterators return it
	// with the bytes done before it; nothing of the refused range was
	// touched.
	ErrNeedNormal = fmt.Errorf("iomap: range needs the normal ops: %w", ErrWouldBlock)
)

// Type is the kind of a Mapping. It mirrors the kernel's IOMAP_* types.
type Type uint8

const (
	// Hole: no blocks; reads as zeroes (IOMAP_HOLE).
	Hole Type = iota
	// Delalloc: space reserved, no address yet; data lives only in the page
	// cache until write-back allocates (IOMAP_DELALLOC).
	Delalloc
	// Mapped: blocks at Addr holding written data (IOMAP_MAPPED).
	Mapped
	// Unwritten: blocks allocated at Addr that read as zeroes until
	// converted (IOMAP_UNWRITTEN).
	Unwritten
	// Inline: data stored in InlineData, not on the device (IOMAP_INLINE).
	Inline
)

var typeNames = [...]string{"hole", "delalloc", "mapped", "unwritten", "inline"}

func (t Type) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// MapFlags describe a Mapping; they mirror the kernel's IOMAP_F_* flags.
type MapFlags uint16

const (
	// MapNew: the blocks were allocated by this Begin and hold garbage; the
	// parts the operation does not write must be zeroed (IOMAP_F_NEW).
	MapNew MapFlags = 1 << iota
	// MapDirty: metadata must be committed for the data to be durable, so
	// O_DSYNC writes need a journal commit (IOMAP_F_DIRTY).
	MapDirty
	// MapShared: blocks are shared (reflink); reported as such by Fiemap
	// (IOMAP_F_SHARED). COW is not implemented.
	MapShared
	// MapMerged: the Ops merged several on-disk extents into this mapping;
	// Fiemap reports FIEMAP_EXTENT_MERGED (IOMAP_F_MERGED).
	MapMerged
	// MapSizeChanged: Begin changed the file size (IOMAP_F_SIZE_CHANGED).
	MapSizeChanged
	// MapPrivate is the Ops' own: iomap neither sets nor reads it, and
	// passes it from Begin to the completion hooks and End
	// (IOMAP_F_PRIVATE).
	MapPrivate
)

// Flags are request flags passed to Begin and End; they mirror the kernel's
// IOMAP_* operation flags.
type Flags uint16

const (
	// Write: the caller will write the range (IOMAP_WRITE).
	Write Flags = 1 << iota
	// Zero: the caller is zeroing the range (IOMAP_ZERO).
	Zero
	// Report: fiemap or seek; map without allocating (IOMAP_REPORT).
	Report
	// Fault: a page fault on a mapped file (IOMAP_FAULT).
	Fault
	// Direct: direct I/O; the mapping must carry a device address
	// (IOMAP_DIRECT).
	Direct
	// NoWait: do not block; return an error wrapping syscall.EAGAIN instead
	// (IOMAP_NOWAIT).
	NoWait
	// OverwriteOnly: fail unless the range is already allocated and written
	// (IOMAP_OVERWRITE_ONLY); the ext4 overwrite fast path.
	OverwriteOnly
	// Unshare: unshare shared blocks (IOMAP_UNSHARE). Not used by this package.
	Unshare
	// Writeback: page-cache write-back asks for device addresses for dirty
	// pages; Delalloc ranges must be allocated now. It stands for the
	// kernel's iomap_writeback_ops->map_blocks, folded into Begin; End with
	// Writeback is the end-of-writeback hook (ext4's ext4_end_io /
	// ext4_put_io_end: unwritten conversion, mapping delalloc, i_disksize).
	Writeback
)

// Mapping describes how a byte range of a file maps to storage. It mirrors
// struct iomap. Mappings are values: an Ops hands out copies.
type Mapping struct {
	Offset int64 // file byte offset of the start of the mapping
	Length int64 // bytes, > 0
	Type   Type
	// Addr is the device byte address of Offset for Mapped and Unwritten
	// mappings (iomap->addr); NoAddr otherwise.
	Addr  int64
	Flags MapFlags
	// InlineData holds the bytes of an Inline mapping, from Offset; writes
	// through Inline mappings modify it in place and End must persist it.
	InlineData []byte
	// Cookie is the Ops' validity cookie (iomap->validity_cookie), such as
	// the inode's extent change counter when Begin built the mapping. It is
	// checked by Validator.Valid before page-cache operations use a mapping.
	Cookie uint64
}

// NoAddr is the Addr of mappings without a device address (IOMAP_NULL_ADDR).
const NoAddr int64 = -1

// End returns the file offset just past the mapping.
func (m Mapping) End() int64 { return m.Offset + m.Length }

func (m Mapping) String() string {
	return fmt.Sprintf("%v[%d,+%d)@%d f=%#x", m.Type, m.Offset, m.Length, m.Addr, m.Flags)
}

// Ops maps file ranges to storage. It mirrors struct iomap_ops.
//
// Begin (iomap_begin) returns the mapping for the start of [off, off+length):
// M1 Length > 0; M2 Offset <= off < Offset+Length; M3 for Mapped and
// Unwritten, Addr >= 0; M4 for Direct requests, a Write never gets a Hole
// or Delalloc mapping (Begin must allocate). The mapping may be shorter or
// longer than the request; callers use only the overlap. Begin with Write
// may allocate or reserve; with Report it must not change anything.
//
// End (iomap_end) is called once after every successful Begin, with the
// range actually used (off, length: the overlap of request and mapping),
// how many of those bytes were processed (written), the same flags and the
// mapping. It releases what Begin took and undoes allocations for unwritten
// parts if it wants to. An error from End stops the iteration.
//
// Implementations used by a PageCache must allow Begin(Writeback) to be
// called from inside any PageCache call, including between Begin and End of
// a buffered write to the same file (eviction writes back dirty pages under
// memory pressure): Begin must not take locks its callers hold across
// Begin..End.
type Ops interface {
	Begin(off, length int64, flags Flags) (Mapping, error)
	End(off, length, written int64, flags Flags, m Mapping) error
}

// Overwriter is an optional interface of Ops: the single-extent fast path
// of DirectWrite and DirectRead (what ext4's overwrite ops serve most
// often). MapOverwrite is asked first, with the whole request and the
// flags Begin would get; it returns the device address of off and true
// only when Begin would return one Mapped mapping with no MapFlags that
// covers all of [off, off+length), and End and any completion hook
// (Completer) would have nothing to do for it. The iterator then issues
// the one device I/O at addr and calls neither Begin nor End. Otherwise it
// returns false, having changed nothing and taken nothing, and the
// iterator maps with Begin as usual. MapOverwrite must answer as Begin
// would under the same flags (OverwriteOnly, NoWait included): it is a
// shortcut, never a different mapping. Counters count an answered
// MapOverwrite as one Begin, End and device I/O.
type Overwriter interface {
	MapOverwrite(off, length int64, flags Flags) (addr int64, ok bool)
}

// Completer is an optional interface of Ops: EndIO is their direct-write
// completion hook (iomap_dio_ops->end_io), with DioOptions.EndIO's
// contract. DirectWrite calls it when DioOptions.EndIO is nil, so an Ops
// that must convert unwritten extents or map new blocks at completion
// (ext4's normal and overwrite ops) works when handed to DirectWrite
// alone.
type Completer interface {
	EndIO(off, n int64, m Mapping) error
}

// Validator is an optional interface of Ops: Valid reports whether a
// mapping returned earlier by Begin is still current (the kernel's
// iomap_folio_ops->iomap_valid comparing validity_cookie). Buffered writes
// check it under the page lock before copying; a stale mapping is dropped
// and looked up again.
type Validator interface {
	Valid(m Mapping) bool
}

// Funcs adapts functions to Ops and Validator, so test doubles are cheap. A
// nil End does nothing; a nil Valid treats every mapping as valid; a nil
// Begin returns an error.
type Funcs struct {
	BeginFunc func(off, length int64, flags Flags) (Mapping, error)
	EndFunc   func(off, length, written int64, flags Flags, m Mapping) error
	ValidFunc func(m Mapping) bool
}

var (
	_ Ops       = Funcs{}
	_ Validator = Funcs{}
)

// Begin calls f.BeginFunc.
func (f Funcs) Begin(off, length int64, flags Flags) (Mapping, error) {
	if f.BeginFunc == nil {
		return Mapping{}, fmt.Errorf("iomap: Funcs without BeginFunc: %w", errs.ErrUnsupported)
	}
	return f.BeginFunc(off, length, flags)
}

// End calls f.EndFunc if set.
func (f Funcs) End(off, length, written int64, flags Flags, m Mapping) error {
	if f.EndFunc == nil {
		return nil
	}
	return f.EndFunc(off, length, written, flags, m)
}

// Valid calls f.ValidFunc if set.
func (f Funcs) Valid(m Mapping) bool { return f.ValidFunc == nil || f.ValidFunc(m) }

// maxStaleRetries bounds consecutive stale mappings without progress.
const maxStaleRetries = 16

// checkRange validates a byte range [off, off+length) of a file.
func checkRange(what string, off, length int64) error {
	if off < 0 || length < 0 || length > math.MaxInt64-off {
		return fmt.Errorf("iomap: %s: bad range [%d, +%d): %w", what, off, length, errs.ErrInvalid)
	}
	return nil
}

// cursor is the iteration state of iomap_iter without closures, so the hot
// direct I/O path does not allocate. Usage: for c.more() { c.begin();
// ...; c.end(processed, err) }.
type cursor struct {
	ops   Ops
	pos   int64 // next byte to map
	end   int64 // end of the request
	flags Flags
	m     Mapping
	n     int64           // bytes of m usable from pos
	stale int             // consecutive stale results without progress
	done  int64           // bytes processed so far
	ctr   *atomicCounters // the counter stripe to count on; nil: none
	// fused, if set, counts a Begin and its End with one add (see
	// atomicCounters.dioWrites); calls that fail are counted one by one.
	// fusedDev counts them with the segment's one device I/O instead, when
	// the body sets devIO.
	fused, fusedDev *atomic.Int64
	devIO           bool // the body issued one device I/O, not counted yet
}

func (c *cursor) more() bool { return c.pos < c.end }

// begin maps c.pos.
func (c *cursor) begin() error {
	if c.fused == nil {
		c.ctr.countBegin(c.flags)
	}
	m, err := c.ops.Begin(c.pos, c.end-c.pos, c.flags)
	if err != nil {
		if c.fused != nil {
			c.ctr.countBegin(c.flags)
		}
		if err == ErrNeedNormal || err == ErrWouldBlock {
			// A refusal, not a failure: returned as it is, without the
			// cost of wrapping, for callers that go on with other ops
			// (the bytes done say where the refusal began).
			return err
		}
		return fmt.Errorf("iomap: begin [%d, +%d): %w", c.pos, c.end-c.pos, err)
	}
	if m.Length <= 0 || m.Offset > c.pos || m.Length > math.MaxInt64-m.Offset || m.End() <= c.pos ||
		((m.Type == Mapped || m.Type == Unwritten) && m.Addr < 0) ||
		(m.Type == Inline && int64(len(m.InlineData)) < m.Length) {
		if c.fused != nil {
			c.ctr.countBegin(c.flags)
		}
		c.ctr.countEnd(c.flags)
		eerr := c.ops.End(c.pos, 0, 0, c.flags, m)
		return errs.Join(fmt.Errorf("begin at %d returned %v: %w", c.pos, m, ErrBadMapping), eerr)
	}
	c.m = m
	c.n = min(m.End(), c.end) - c.pos
	return nil
}

// finish calls End for the current mapping and advances by processed.
// ferr is the body's error. It returns the error that stops the iteration.
func (c *cursor) finish(processed int64, ferr error) error {
	if processed < 0 || processed > c.n {
		ferr = errs.Join(ferr, fmt.Errorf("iomap: body processed %d of %d bytes: %w", processed, c.n, ErrInvalid))
		processed = max(0, min(processed, c.n))
	}
	switch {
	case c.devIO && c.fusedDev != nil:
		c.fusedDev.Add(1) // this call's Begin, device I/O and End
	case c.fused != nil:
		c.fused.Add(1) // this call's Begin and End
	default:
		c.ctr.countEnd(c.flags)
	}
	c.devIO = false
	eerr := c.ops.End(c.pos, c.n, processed, c.flags, c.m)
	if eerr != nil {
		eerr = fmt.Errorf("iomap: end [%d, +%d) written %d: %w", c.pos, c.n, processed, eerr)
	}
	c.pos += processed
	c.done += processed
	if ferr != nil && errors.Is(ferr, ErrStale) && eerr == nil {
		if c.ctr != nil {
			c.ctr.stale.Add(1)
		}
		if processed > 0 {
			c.stale = 0
			return nil
		}
		if c.stale++; c.stale < maxStaleRetries {
			return nil
		}
		return fmt.Errorf("iomap: mapping at %d stale %d times: %w", c.pos, c.stale, ferr)
	}
	if ferr != nil || eerr != nil {
		return errs.Join(ferr, eerr)
	}
	if processed == 0 {
		return fmt.Errorf("iomap: at %d with %v: %w", c.pos, c.m, ErrNoProgress)
	}
	c.stale = 0
	return nil
}

// IterFunc processes n bytes at off, which lie inside m. It returns how
// many bytes it processed (0 <= processed <= n) and an error, or ErrStale
// to ask for a fresh mapping after processing some bytes.
type IterFunc func(m Mapping, off, n int64) (processed int64, err error)

// Iter walks [off, off+length) mapping by mapping; it mirrors iomap_iter.
// For each mapping it calls ops.Begin, fn on the overlap, then ops.End with
// what fn processed (End is called even when fn fails), and advances by the
// processed bytes, so short mappings and short processing are both
// continued with a new Begin. It returns the total processed and the first
// error. Zero progress without an error is ErrNoProgress. Iter counts
// nothing (see CounterSet).
func Iter(ops Ops, off, length int64, flags Flags, fn IterFunc) (int64, error) {
	return iter(ops, off, length, flags, nil, fn)
}

// iter is Iter counting on ctr (nil: not counted).
func iter(ops Ops, off, length int64, flags Flags, ctr *atomicCounters, fn IterFunc) (int64, error) {
	if err := checkRange("iter", off, length); err != nil {
		return 0, err
	}
	c := cursor{ops: ops, pos: off, end: off + length, flags: flags, ctr: ctr}
	for c.more() {
		if err := c.begin(); err != nil {
			return c.done, err
		}
		processed, ferr := fn(c.m, c.pos, c.n)
		if err := c.finish(processed, ferr); err != nil {
			return c.done, err
		}
	}
	return c.done, nil
}
