package ext4io

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"slices"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/esc"
	"github.com/ext4io/ext4io/extent"
	"github.com/ext4io/ext4io/internal/stripe"
	"github.com/ext4io/ext4io/iomap"
)

// Direct writes through iomap: ext4's iomap ops (ext4_iomap_ops) driving
// iomap.DirectWrite.
//
// dioOps is the normal variant with the overwrite variant folded into
// Begin, as current Linux does: a range that is already allocated (written
// or unwritten) is mapped from the extent-status cache without a journal
// handle or any allocation (ext4_iomap_overwrite_ops' "pretend we are
// reading"), so with shared set the ops serve the shared-lock fast path
// and refuse holes (errNeedExclusive) instead of allocating. Under the
// exclusive lock Begin allocates blocks for holes and the completion hook
// maps them once the data is on the device; unwritten blocks are converted
// after completion (endIO), the data always on the device before the
// metadata that exposes it: under the shared lock the completion queues
// the conversion for the extent tree (conv.go), otherwise (and with
// Options.Tuning.EagerConversions) it converts in the tree itself. Each mapping
// carries the inode's change counter as its validity cookie. Both variants
// are public as File.NormalOps and File.OverwriteOps (iomapops.go), and
// File's direct writes run on those values through iomap only: an
// aligned write first tries the overwrite ops with iomap.OverwriteOnly
// outside any operation (directOverwrite), where a write into written
// blocks of one extent takes iomap's single-extent fast path
// (MapOverwrite, iomap.Overwriter: one lookup, one device write), and
// goes on inside an operation with what they refused (directShared,
// then the exclusive lock), where Begin maps it.

// dioAlign is the alignment iomap.DirectWrite requires on dev: its logical
// block size, or its Aligner's offset alignment if larger.
func dioAlign(dev blockdev.Device) int64 {
	a := int64(dev.LogicalBlockSize())
	if al, ok := dev.(blockdev.Aligner); ok {
		if _, off := al.Alignment(); int64(off) > a {
			a = int64(off)
		}
	}
	return max(a, 1)
}

// errNeedExclusive stops a shared-lock direct write at a range that needs
// allocation; the write goes on under the exclusive lock. It is iomap's
// "not mine, try the normal ops" answer of the overwrite ops.
var errNeedExclusive = iomap.ErrNeedNormal

// mapQueued marks an unwritten mapping whose conversion the completion
// queues instead of making it in the extent tree (conv.go).
const mapQueued = iomap.MapPrivate

// dioOps are ext4's normal ops (shared false: File.NormalOps) and overwrite
// ops (shared true: File.OverwriteOps); iomapops.go documents both.
type dioOps struct {
	f      *File
	shared bool // the caller holds n.mu shared: map allocated ranges only
	// opts are directWrite's iomap options with EndIO bound to endIO,
	// made on its first write so that a write allocates no method
	// value; guarded by f.n.mu held exclusively.
	opts iomap.DioOptions
}

func (o *dioOps) Begin(off, length int64, flags iomap.Flags) (iomap.Mapping, error) {
	f, n := o.f, o.f.n
	if !f.isOpen() {
		// The caller's LockIO checked; a caller without it, after Close,
		// gets the error rather than a mapping of a closed file.
		return iomap.Mapping{}, f.openError("map")
	}
	if off < 0 || length < 0 || off > math.MaxInt64-length {
		// The iterators check their ranges (checkDio); a caller driving
		// Begin itself gets the error rather than a mapping past any
		// block a file can have.
		return iomap.Mapping{}, &fs.PathError{Op: "map", Path: f.name, Err: fmt.Errorf("ext4io: range [%d, +%d): %w", off, length, ErrInvalid)}
	}
	bs, sh := int64(f.v.bs), f.v.bshift
	lblk := uint64(off) >> sh // offsets are not negative (checkDio)
	endBlk := uint64(off+length+bs-1) >> sh
	if flags&(iomap.Direct|iomap.Report) == 0 {
		// Buffered I/O maps through the page cache's own ops (bufOps):
		// blocks allocated here would never be mapped.
		return iomap.Mapping{}, fmt.Errorf("ext4io: inode %d: the normal and overwrite ops serve direct I/O only (flags %#x): %w", f.ino, flags, ErrUnsupported)
	}
	if o.shared && flags&iomap.Write != 0 && uint64(off) >= n.diskSize() {
		return iomap.Mapping{}, errNeedExclusive // the size must move: normal ops
	}
	cookie := f.m.seq.Load()
	m, err := f.m.lookupN(lblk, endBlk-lblk)
	if err != nil {
		return iomap.Mapping{}, err
	}
	nblk := min(m.n, endBlk-lblk)
	out := iomap.Mapping{Offset: int64(lblk) * bs, Length: int64(nblk) * bs, Addr: int64(m.pblk) * bs, Cookie: cookie}
	if o.shared && flags&iomap.Write != 0 {
		// The overwrite ops map inside the on-disk size only.
		nblk = min(nblk, (n.diskSize()+uint64(bs)-1)>>sh-lblk)
		out.Length = int64(nblk) * bs
	}
	switch {
	case m.kind == mapWritten:
		out.Type = iomap.Mapped
		// A caller driving the ops on its own device handle bypasses
		// v.dev: the blocks' pending write in place comes first
		// (homewrite.go); a NoWait request does not wait for it.
		if flags&iomap.NoWait != 0 && f.v.home.h.pending(out.Addr, out.Length) {
			return iomap.Mapping{}, iomap.ErrWouldBlock
		}
		f.v.home.h.wait(out.Addr, out.Length)
	case flags&iomap.Write == 0:
		// A direct read: report, changing nothing.
		out.Addr = iomap.NoAddr
		switch m.kind {
		case mapUnwritten:
			out.Type, out.Addr = iomap.Unwritten, int64(m.pblk)*bs
		case mapDelayed:
			out.Type = iomap.Delalloc
		default:
			out.Type = iomap.Hole
		}
	case m.kind == mapUnwritten && flags&iomap.OverwriteOnly != 0:
		return iomap.Mapping{}, errNeedExclusive // needs a conversion
	case m.kind == mapUnwritten:
		if f.v.zchunk > 0 && endBlk <= n.diskBlocks(uint64(bs)) {
			// Options.Tuning.ZeroOutChunk: make the chunk written (zeroed) and
			// map it again; the write is then an overwrite.
			did, err := f.zeroConvert(lblk, endBlk, o.shared)
			if err != nil {
				return iomap.Mapping{}, err
			}
			out, err := o.Begin(off, length, flags)
			if did {
				out.Flags |= iomap.MapDirty // the conversion is not committed yet
			}
			return out, err
		}
		out.Type = iomap.Unwritten
		if o.shared && f.v.queueConversions(n) {
			// The completion queues the conversion (conv.go).
			out.Flags |= mapQueued
		} else if !f.v.opts.Tuning.DeferSplits {
			if err := f.splitForIO(lblk, nblk, o.shared); err != nil {
				return iomap.Mapping{}, err
			}
		}
	case o.shared || flags&iomap.OverwriteOnly != 0:
		return iomap.Mapping{}, errNeedExclusive
	case flags&iomap.NoWait != 0:
		return iomap.Mapping{}, iomap.ErrWouldBlock // allocation takes a journal handle
	default:
		// A hole (or delayed blocks whose pages were dropped): allocate.
		// The blocks are mapped at completion, in this operation.
		if m.kind == mapDelayed {
			n.bops.dropDelayedLocked(lblk, nblk)
		}
		start, got, err := f.allocRun(lblk, nblk, extent.MaxWrittenLen)
		if err != nil {
			return iomap.Mapping{}, err
		}
		out.Type, out.Addr, out.Length, out.Flags = iomap.Mapped, int64(start)*bs, int64(got)*bs, iomap.MapNew
	}
	return out, nil
}

// MapOverwrite is Begin's written case alone (iomap.Overwriter), the
// single-extent fast path of iomap.DirectWrite, DirectOverwrite and
// DirectRead: the device address of off when written blocks of one
// extent cover [off, off+length), inside the on-disk size for the
// overwrite ops' writes. Such a mapping needs no End and no completion.
// Anything else is false, and Begin maps it (or refuses it) as usual;
// lookup errors and extents past the end of the volume are Begin's to
// report.
func (o *dioOps) MapOverwrite(off, length int64, flags iomap.Flags) (int64, bool) {
	f := o.f
	if flags&(iomap.Direct|iomap.Report) == 0 || length <= 0 || off < 0 || off > math.MaxInt64-length || !f.isOpen() {
		return 0, false // Begin serves or refuses it
	}
	bs, sh := int64(f.v.bs), f.v.bshift
	lblk := uint64(off) >> sh
	endBlk := uint64(off+length+bs-1) >> sh
	if o.shared && flags&iomap.Write != 0 && endBlk > (f.n.diskSize()+uint64(bs)-1)>>sh {
		return 0, false // Begin would clip the mapping at the on-disk size
	}
	nblk := endBlk - lblk
	m, err := f.m.lookupN(lblk, nblk)
	if err != nil || m.kind != mapWritten || m.n < nblk || m.pblk+nblk > f.v.sb.BlocksCount {
		return 0, false
	}
	if flags&iomap.NoWait != 0 && f.v.home.h.pending(int64(m.pblk)<<sh, int64(nblk)<<sh) {
		return 0, false // Begin refuses it
	}
	f.v.home.h.wait(int64(m.pblk)<<sh, int64(nblk)<<sh) // as in Begin
	return int64(m.pblk)<<sh + off&(bs-1), true
}

var _ iomap.Overwriter = (*dioOps)(nil)

// endIO is the completion hook (ext4_dio_write_end_io): [off, off+n) of m
// is on the device, with the rest of its partial new or unwritten blocks
// zeroed.
func (o *dioOps) endIO(off, n int64, m iomap.Mapping) error {
	f, bs := o.f, int64(o.f.v.bs)
	first := off / bs
	last := (off + n + bs - 1) / bs
	pblk := uint64(m.Addr/bs) + uint64(first-m.Offset/bs)
	switch {
	case m.Type == iomap.Unwritten:
		if m.Flags&mapQueued != 0 {
			r := convRun{lblk: uint32(first), n: uint32(last - first), pblk: pblk}
			// Queued before lookups say written: a cache miss answered
			// from the tree in between sees the queue (mapper.diskLookup).
			// The cache keeps its unwritten entry and the blocks are
			// marked written beside it (convbits.go): no entry changes, so
			// seq stays and the front slots stay valid. A mapping taken
			// before says unwritten for blocks whose write had not
			// completed then: a read returns zeroes (it raced the write),
			// a direct write queues the run again (harmless); buffered
			// writes, which would zero the rest of such a block, run
			// under the exclusive lock, and reads do not cache pages.
			full := f.queueConversion(r)
			f.n.conv.bits.set(r.lblk, r.n)
			if full {
				// This write is done and queued; a batch short of space
				// stays queued for the commit (Sync reports it).
				if err := f.v.applyFull(f.n); !errors.Is(err, ErrNoSpace) {
					return err
				}
			}
			return nil
		}
		if f.v.opts.Tuning.DeferSplits {
			f.v.stats.splitsDeferred.Add(1)
			if !o.shared {
				return f.convertLocked(uint64(first), uint64(last-first))
			}
		}
		if !o.shared {
			return f.convertExactLocked(uint64(first), uint64(last-first), pblk)
		}
		f.n.dataMu.Lock()
		defer f.n.dataMu.Unlock()
		err := f.convertExactLocked(uint64(first), uint64(last-first), pblk)
		// The conversion's tree blocks are in the running transaction;
		// the inode goes with them if its root or i_blocks changed (also
		// when the change failed after freeing a tree block).
		if werr := f.v.writeMappingLocked(f.n); err == nil {
			err = werr
		}
		return err
	case m.Flags&iomap.MapNew != 0:
		// Map the blocks now that their data is on the device. On error
		// nothing is mapped and End frees them.
		e := extent.Extent{Lblk: uint32(first), Len: uint32(last - first), Pblk: pblk}
		if err := f.m.tree.Insert(e); err != nil {
			return err
		}
		f.m.set(esc.Extent{Lblk: e.Lblk, Len: e.Len, Pblk: pblk, Status: esc.Written})
		return (treeAlloc{f.v, f.n}).addBlocks(int64(e.Len))
	}
	return nil
}

// splitForIO makes [lblk, lblk+n) an unwritten extent of its own before a
// direct write into it (ext4's EXT4_GET_BLOCKS_PRE_IO): each in-flight
// write then owns its extent, and converting it at completion needs no
// tree block, so it cannot fail for space once the data is on the device.
// A split takes a tree block from free space, else from the reserved
// pool; when both are exhausted it fails here, before any data is
// written, and changes nothing. The inode is written if the splits
// changed its root or i_blocks.
func (f *File) splitForIO(lblk, n uint64, shared bool) error {
	if shared {
		f.n.dataMu.Lock()
		defer f.n.dataMu.Unlock()
	}
	t := f.m.tree
	err := t.SplitRange(uint32(lblk), uint32(n), false)
	if errors.Is(err, ErrNoSpace) {
		err = t.SplitRange(uint32(lblk), uint32(n), true) // the reserved pool
	}
	if err != nil {
		return err // the tree is unchanged
	}
	return f.v.writeMappingLocked(f.n)
}

// End frees the blocks Begin allocated that no completed write reached.
func (o *dioOps) End(off, length, written int64, flags iomap.Flags, m iomap.Mapping) error {
	if m.Flags&iomap.MapNew == 0 {
		return nil
	}
	bs := int64(o.f.v.bs)
	used := (off + written + bs - 1) / bs // first block not mapped by endIO
	if written == 0 {
		used = m.Offset / bs
	}
	if end := m.End() / bs; used < end {
		pblk := uint64(m.Addr/bs) + uint64(used-m.Offset/bs)
		return o.f.v.alloc.Free(pblk, uint64(end-used))
	}
	return nil
}

// directWrite is WriteAt for a file opened with O_DIRECT (the caller holds
// a metadata operation). Block-aligned writes inside the on-disk size
// start under the shared inode lock; whatever needs allocation, and every
// other write, runs under the exclusive lock.
func (f *File) directWrite(p []byte, off int64) (int, error) {
	bs := int64(f.v.bs)
	done := 0
	if off%bs == 0 && len(p)%int(bs) == 0 && len(p) > 0 {
		k, err, ok := f.directShared(p, off)
		done = k
		if ok {
			return done, err
		}
	}
	f.n.mu.Lock()
	defer f.n.mu.Unlock()
	if err := f.closedLocked(); err != nil {
		return done, err
	}
	rest, pos := p[done:], off+int64(done)
	if !f.cacheCleanLocked(pos, pos+int64(len(rest))) {
		return done, errCacheRace
	}
	if err := f.v.applyConversionsLocked(f.n); err != nil {
		return done, err
	}
	f.v.stats.exclusive.Add(1)
	ops := &f.dio[0]
	if ops.opts.EndIO == nil {
		ops.opts = iomap.DioOptions{BlockSize: bs, EndIO: ops.endIO, Align: f.v.align}
	}
	k, err := iomap.DirectWrite(f.v.dev, ops, rest, pos, &ops.opts)
	return done + k, f.wroteLocked(pos, k, err)
}

// directOverwrite is the first attempt of a block-aligned direct write:
// the overwrite ops (File.OverwriteOps) with iomap.OverwriteOnly, through
// iomap.DirectWrite, under the shared inode lock and outside any journal
// operation (no txnGate; Close waits for it through the inode lock, see
// Volume.drainInodeWriters): the ops then map written blocks inside
// the on-disk size only, so nothing but data and the in-memory times
// changes. It returns the bytes written; ok is true when the write is
// done (or failed on the device, which changes no metadata and leaves the
// volume writable), false when the rest, from off+n, needs what the
// overwrite ops refused (allocation, a conversion, a size change) and
// goes on inside an operation. Errors from the mapping, and corrupt
// mappings, are reported by that path too. A one-block write takes
// iomap's single-extent fast path alone (iomap.DirectOverwrite): the
// iterator's Begin could only refuse what MapOverwrite refused, after a
// second lookup, and the write inside the operation looks the block up
// anyway.
//
// It is ext4's ext4_dio_write_iter deciding "overwrite" and running
// iomap_dio_rw with the overwrite ops; unlike ext4, it decides by
// trying: MapOverwrite is the only lookup of an overwrite.
func (f *File) directOverwrite(p []byte, off int64) (n int, err error, ok bool) {
	s := stripe.OfBuf(p)
	t := f.n.mu.RLockAt(s)
	end := off + int64(len(p))
	// A closed volume (checked under the inode lock: Close waits for the
	// write, see Volume.drainInodeWriters) or file fails in the usual path.
	if f.closed.Load() || f.v.closed.Load() || end > int64(f.n.diskSize()) || f.mayHavePages() && !f.cacheCleanLocked(off, end) {
		f.n.mu.RUnlockAt(t)
		return 0, nil, false
	}
	f.v.touch.stamp(f.n) // as in directShared
	if len(p) == int(f.v.bs) {
		// One block lies in one extent: where MapOverwrite refuses it, so
		// would Begin.
		n, err = iomap.DirectOverwrite(f.v.dev, &f.dio[1], p, off, &f.v.owOpts)
	} else {
		n, err = iomap.DirectWrite(f.v.dev, &f.dio[1], p, off, &f.v.owOpts)
	}
	f.n.mu.RUnlockAt(t)
	switch {
	case err == nil:
		f.v.stats.shared.Add(s, 1)
		return n, nil, true
	case err != errNeedExclusive && errors.Is(err, ErrIO) && !errors.Is(err, ErrCorrupt):
		// The device failed (the data write, or reading a tree block
		// for the lookup): no metadata changed. (The usual refusal,
		// errNeedExclusive, comes unwrapped from iomap.)
		f.v.stats.shared.Add(s, 1)
		return n, fmt.Errorf("ext4io: inode %d: direct write [%d, +%d): %w", f.ino, off, len(p), err), true
	}
	if n > 0 {
		f.v.stats.shared.Add(s, 1)
		f.v.stats.sharedNotOverwrite.Add(1) // the rest goes on in an operation
	}
	return n, nil, false
}

// directShared runs a block-aligned direct write under the shared inode
// lock while it finds allocated blocks inside the on-disk size: overwrites
// of written blocks change no metadata at all (the times are set in memory
// before the write, as ext4's file_modified does, and reach the disk with
// Sync, Close or the next inode write), and unwritten blocks are marked
// written beside the extent-status cache at completion (convbits.go) with
// their conversion queued for the tree (conv.go), or with Options.Tuning.EagerConversions
// converted exactly under dataMu, the inode written with the conversion
// when its extent root or i_blocks changed. ok is false when the rest of
// the write needs the exclusive lock.
func (f *File) directShared(p []byte, off int64) (n int, err error, ok bool) {
	defer f.n.mu.RUnlockAt(f.n.mu.RLockAt(stripe.OfBuf(p)))
	if err := f.closedLocked(); err != nil {
		return 0, err, true
	}
	end := off + int64(len(p))
	if end > int64(f.n.diskSize()) {
		return 0, nil, false
	}
	// The times, set before the write as ext4's file_modified does, reach
	// the inode with its next write, Stat, Sync or Close.
	f.v.touch.stamp(f.n)
	if !f.cacheCleanLocked(off, end) {
		return 0, errCacheRace, true
	}
	f.v.stats.shared.Add(stripe.OfBuf(p), 1)
	ops := &f.dio[1]
	converted := false
	endIO := func(off, n int64, m iomap.Mapping) error {
		converted = converted || m.Type == iomap.Unwritten || m.Flags&iomap.MapDirty != 0
		return ops.endIO(off, n, m)
	}
	// With an EndIO, DirectWrite skips the fast path directOverwrite
	// tried: Begin is this write's one lookup.
	n, err = iomap.DirectWrite(f.v.dev, ops, p, off, &iomap.DioOptions{BlockSize: int64(f.v.bs), EndIO: endIO, Align: f.v.align})
	if errors.Is(err, errNeedExclusive) {
		f.v.stats.sharedNotOverwrite.Add(1)
		return n, nil, false
	}
	if converted {
		f.v.stats.sharedNotOverwrite.Add(1)
	}
	return n, err, true
}

// zeroConvert implements Options.Tuning.ZeroOutChunk for a direct write of
// [lblk, end) that found unwritten blocks at lblk, inside the on-disk size:
// the unwritten blocks of the ZeroOutChunk-aligned chunks around the
// write (clipped to the on-disk size) are zeroed on the device and
// converted to written, the write's own blocks included, so the write and
// every later write in those chunks is an overwrite. The zeroes reach the
// device before the conversion is logged, so a crash exposes zeroes at
// worst, never stale blocks. Chunks with dirty cached pages are left
// alone; then only the write's own blocks are zeroed and converted.
//
// With the option set, no direct write ever sends data to an unwritten
// block: each converts first. That is what makes zeroing blocks outside
// the write safe under the shared inode lock, where other writers run:
// no in-flight write can own them. Writers whose chunks overlap wait for
// the one converting (n.zeroing); the zeroing itself runs outside dataMu.
// converted reports whether this call converted any block.
func (f *File) zeroConvert(lblk, end uint64, shared bool) (converted bool, err error) {
	n, bs, c := f.n, uint64(f.v.bs), f.v.zchunk
	lo := lblk / c * c
	hi := min((end+c-1)/c*c, n.diskBlocks(bs))
	if !f.cacheCleanLocked(int64(lo*bs), int64(hi*bs)) {
		lo, hi = lblk, end // the write's own range is clean (checked by the caller)
	}
	lock, unlock := func() {}, func() {}
	if shared {
		lock, unlock = n.dataMu.Lock, n.dataMu.Unlock
	}
	lock()
	for done := n.zeroingOver(lo, hi); done != nil; done = n.zeroingOver(lo, hi) {
		unlock()
		<-done
		lock()
	}
	// The unwritten runs of [lo, hi), looked up under dataMu: another
	// writer may have converted some of them meanwhile.
	var buf [4]esc.Extent
	runs := buf[:0]
	for b := lo; b < hi; {
		m, err := f.m.lookup(b)
		if err != nil {
			unlock()
			return false, err
		}
		k := min(m.n, hi-b)
		if m.kind == mapUnwritten {
			runs = append(runs, esc.Extent{Lblk: uint32(b), Len: uint32(k), Pblk: m.pblk})
		}
		b += k
	}
	if len(runs) == 0 {
		unlock()
		return false, nil
	}
	z := zeroing{lo: lo, hi: hi, done: make(chan struct{})}
	n.zeroing = append(n.zeroing, z)
	unlock()
	for _, r := range runs {
		if err = f.v.zeroBlocks(r.Pblk, uint64(r.Len), true); err != nil {
			break
		}
	}
	lock()
	defer unlock()
	n.zeroing = slices.DeleteFunc(n.zeroing, func(o zeroing) bool { return o.done == z.done })
	close(z.done)
	if err != nil {
		return false, err // nothing converted; the zeroed blocks stay unwritten
	}
	for _, r := range runs {
		if err = f.convertExactLocked(uint64(r.Lblk), uint64(r.Len), r.Pblk); err != nil {
			break
		}
		converted = true
	}
	// As after a shared-lock conversion: the inode goes with the tree
	// blocks if its root or i_blocks changed, also after a failure.
	if werr := f.v.writeMappingLocked(n); err == nil {
		err = werr
	}
	return converted, err
}

// zeroingOver returns the done channel of a chunk conversion in progress
// that overlaps blocks [lo, hi), or nil. Guarded like in.
func (n *inode) zeroingOver(lo, hi uint64) chan struct{} {
	for _, z := range n.zeroing {
		if z.lo < hi && lo < z.hi {
			return z.done
		}
	}
	return nil
}
