package ext4io

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/bits"
	"os"
	"sync"
	"time"

	"github.com/ext4io/ext4io/alloc"
	"github.com/ext4io/ext4io/esc"
	"github.com/ext4io/ext4io/extent"
	"github.com/ext4io/ext4io/internal/mutant"
	"github.com/ext4io/ext4io/internal/stripe"
	"github.com/ext4io/ext4io/layout"
)

// The write path of a writable volume.
//
// Buffered writes go through the page cache with delayed allocation
// (buffered.go). Direct writes, and every write on a volume without a page
// cache, go straight to the device under one metadata operation (a
// journal handle) for the allocations and conversions they need. Data is
// always written before the metadata that maps it, so a crash never
// exposes stale blocks through a new mapping.

// maxFileBlocks bounds logical block numbers (ext4's EXT_MAX_BLOCKS).
const maxFileBlocks = 1<<32 - 1

func (f *File) writable(op string) error {
	if err := f.checkOpen(op); err != nil {
		return err
	}
	return f.writableOpen(op)
}

// writableOpen is writable for a caller that checked f open (checkOpen).
func (f *File) writableOpen(op string) error {
	if f.writableState() && f.v.failed() == nil {
		return nil
	}
	if f.v.alloc == nil {
		return &fs.PathError{Op: op, Path: f.name, Err: ErrReadOnly}
	}
	if err := f.checkWriteMode(op); err != nil {
		return err
	}
	if err := f.v.failed(); err != nil {
		return &fs.PathError{Op: op, Path: f.name, Err: fmt.Errorf("%w after an earlier error: %w", ErrReadOnly, err)}
	}
	if err := f.ensureNotInline(op); err != nil {
		return err
	}
	if f.m == nil || f.m.tree == nil || !f.in.IsReg() {
		return &fs.PathError{Op: op, Path: f.name, Err: fmt.Errorf("only extent-mapped regular files can be written: %w", ErrUnsupported)}
	}
	return nil
}

// writableState reports whether f can be written but for the volume's
// failure (Volume.failed), which writableOpen checks beside it: a
// writable volume and File mode, an extent-mapped regular file, not
// inline. It is inlined where each call counts (pwrite).
func (f *File) writableState() bool {
	return f.v.alloc != nil && f.flag&accMode != os.O_RDONLY && !f.n.inline.live.Load() && f.m != nil && f.m.tree != nil && f.n.reg
}

// inRange reports whether [off, off+n) lies inside the blocks a file can
// map: checkRange's nil case.
func (f *File) inRange(off, n int64) bool {
	lim := maxFileBlocks * int64(f.v.bs)
	return off >= 0 && n >= 0 && off <= lim && n <= lim-off
}

func (f *File) checkRange(op string, off, n int64) error {
	if !f.inRange(off, n) {
		lim := maxFileBlocks * int64(f.v.bs)
		why := ErrInvalid
		if off >= 0 && n >= 0 {
			why = errFileTooBig
		}
		return &fs.PathError{Op: op, Path: f.name, Err: fmt.Errorf("range [%d,+%d) outside 0..%d: %w", off, n, lim, why)}
	}
	return nil
}

// pwrite is WriteAt without O_SYNC and O_APPEND (osfile.go): it allocates
// blocks for holes and converts unwritten extents it covers. The file
// grows when the write ends past its size. Unaligned writes into new or
// unwritten blocks zero the rest of those blocks.
func (f *File) pwrite(p []byte, off int64) (int, error) {
	if f.n.inline.live.Load() {
		if n, ok, err := f.writeInline(p, off); ok { // inline_write.go
			return n, err
		}
	}
	if !f.writableState() || f.v.failed() != nil || !f.inRange(off, int64(len(p))) || !f.directAligned(p, off) {
		// The callers checked f open.
		if err := f.writableOpen("write"); err != nil {
			return 0, err
		}
		if err := f.checkRange("write", off, int64(len(p))); err != nil {
			return 0, err
		}
		if err := f.checkDirect("write", p, off); err != nil {
			return 0, err
		}
	}
	if !f.direct && f.n.bops != nil {
		n, err := f.writeBuffered(p, off)
		if err != nil {
			return n, &fs.PathError{Op: "write", Path: f.name, Err: err}
		}
		return n, nil
	}
	if mutant.ConvBeforeData {
		if err := f.convertBeforeData(off, int64(len(p))); err != nil {
			return 0, &fs.PathError{Op: "write", Path: f.name, Err: err}
		}
	}
	retried := false
	done := 0 // bytes the overwrite ops wrote before refusing the rest
	for {
		// Direct I/O: dirty cached pages of the range go first.
		if f.mayHavePages() {
			if err := f.flushCache(off, off+int64(len(p))); err != nil {
				return done, &fs.PathError{Op: "write", Path: f.name, Err: err}
			}
		}
		if bs := int64(f.v.bs); off&(bs-1) == 0 && int64(len(p))&(bs-1) == 0 && len(p) > 0 {
			k, err, ok := f.directOverwrite(p, off) // dio.go
			if ok {
				if err != nil {
					return done + k, &fs.PathError{Op: "write", Path: f.name, Err: err}
				}
				return done + k, nil
			}
			done, p, off = done+k, p[k:], off+int64(k)
		}
		s, err := f.v.beginOpAt(stripe.OfBuf(p))
		if err != nil {
			return 0, &fs.PathError{Op: "write", Path: f.name, Err: err}
		}
		var n int
		if a := f.v.align; aligned(off, a) && aligned(int64(len(p)), a) {
			n, err = f.directWrite(p, off) // through iomap.DirectWrite
		} else {
			n, err = f.writeAt(p, off) // unaligned write without a page cache
		}
		err = f.v.endOpErrAt(s, err)
		if err == errCacheRace {
			continue // a buffered write dirtied the range again
		}
		if !retried && f.v.retryNoSpace(err) {
			retried = true // freed blocks are allocatable after the commit
			continue
		}
		if err != nil {
			return done + n, &fs.PathError{Op: "write", Path: f.name, Err: err}
		}
		return done + n, nil
	}
}

// errCacheRace reports that a buffered write dirtied a range between its
// write-back and the lock of an operation that needs it clean; the
// operation starts over.
var errCacheRace = errors.New("ext4io: range dirtied again during write-back")

// writeAt writes p at off under the exclusive inode lock, straight to the
// device (any alignment): the write path of volumes without a page cache
// for writes that direct I/O cannot take.
func (f *File) writeAt(p []byte, off int64) (int, error) {
	f.n.mu.Lock()
	defer f.n.mu.Unlock()
	if err := f.closedLocked(); err != nil {
		return 0, err
	}
	if !f.cacheCleanLocked(off, off+int64(len(p))) {
		return 0, errCacheRace
	}
	if err := f.v.applyConversionsLocked(f.n); err != nil {
		return 0, err // the conversion of a write into unwritten blocks may zero out queued ones
	}
	f.v.stats.exclusive.Add(1)
	n, err := f.writeLocked(p, off)
	return n, f.wroteLocked(off, n, err)
}

// wroteLocked finishes an exclusive write of n bytes at off that reached
// the device: size, times and the inode, keeping the write's error first.
func (f *File) wroteLocked(off int64, n int, err error) error {
	if n == 0 {
		return err
	}
	f.n.wroteLocked(uint64(off) + uint64(n))
	f.touchLocked()
	if werr := f.v.writeInodeLocked(f.n); err == nil {
		err = werr
	}
	return err
}

// convertLocked marks [lblk, lblk+n) written after its data reached the
// device and drops the cached mapping of the blocks it touched.
//
// Conversion happens at I/O completion, when the data is already on the
// device, so it must not fail for want of space: the tree blocks a split
// needs are taken with MustSucceed, which may draw on the allocator's
// reserved pool (min(2% of blocks, 4096) by default) and the root-reserved
// blocks, as ext4 draws on its reserved clusters. Only when those are
// exhausted too does the write fail with ErrNoSpace; the blocks then stay
// unwritten and keep reading as zeroes. The
// caller holds n.mu exclusively, or shared with dataMu.
func (f *File) convertLocked(lblk, n uint64) error {
	if err := f.m.tree.MarkWritten(uint32(lblk), uint32(n), true); err != nil {
		return err
	}
	f.v.stats.conversions.Add(1)
	// The conversion may have zeroed out and converted neighbours too
	// (extent.Config.ZeroOutMax): drop their cached mappings — but not
	// Delayed ranges, which exist only in the cache (their dirty pages
	// and reservations depend on them).
	lo := lblk - min(lblk, 64<<10/uint64(f.v.bs))
	hi := lo + min(n+2*(lblk-lo), maxFileBlocks-lo)
	var stale []esc.Extent
	f.m.escRange(uint32(lo), uint32(hi-lo), func(e esc.Extent) bool {
		if e.Status != esc.Delayed {
			stale = append(stale, e)
		}
		return true
	})
	for _, e := range stale {
		s, end := max(uint64(e.Lblk), lo), min(uint64(e.End()), hi)
		f.m.drop(uint32(s), uint32(end-s))
	}
	return nil
}

// convertExactLocked is convertLocked without zero-out, for conversions
// under the shared inode lock (see extent.Tree.MarkWrittenExact): [lblk,
// lblk+n) maps to pblk onwards and becomes written in the extent-status
// cache too.
func (f *File) convertExactLocked(lblk, n, pblk uint64) error {
	if err := f.m.tree.MarkWrittenExact(uint32(lblk), uint32(n), true); err != nil {
		return err
	}
	f.v.stats.conversions.Add(1)
	f.m.set(esc.Extent{Lblk: uint32(lblk), Len: uint32(n), Pblk: pblk, Status: esc.Written})
	return nil
}

// aligned reports whether x is a multiple of a (> 0), without a division
// when a is a power of two, as device block sizes are: the direct I/O
// paths check alignments several times per write.
func aligned(x, a int64) bool {
	if a&(a-1) == 0 {
		return x&(a-1) == 0
	}
	return x%a == 0
}

// checkDirect enforces direct I/O alignment: offset, length and (for the
// direct backend) buffer address aligned to the device's logical block
// size.
func (f *File) checkDirect(op string, p []byte, off int64) error {
	if !f.directAligned(p, off) {
		return &fs.PathError{Op: op, Path: f.name, Err: fmt.Errorf("direct I/O at %d of %d bytes is not aligned to the device's %d-byte logical blocks: %w", off, len(p), f.v.lbs, ErrInvalid)}
	}
	return nil
}

// directAligned is checkDirect's nil case.
func (f *File) directAligned(p []byte, off int64) bool {
	return !f.direct || aligned(off, f.v.lbs) && aligned(int64(len(p)), f.v.lbs)
}

func (f *File) touchLocked() {
	f.n.touchEpoch.Store(0) // older than now
	now := layout.TimestampOf(time.Now())
	f.in.Mtime, f.in.Ctime = now, now
}

// writeLocked writes p at off run by run: overwrite written blocks,
// allocate for holes, convert unwritten blocks. It returns the bytes
// written before the first error.
func (f *File) writeLocked(p []byte, off int64) (int, error) {
	bs := int64(f.v.bs)
	done := 0
	for done < len(p) {
		pos := off + int64(done)
		lblk := uint64(pos / bs)
		m, err := f.m.lookup(lblk)
		if err != nil {
			return done, err
		}
		endBlk := uint64((off + int64(len(p)) + bs - 1) / bs)
		nblk := min(m.n, endBlk-lblk)
		var k int
		switch m.kind {
		case mapWritten:
			k, err = f.overwrite(p[done:], pos, m, nblk)
		case mapUnwritten:
			k, err = f.writeUnwritten(p[done:], pos, m, nblk)
		default:
			k, err = f.writeHole(p[done:], pos, nblk)
		}
		done += k
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// overwrite writes into already written blocks: no metadata changes.
func (f *File) overwrite(p []byte, pos int64, m blockMap, nblk uint64) (int, error) {
	bs := int64(f.v.bs)
	inBlk := pos % bs
	n := min(int64(len(p)), int64(nblk)*bs-inBlk)
	if _, err := f.v.dev.WriteAt(p[:n], int64(m.pblk)*bs+inBlk); err != nil {
		return 0, fmt.Errorf("ext4io: inode %d: write: %w", f.ino, wrapIO(err))
	}
	return int(n), nil
}

// fullBlocks builds the whole-block image of writing p at pos into nblk
// blocks that read as zeroes, returning it and the bytes of p it holds:
// p itself when it starts at a block boundary and fills the blocks. An
// image of up to maxPooledImage bytes is a buffer of imagePool, which
// the caller gives back with putImage once written.
func fullBlocks(p []byte, pos, bs int64, nblk uint64) ([]byte, int) {
	inBlk := pos % bs
	size := int64(nblk) * bs
	if inBlk == 0 && int64(len(p)) >= size {
		return p[:size], int(size)
	}
	var buf []byte
	if size <= maxPooledImage {
		if b, ok := imagePool.Get().(*[]byte); ok {
			buf = (*b)[:size]
			clear(buf[:inBlk])
		} else {
			buf = make([]byte, size, maxPooledImage)
		}
	} else {
		buf = make([]byte, size)
	}
	n := copy(buf[inBlk:], p)
	clear(buf[inBlk+int64(n):])
	return buf, n
}

// maxPooledImage is the largest image fullBlocks takes from imagePool.
const maxPooledImage = 64 << 10

// imagePool holds fullBlocks's image buffers (*[]byte of cap
// maxPooledImage) between writes of less than whole blocks, such as the
// last block of every small file.
var imagePool sync.Pool

// putImage gives back buf, from fullBlocks for p, once written, if it is
// one of the pool's size (not p itself, nor a larger image).
func putImage(buf, p []byte) {
	if cap(buf) != maxPooledImage || len(p) > 0 && len(buf) > 0 && &buf[0] == &p[0] {
		return
	}
	b := buf[:cap(buf)]
	imagePool.Put(&b)
}

// writeUnwritten writes into unwritten blocks (zero-filling their unwritten
// remainder), then marks them written.
func (f *File) writeUnwritten(p []byte, pos int64, m blockMap, nblk uint64) (int, error) {
	bs := int64(f.v.bs)
	nblk = min(nblk, extent.MaxWrittenLen)
	buf, n := fullBlocks(p, pos, bs, nblk)
	_, err := f.v.dev.WriteAt(buf, int64(m.pblk)*bs)
	putImage(buf, p)
	if err != nil {
		return 0, fmt.Errorf("ext4io: inode %d: write: %w", f.ino, wrapIO(err))
	}
	if err := f.convertLocked(m.lblk, nblk); err != nil {
		return 0, err
	}
	return n, nil
}

// allocRequest asks for up to n blocks for logical block lblk: right
// after the block mapping lblk-1, else in the inode's group. A request of
// at least alignMin blocks asks for alignment (alloc.Request.Align) to
// the largest power of two blocks it holds, capped by alignCap, as
// mballoc aligns a request to its normalized size: after an earlier block
// of the file, to keep the file's offset between logical and physical
// blocks wherever the run lands; for a file's first block, or after a
// hole, to make that offset a multiple of the alignment.
//
// A large file written in aligned runs (write-back cuts its runs at 1 MiB
// boundaries) then writes the device in aligned runs: disks and RAID
// stripes prefer them, and a host's page cache holds an image file in
// larger folios (docs/performance.md, "Aligned allocation"). The cost
// is the free space skipped before aligned runs, which later allocations
// fill: more extents on a nearly full volume.
// With 1 KiB blocks the groups start at block 1, so a run across a
// group's start splits.
func (f *File) allocRequest(lblk, n uint64) alloc.Request {
	var goal, align uint64
	if lblk > 0 {
		if m, err := f.m.lookupGoal(lblk - 1); err == nil && (m.kind == mapWritten || m.kind == mapUnwritten) {
			goal = m.pblk + 1
		}
	}
	if n >= alignMin {
		align = pow2Floor(min(n, f.v.alignCap()))
	}
	if goal == 0 {
		goal = f.v.inodeGoal(f.ino)
		if align > 1 {
			goal += (lblk - goal) & (align - 1) // ≡ lblk (mod align)
		}
	}
	return alloc.Request{Goal: goal, Min: 1, Max: n, Align: align, Ino: f.ino}
}

// alignMin is the smallest allocation that asks for alignment: smaller
// ones stay next to their goal (mballoc treats requests under 16 blocks,
// s_mb_stream_request, as small files too).
const alignMin = 16

// alignCap is the largest alignment allocRequest asks for, in blocks:
// 1 MiB (write-back's run), at most a 32nd of a group (256 blocks of
// 1 KiB), so that what is skipped stays small next to a group.
func (v *Volume) alignCap() uint64 {
	return max(1, min((1<<20)/uint64(v.bs), uint64(v.sb.BlocksPerGroup)/32))
}

// pow2Floor is the largest power of two not above n (n > 0).
func pow2Floor(n uint64) uint64 { return 1 << (bits.Len64(n) - 1) }

// allocRun allocates up to nblk blocks for logical block lblk.
func (f *File) allocRun(lblk, nblk uint64, maxLen uint64) (uint64, uint64, error) {
	nblk = min(nblk, maxLen)
	start, got, err := f.v.allocate(f.allocRequest(lblk, nblk))
	if err != nil {
		return 0, 0, fmt.Errorf("ext4io: inode %d: allocating %d blocks: %w", f.ino, nblk, err)
	}
	return start, got, nil
}

// mapRun inserts a newly allocated run into the tree and the cache and
// accounts it in i_blocks; on failure the run is freed.
func (f *File) mapRun(lblk, start, got uint64, unwritten bool) error {
	e := extent.Extent{Lblk: uint32(lblk), Len: uint32(got), Pblk: start, Unwritten: unwritten}
	if err := f.m.tree.Insert(e); err != nil {
		f.v.alloc.Free(start, got)
		return err
	}
	if err := (treeAlloc{f.v, f.n}).addBlocks(int64(got)); err != nil {
		return err
	}
	st := esc.Written
	if unwritten {
		st = esc.Unwritten
	}
	f.m.set(esc.Extent{Lblk: uint32(lblk), Len: uint32(got), Pblk: start, Status: st})
	return nil
}

// writeHole allocates blocks for a hole, writes the data (zero-filled to
// whole blocks) and then maps it.
func (f *File) writeHole(p []byte, pos int64, nblk uint64) (int, error) {
	bs := int64(f.v.bs)
	lblk := uint64(pos / bs)
	start, got, err := f.allocRun(lblk, nblk, extent.MaxWrittenLen)
	if err != nil {
		return 0, err
	}
	buf, n := fullBlocks(p, pos, bs, got)
	_, err = f.v.dev.WriteAt(buf, int64(start)*bs)
	putImage(buf, p)
	if err != nil {
		f.v.alloc.Free(start, got)
		return 0, fmt.Errorf("ext4io: inode %d: write: %w", f.ino, wrapIO(err))
	}
	if f.n.delayed > 0 {
		f.n.bops.dropDelayedLocked(lblk, got)
	}
	if err := f.mapRun(lblk, start, got, false); err != nil {
		return 0, err
	}
	return n, nil
}

// Truncate changes the file's size. Shrinking frees the blocks past the
// new end and zeroes the tail of a partial last block; growing leaves a
// hole.
func (f *File) Truncate(size int64) error {
	if ok, err := f.truncateInline(size); ok { // inline_write.go
		return err
	}
	if err := f.writable("truncate"); err != nil {
		return err
	}
	if err := f.checkRange("truncate", size, 0); err != nil {
		return err
	}
	for {
		seen, err := f.truncateSteps(uint64(size))
		if err != nil {
			return &fs.PathError{Op: "truncate", Path: f.name, Err: err}
		}
		if err := f.v.beginOp(); err != nil {
			return &fs.PathError{Op: "truncate", Path: f.name, Err: err}
		}
		f.n.mu.Lock()
		again := false
		err = f.closedLocked()
		if err == nil && uint64(size) < f.in.Size {
			bs := uint64(f.v.bs)
			again, err = f.stepsAgainLocked(seen, (uint64(size)+bs-1)/bs, maxFileBlocks)
		}
		if err == nil && !again {
			if uint64(size) < f.in.Size {
				f.dropCacheLocked(size, math.MaxInt64-size)
			}
			err = f.truncateLocked(uint64(size))
		}
		f.n.mu.Unlock()
		if err := f.v.endOpErr(err); err != nil {
			return &fs.PathError{Op: "truncate", Path: f.name, Err: err}
		}
		if !again {
			return nil
		}
	}
}

// truncateSteps frees the blocks a shrink to size removes in steps from
// the file's end, each its own operation, when freeing them all in one
// would change more metadata blocks than a pending set may hold (jmeta.log
// commits a set in one journal transaction, at most the whole log): so a
// truncate of a file with a large tree works on a small journal, as
// ext4_truncate restarts its handle. It leaves at most treeStepWeight
// of the removal to the single operation that sets the size. Between steps
// the file keeps its old size, its freed tail reading as zeroes; a crash
// there leaves that state, which e2fsck accepts (a hole at the end). A
// step removes everything past its cut, so writes between steps land
// before the truncate. Without a journal it does nothing. It returns the
// mapping's seq after its last operation (removeSteps).
func (f *File) truncateSteps(size uint64) (uint64, error) {
	if f.v.jm == nil {
		return 0, nil
	}
	bs := uint64(f.v.bs)
	first := (size + bs - 1) / bs
	if first >= maxFileBlocks {
		return 0, nil
	}
	return f.removeSteps(func() bool { return size < f.in.Size }, first, maxFileBlocks)
}

// removeSteps frees the blocks the file maps in [first, last) (last
// maxFileBlocks: to the end) but for one step's worth, in steps of their
// own operations, highest first, each dropping the cached pages of what
// it frees; only while want (called with the inode locked) holds. An
// operation computes the cuts (treeCutsLocked) and takes the first step;
// later steps follow those cuts while the mapping's seq is what the
// previous step left. Another writer's change of the mapping between
// steps (blocks appended past the end, holes filled) may have added to
// what a cut's step frees, so the cuts are computed again, in the
// operation of the next step: each step frees at most treeStepWeight
// of the mapping it sees. It returns the mapping's seq after its last
// operation: the caller's final operation must compute the cuts again
// if the seq has changed (treeCutsLocked).
func (f *File) removeSteps(want func() bool, first, last uint64) (uint64, error) {
	var (
		cuts []uint32
		seen uint64
		done bool
		bs   = int64(f.v.bs)
	)
	for !done {
		err := f.truncateStep(func() (err error) {
			if f.m == nil || f.m.tree == nil || !want() {
				done = true
				return nil
			}
			if len(cuts) == 0 || f.m.seq.Load() != seen {
				if cuts, err = f.v.treeCutsLocked(f.n, first, last); err != nil || len(cuts) == 0 {
					seen, done = f.m.seq.Load(), true
					return err
				}
			}
			c := cuts[0]
			cuts = cuts[1:]
			off := int64(c) * bs
			n := int64(math.MaxInt64) - off
			if last < maxFileBlocks {
				n = int64(last-uint64(c)) * bs
			}
			f.dropCacheLocked(off, n)
			err = f.v.removeStepLocked(f.n, c, last)
			seen = f.m.seq.Load()
			done = len(cuts) == 0
			return err
		})
		if err != nil {
			return 0, err
		}
		if f.v.stepHook != nil {
			f.v.stepHook(done)
		}
	}
	return seen, nil
}

// stepsAgainLocked reports whether the final operation of a stepped
// removal of [first, last) must give way to more steps: the mapping has
// changed since the steps' last operation (seen) and what is left to free
// is more than one step's worth.
func (f *File) stepsAgainLocked(seen, first, last uint64) (bool, error) {
	if f.v.jm == nil || f.m == nil || f.m.tree == nil || f.m.seq.Load() == seen {
		return false, nil
	}
	cuts, err := f.v.treeCutsLocked(f.n, first, last)
	return len(cuts) > 0, err
}

// treeStepWeight is the most metadata blocks (by treeCutsLocked's
// count) one step of truncateSteps or orphanSteps frees: half the pending
// set that triggers a commit, so that a step, joining a set below
// commitAt, stays far below the log.
func (v *Volume) treeStepWeight() int { return max(v.jm.commitAt/2, 8) }

// treeCutsLocked returns where steps freeing the blocks inode n (locked)
// maps in [first, last) cut that range, highest cut first, so that each
// step (from its cut to the previous one) and what is left below the
// lowest cut free at most treeStepWeight metadata blocks and revokes: the
// block bitmap and group descriptor of each group an extent reaches, a
// leaf's share, and for a directory, whose blocks are metadata, a revoke
// per block (a directory's extent may be cut inside). None when all of it
// fits one operation.
func (v *Volume) treeCutsLocked(n *inode, first, last uint64) ([]uint32, error) {
	if v.jm == nil {
		return nil, nil
	}
	cuts, _, err := v.treeCutsBudgetLocked(n, first, last, v.treeStepWeight())
	return cuts, err
}

// treeCutsBudgetLocked is treeCutsLocked with budget as the most a step
// frees; it also returns the weight of what is left below the lowest cut
// (with no cuts, the weight of it all).
func (v *Volume) treeCutsBudgetLocked(n *inode, first, last uint64, budget int) (cuts []uint32, rest int, err error) {
	dir := n.in.IsDir()
	if n.m == nil || n.m.tree == nil || n.m.tree.Depth() == 0 && !dir || first >= min(last, maxFileBlocks) {
		return nil, 0, nil // a root's four extents of data change few blocks
	}
	// A piece of a directory's extent, revoked block by block, weighs at
	// most half a step with its leaf share and groups.
	chunk := uint64(math.MaxUint64)
	if dir {
		chunk = uint64(max(budget/2-5, 1))
	}
	var (
		starts []uint32
		gs     [][2]uint64 // first and last group of each piece's blocks
		revs   []int       // revokes of each piece
		bpg    = uint64(v.sb.BlocksPerGroup)
	)
	err = n.m.tree.Walk(func(e extent.Extent) error {
		if e.End() <= first || uint64(e.Lblk) >= last {
			return nil
		}
		lo, hi := max(uint64(e.Lblk), first), min(e.End(), last)
		for ; lo < hi; lo += min(chunk, hi-lo) {
			l := min(chunk, hi-lo)
			p := e.Pblk + (lo - uint64(e.Lblk))
			starts = append(starts, uint32(lo))
			gs = append(gs, [2]uint64{p / bpg, (p + l - 1) / bpg})
			if dir {
				revs = append(revs, int(l))
			} else {
				revs = append(revs, 0)
			}
		}
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("ext4io: inode %d: %w", n.ino, err)
	}
	// A piece weighs one (its leaf's share, generously), its revokes, and
	// two more (bitmap, descriptor) for each group it reaches that the
	// piece after it, freed in the same step, does not.
	w, prev := 0, uint64(math.MaxUint64)
	for i := len(starts) - 1; i >= 0; i-- {
		w += 1 + revs[i] + 2*int(gs[i][1]-gs[i][0]+1)
		if gs[i][1] == prev {
			w -= 2
		}
		prev = gs[i][0]
		if w >= budget {
			cuts = append(cuts, starts[i])
			w, prev = 0, math.MaxUint64
		}
	}
	return cuts, w, nil
}

// removeStepLocked is one step of truncateSteps, punchSteps or
// orphanSteps: it frees the blocks inode n (locked) maps in [c, last).
// A directory's freed blocks are revoked as the tree frees them
// (treeAlloc.FreeData), and its i_size ends at its last block still
// mapped.
func (v *Volume) removeStepLocked(n *inode, c uint32, last uint64) error {
	defer n.dataGen.Add(1)
	defer n.dataChanged()
	if last >= maxFileBlocks {
		n.conv.dropFrom(c) // queued conversions of the removed blocks go with them
	}
	if err := v.applyConversionsLocked(n); err != nil {
		return err
	}
	if err := n.m.tree.Remove(c, uint32(min(last, maxFileBlocks)-1)); err != nil {
		return err
	}
	n.m.drop(c, uint32(min(last, maxFileBlocks)-uint64(c)))
	if n.in.IsDir() {
		// A directory's i_size ends at its last mapped block (checkDirSize,
		// e2fsck): the orphan a crash leaves between steps reads as a
		// directory cut short.
		end, err := n.m.end()
		if err != nil {
			return err
		}
		if s := end * uint64(v.bs); s < n.in.Size {
			n.setSizeLocked(s)
		}
	}
	return v.writeInodeLocked(n)
}

// truncateStep runs fn as one operation with the inode locked, as
// Truncate does.
func (f *File) truncateStep(fn func() error) error {
	if err := f.v.beginOp(); err != nil {
		return err
	}
	f.n.mu.Lock()
	err := f.closedLocked()
	if err == nil {
		err = fn()
	}
	f.n.mu.Unlock()
	return f.v.endOpErr(err)
}

func (f *File) truncateLocked(size uint64) error {
	defer f.n.dataGen.Add(1)
	defer f.n.dataChanged()
	bs := uint64(f.v.bs)
	if size < f.in.Size {
		// Queued conversions of blocks the truncate removes go with them,
		// so that a truncate frees space even when the queue could not
		// get the tree blocks it needs.
		f.n.conv.dropFrom(uint32(min((size+bs-1)/bs, maxFileBlocks)))
	}
	if err := f.v.applyConversionsLocked(f.n); err != nil {
		return err
	}
	if size < f.in.Size {
		first := (size + bs - 1) / bs
		if first < maxFileBlocks {
			if _, err := f.v.checkRemoveLocked(f.n, uint32(first), extent.EndLblk-1); err != nil {
				return err
			}
			if err := f.m.tree.Remove(uint32(first), extent.EndLblk-1); err != nil {
				return err
			}
			f.m.drop(uint32(first), uint32(maxFileBlocks-first))
		}
		if err := f.zeroPartial(size, bs-size%bs); err != nil {
			return err
		}
		// The inode's preallocation window lies past the blocks just
		// freed: dropping it lets the file's next blocks start again
		// from its goal, where the freed ones become free after the
		// commit, instead of ever further on (ext4_truncate discards
		// the inode's preallocations too).
		if f.v.alloc != nil {
			f.v.alloc.ReleasePrealloc(f.ino)
		}
	}
	f.n.setSizeLocked(size)
	f.touchLocked()
	return f.v.writeInodeLocked(f.n)
}

// zeroPartial zeroes n bytes at off inside one block if that block is
// written (holes and unwritten blocks already read as zeroes).
func (f *File) zeroPartial(off, n uint64) error {
	bs := uint64(f.v.bs)
	if off%bs == 0 && n >= bs || n == 0 {
		return nil
	}
	n = min(n, bs-off%bs)
	m, err := f.m.lookup(off / bs)
	if err != nil || m.kind != mapWritten {
		return err
	}
	f.v.liveZeroed(m.pblk, 1)
	if _, err := f.v.dev.WriteAt(make([]byte, n), int64(m.pblk*bs+off%bs)); err != nil {
		return fmt.Errorf("ext4io: inode %d: zeroing: %w", f.ino, wrapIO(err))
	}
	return nil
}

// Sync makes the file's data and metadata durable: a deferred inode
// update is written, then the device is flushed.
func (f *File) Sync() error { return f.sync(true) }

// sync is Sync, and with times false Datasync.
func (f *File) sync(times bool) error {
	if err := f.checkOpen("sync"); err != nil {
		return err
	}
	if f.v.alloc != nil {
		f.n.atomicUnsynced.Store(false)
		if err := f.syncCache(); err != nil {
			return err
		}
		if err := f.v.syncInodeData(f.n, times); err != nil {
			return err
		}
		if err := f.v.home.h.takeErr(f.ino); err != nil {
			return &fs.PathError{Op: "sync", Path: f.name, Err: err}
		}
		if !times && f.n.jclean.Load() == jcleanDone && !f.n.noReadahead.Load() && f.v.failed() == nil &&
			f.v.jm.pendingLen() == 0 && !f.v.conversionsQueued() && f.v.jm.j.Idle() {
			// Nothing changed the file's data or size since a journalled
			// atomic write, whose commit was durable before it wrote in
			// place (atomicjournal.go), and every metadata change made
			// since (an xattr, another file's) has committed: all is
			// durable already, the write in place, maybe still in flight
			// (homewrite.go), included, as replay writes it.
			return nil
		}
		// The file's writes in place are waited for: liveCheck compares
		// the device with what was logged.
		if err := f.v.home.h.waitIno(f.ino); err != nil {
			return &fs.PathError{Op: "sync", Path: f.name, Err: err}
		}
		if err := f.liveCheck(); err != nil {
			return err
		}
		if f.v.fc != nil {
			// A fast commit writes its tags after the data and flushes
			// once (fcwrite.go); ineligible changes commit in full.
			if err := f.v.fastCommit(); !errors.Is(err, errFCFallback) {
				return err
			}
		}
		if f.v.jm != nil {
			// The commit flushes the device before its commit block, so
			// data written before it is durable too (ordered mode).
			return f.v.jm.commit(true)
		}
	}
	return f.v.flushDev()
}
