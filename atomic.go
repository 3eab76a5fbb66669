package ext4io

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/ext4io/ext4io/alloc"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/esc"
	"github.com/ext4io/ext4io/extent"
	"github.com/ext4io/ext4io/internal/stripe"
)

// Untorn multi-block writes (File.WriteAtomic).
//
// A database page of several blocks written with WriteAt can be torn by a
// crash: some of its blocks new, some old. WriteAtomic writes it so that
// after any crash it reads entirely old or entirely new, on any device:
//
//  1. Inside one metadata operation (beginOp) it allocates fresh blocks
//     near the range's neighbours (looked up under the shared inode lock)
//     and writes the data to them, holding no inode lock. Writers of the
//     same file run this step in parallel.
//  2. Under the exclusive inode lock it swaps the range's mapping for the
//     new blocks in one extent-tree mutation (extent.Tree.Replace), sets
//     i_blocks and the size and writes the inode. Whatever mapped the
//     range before (written or unwritten blocks, holes) is unmapped; its
//     blocks are freed with freeMapped, so they become allocatable only
//     once the transaction holding the swap has committed (busy extents).
//
// An operation's changes never straddle two commits (jmeta: a commit takes
// txnGate exclusively), and the commit flushes the device before its
// commit block, so the new data is durable before the mapping that
// exposes it: a crash before the commit leaves the old mapping and old
// blocks (untouched, as they are not reused before the commit), after it
// the new ones. The metadata of one swap is a few blocks (the tree leaves
// and index blocks on the range's path, the bitmaps and group descriptors
// of the old and new runs, the inode), and WriteAtomic commits first when
// the running transaction is already large (jmeta.commitAt), so that the
// swap lands in one journal transaction even where jmeta.log spreads a
// large pending set over several. A swap whose bound (atomicWorstCredits
// from its size, else the count of atomicCredits) exceeds jmeta.maxChunk,
// an eighth of the journal, is refused before it changes anything: the
// old blocks of such a range are scattered over more groups or tree
// leaves than a transaction can be sure to hold.
//
// Fast commits: a swap moves blocks between owners, which fast-commit
// range records replay only as "map these blocks" without the frees of
// the old ones being ordered against their reuse. So a swap makes the
// running transaction ineligible for fast commits (fcIneligible, as
// Linux marks EXT4_FC_REASON_SWAP_BOOT/FALLOC_RANGE): the next fsync
// commits the journal in full; the swap itself is always logged as
// ordinary metadata in the running transaction.
//
// Where the device guarantees untorn writes of the size
// (blockdev.AtomicWriter) and the range lies in written blocks of one
// extent, physically aligned to the write's size and inside the on-disk
// size, WriteAtomic overwrites in place instead, under the shared inode
// lock, changing no metadata, as directOverwrite does.

// maxAtomicWrite is AtomicWriteUnitMax on a journaled volume: 1 MiB. The
// swap of a range this size touches a handful of metadata blocks, far
// below a journal transaction (a quarter of the smallest journal mke2fs
// makes, 1024 blocks).
const maxAtomicWrite = 1 << 20

// AtomicWriteInfo holds a file's limits for WriteAtomic, named as statx
// reports them for RWF_ATOMIC (stx_atomic_write_unit_min/max).
type AtomicWriteInfo struct {
	// AtomicWriteUnitMin is the smallest untorn write, in bytes: one
	// file-system block. 0 when the file cannot be written atomically.
	AtomicWriteUnitMin int64
	// AtomicWriteUnitMax is the largest untorn write, in bytes.
	AtomicWriteUnitMax int64
	// AtomicWriteUnitInPlace is the largest write the device itself keeps
	// untorn (blockdev.AtomicWriter), which WriteAtomic may write in
	// place without moving blocks; 0 when the device guarantees none.
	AtomicWriteUnitInPlace int64
}

// AtomicWriteInfo reports the limits of WriteAtomic on f. A file that
// cannot be written atomically (a read-only volume, one without a
// journal, a file not mapped by extents) reports zeroes.
func (f *File) AtomicWriteInfo() AtomicWriteInfo {
	if f.checkOpen("atomic write info") != nil || f.v.alloc == nil || f.v.jm == nil ||
		f.m == nil || f.m.tree == nil || !f.in.IsReg() {
		return AtomicWriteInfo{}
	}
	bs := int64(f.v.bs)
	return AtomicWriteInfo{
		AtomicWriteUnitMin:     bs,
		AtomicWriteUnitMax:     max(bs, maxAtomicWrite),
		AtomicWriteUnitInPlace: deviceAtomicUnit(f.v.dev, bs),
	}
}

// deviceAtomicUnit is the device's untorn write size if it is at least
// one block, else 0.
func deviceAtomicUnit(dev blockdev.Device, bs int64) int64 {
	if aw, ok := dev.(blockdev.AtomicWriter); ok {
		if u := aw.AtomicWriteUnitMax(); u >= bs && u&(u-1) == 0 {
			return u
		}
	}
	return 0
}

// WriteAtomic writes p at off so that a crash at any point leaves the
// range reading entirely as before or entirely as p (RWF_ATOMIC, without
// its one-block limit). off and len(p) must be multiples of
// AtomicWriteUnitMin and len(p) at most AtomicWriteUnitMax
// (File.AtomicWriteInfo); other writes are refused, with an error
// wrapping ErrInvalid (ErrUnsupported when the file or volume cannot write
// atomically, or when the range's old blocks are so scattered that the
// swap would not fit one journal transaction), and nothing is written.
// The write may extend the file.
//
// Durability is as for WriteAt: the write is durable once a later Sync,
// Datasync or Volume.Sync returns nil (or when it returns, on a file
// opened with O_SYNC); a crash before then leaves the old contents or the
// new ones, never a mix. A file opened with O_APPEND refuses it, as it
// refuses WriteAt. Concurrent WriteAtomic calls on
// one file or on different files run in parallel except for the mapping
// swap; of two overlapping ones, the one that swaps last wins the whole
// overlap. The file's dirty cached pages of the range are written back
// first, and its cached pages dropped.
//
// Each write moves the range to new blocks (see the top of atomic.go),
// so a file written this way at random fragments unless its writes stay
// in place on a device with a large enough AtomicWriteUnitInPlace.
func (f *File) WriteAtomic(p []byte, off int64) (int, error) {
	if err := f.checkOpen("atomic write"); err != nil {
		return 0, err
	}
	if f.flag&os.O_APPEND != 0 {
		return 0, errAppendWriteAt // as WriteAt
	}
	n, err := f.writeAtomic(p, off)
	if f.n.readAhead.Load() {
		f.n.dataGen.Add(1) // as writeSync: an in-place write keeps the mapping's seq
	}
	if err == nil && f.flag&os.O_SYNC != 0 {
		if err = f.Sync(); err != nil {
			err = &fs.PathError{Op: "sync", Path: f.name, Err: err}
		}
	}
	return n, err
}

// writeAtomic is WriteAtomic without O_APPEND and O_SYNC.
func (f *File) writeAtomic(p []byte, off int64) (int, error) {
	const op = "atomic write"
	if err := f.writable(op); err != nil {
		return 0, err
	}
	if err := f.checkRange(op, off, int64(len(p))); err != nil {
		return 0, err
	}
	info := f.AtomicWriteInfo()
	if info.AtomicWriteUnitMax == 0 {
		return 0, &fs.PathError{Op: op, Path: f.name, Err: fmt.Errorf("atomic writes need a journaled volume: %w", ErrUnsupported)}
	}
	bs := info.AtomicWriteUnitMin
	if len(p) == 0 || off%bs != 0 || int64(len(p))%bs != 0 || int64(len(p)) > info.AtomicWriteUnitMax {
		return 0, &fs.PathError{Op: op, Path: f.name, Err: fmt.Errorf(
			"%d bytes at %d: an atomic write must be a whole number of %d-byte blocks, block-aligned, of at most %d bytes: %w",
			len(p), off, bs, info.AtomicWriteUnitMax, ErrInvalid)}
	}
	if !aligned(off, f.v.align) || !aligned(int64(len(p)), f.v.align) {
		return 0, &fs.PathError{Op: op, Path: f.name, Err: fmt.Errorf("%d bytes at %d are not aligned to the device's %d bytes: %w", len(p), off, f.v.align, ErrInvalid)}
	}
	retried := false
	for {
		if err := f.flushCache(off, off+int64(len(p))); err != nil {
			return 0, &fs.PathError{Op: op, Path: f.name, Err: err}
		}
		if u := info.AtomicWriteUnitInPlace; u > 0 {
			if n, err, ok := f.atomicInPlace(p, off, u); ok {
				if err != nil {
					return n, &fs.PathError{Op: op, Path: f.name, Err: err}
				}
				return n, nil
			}
		}
		if m := f.v.jm; m.pendingLen() >= m.commitAt {
			// Start the swap in a small transaction (see the top of the
			// file). An error here stops the volume; the operation below
			// reports it.
			_ = m.commit(false)
		}
		s, err := f.v.beginOpAt(stripe.OfBuf(p))
		if err != nil {
			return 0, &fs.PathError{Op: op, Path: f.name, Err: err}
		}
		err = f.atomicSwap(p, off)
		err = f.v.endOpErrAt(s, err)
		if err == errCacheRace {
			continue // a buffered write dirtied the range again
		}
		if !retried && f.v.retryNoSpace(err) {
			retried = true // blocks freed by earlier swaps are allocatable after the commit
			continue
		}
		if err != nil {
			return 0, &fs.PathError{Op: op, Path: f.name, Err: err}
		}
		return len(p), nil
	}
}

// atomicInPlace overwrites p at off in place when the device keeps writes
// of len(p) untorn (unit, a power of two): the range must lie in written
// blocks of one extent inside the on-disk size, starting at a device
// offset that is a multiple of len(p) rounded up to a power of two. ok is
// false, with nothing written, otherwise. It runs outside any operation,
// as directOverwrite does (Close waits for it through the inode lock, see
// Volume.drainInodeWriters).
func (f *File) atomicInPlace(p []byte, off, unit int64) (n int, err error, ok bool) {
	size := int64(len(p))
	if size > unit {
		return 0, nil, false
	}
	pow := int64(pow2Floor(uint64(size)))
	if pow < size {
		pow <<= 1
	}
	defer f.n.mu.RUnlockAt(f.n.mu.RLockAt(stripe.OfBuf(p)))
	if f.v.closed.Load() { // under the inode lock: see Volume.drainInodeWriters
		return 0, nil, false // the swap's operation fails with ErrClosed
	}
	if err := f.closedLocked(); err != nil {
		return 0, err, true
	}
	end := off + size
	if end > int64(f.n.diskSize()) {
		return 0, nil, false
	}
	lblk, nblk := uint64(off)>>f.v.bshift, uint64(size)>>f.v.bshift
	m, err := f.m.lookupN(lblk, nblk)
	if err != nil || m.kind != mapWritten || m.n < nblk || m.pblk+nblk > f.v.sb.BlocksCount {
		return 0, nil, false
	}
	addr := int64(m.pblk) << f.v.bshift
	if addr%pow != 0 || !f.cacheCleanLocked(off, end) {
		return 0, nil, false
	}
	f.v.touch.stamp(f.n)
	f.v.stats.shared.Add(stripe.OfBuf(p), 1)
	if _, err := f.v.dev.WriteAt(p, addr); err != nil {
		return 0, fmt.Errorf("ext4io: inode %d: atomic write [%d, +%d) in place at block %d: %w", f.ino, off, size, m.pblk, wrapIO(err)), true
	}
	return len(p), nil, true
}

// atomicSwap is WriteAtomic's copy-on-write path, inside an operation:
// new blocks, the data, then the mapping swap (see the top of the file).
func (f *File) atomicSwap(p []byte, off int64) error {
	sh := f.v.bshift
	lblk, nblk := uint64(off)>>sh, uint64(len(p))>>sh
	runs, err := f.atomicAlloc(lblk, nblk)
	if err != nil {
		return err
	}
	freeRuns := func() {
		for _, r := range runs {
			f.v.alloc.Free(r.Pblk, uint64(r.Len))
		}
	}
	done := 0
	for _, r := range runs {
		k := int(r.Len) << sh
		if _, err := f.v.dev.WriteAt(p[done:done+k], int64(r.Pblk)<<sh); err != nil {
			freeRuns()
			return fmt.Errorf("ext4io: inode %d: atomic write [%d, +%d) at block %d: %w", f.ino, off, len(p), r.Pblk, wrapIO(err))
		}
		done += k
	}
	f.n.mu.Lock()
	defer f.n.mu.Unlock()
	if err := f.closedLocked(); err != nil {
		freeRuns()
		return err
	}
	if !f.cacheCleanLocked(off, off+int64(len(p))) {
		freeRuns()
		return errCacheRace
	}
	if err := f.v.applyConversionsLocked(f.n); err != nil {
		freeRuns()
		return err
	}
	f.v.stats.exclusive.Add(1)
	if f.n.delayed > 0 {
		f.n.bops.dropDelayedLocked(lblk, nblk)
	}
	most := f.v.jm.maxChunk
	c := atomicWorstCredits(nblk, f.m.tree.Depth())
	if c > most {
		if c, err = f.atomicCredits(lblk, nblk, runs); err != nil {
			freeRuns()
			return err
		}
	}
	if c > most {
		freeRuns()
		return fmt.Errorf("ext4io: inode %d: atomic write [%d, +%d): its old blocks are scattered so that the swap would change about %d metadata blocks, more than one journal transaction takes here (%d): %w",
			f.ino, off, len(p), c, most, ErrUnsupported)
	}
	// Inside the operation, so that the full commit that ends the fast
	// commits' eligibility is the one holding the swap.
	f.v.fcIneligible("atomic write remap")
	// One tree mutation: on error the tree is unchanged and the new
	// blocks go back. The unmapped blocks reach freeMapped (treeAlloc).
	if err := f.m.tree.Replace(uint32(lblk), uint32(nblk), runs, true); err != nil {
		freeRuns()
		return err
	}
	// The runs cover the range: each Insert replaces what the cache held
	// there (the Delayed blocks were dropped above), with no Remove first.
	for _, r := range runs {
		if err := f.m.set(esc.Extent{Lblk: r.Lblk, Len: r.Len, Pblk: r.Pblk, Status: esc.Written}); err != nil {
			return err
		}
	}
	if err := (treeAlloc{f.v, f.n}).addBlocks(int64(nblk)); err != nil {
		return err
	}
	f.n.wroteLocked(uint64(off) + uint64(len(p)))
	f.touchLocked()
	return f.v.writeInodeLocked(f.n)
}

// atomicAlloc allocates nblk blocks for logical blocks [lblk, lblk+nblk).
// On error nothing stays allocated.
//
// Its placement keeps a file written at random from fragmenting without
// bound. The range goes, whole, right after the blocks mapping lblk-1 or
// right before those mapping lblk+nblk when those are free, extending a
// neighbour's extent; otherwise through the inode's preallocation window
// near them (allocRequest), as few runs as the allocator gives. A page
// rewritten in place of a neighbour's extent is thus away from it after
// one write and usually back after the next: its old blocks, freed once
// the swap committed, are where the neighbour's extent continues, and the
// two merge again. Every moved page is one extent at most, not several.
func (f *File) atomicAlloc(lblk, nblk uint64) ([]extent.Extent, error) {
	// The goals come from lookups, which fill the extent-status cache
	// from the tree: under the shared inode lock, so that no swap runs
	// between a fill's tree lookup and its insertion (esc.Tree.Fill).
	s := f.n.mu.RLockAt(int(lblk))
	var gbuf [2]uint64
	goals := f.atomicGoals(gbuf[:0], lblk, nblk)
	req := f.allocRequest(lblk, nblk)
	f.n.mu.RUnlockAt(s)
	for _, goal := range goals {
		if f.v.zone.overlaps(0, goal, nblk) {
			continue // metadata: only a lying bitmap would offer it
		}
		ok, err := f.v.alloc.AllocExact(goal, nblk, 0)
		if err != nil {
			return nil, err
		}
		if ok {
			return []extent.Extent{{Lblk: uint32(lblk), Len: uint32(nblk), Pblk: goal}}, nil
		}
	}
	var runs []extent.Extent
	req.Min = nblk // whole if possible, else in pieces
	for done := uint64(0); done < nblk; {
		req.Max = min(nblk-done, extent.MaxWrittenLen)
		req.Min = min(req.Min, req.Max)
		start, got, err := f.v.allocate(req)
		if errors.Is(err, ErrNoSpace) && req.Min > 1 {
			req.Min = 1
			continue
		}
		if err == nil && got == 0 {
			err = fmt.Errorf("allocator returned no blocks: %w", ErrNoSpace)
		}
		if err != nil {
			for _, r := range runs {
				f.v.alloc.Free(r.Pblk, uint64(r.Len))
			}
			return nil, fmt.Errorf("ext4io: inode %d: allocating %d blocks for an atomic write: %w", f.ino, nblk, err)
		}
		runs = append(runs, extent.Extent{Lblk: uint32(lblk + done), Len: uint32(got), Pblk: start})
		done += got
		req = alloc.Request{Goal: start + got, Min: 1, Ino: f.ino}
	}
	return runs, nil
}

// atomicGoals returns the places where nblk new blocks for lblk would
// extend a written neighbour: after the block mapping lblk-1, before the
// one mapping lblk+nblk. They are appended to goals.
func (f *File) atomicGoals(goals []uint64, lblk, nblk uint64) []uint64 {
	if lblk > 0 {
		if m, err := f.m.lookup(lblk - 1); err == nil && m.kind == mapWritten {
			goals = append(goals, m.pblk+1)
		}
	}
	if lblk+nblk < maxFileBlocks {
		if m, err := f.m.lookup(lblk + nblk); err == nil && m.kind == mapWritten && m.pblk >= nblk {
			goals = append(goals, m.pblk-nblk)
		}
	}
	return goals
}

// atomicCredits bounds the metadata blocks a swap of [lblk, lblk+nblk)
// to runs changes: a block bitmap and a group descriptor block for every
// group holding an old or new block, the extent-tree blocks holding the
// range (extent.Tree.RangeBlocks) and the new ones splits at its two ends
// may add (a path's worth each), the inode and the superblock. The caller
// holds n.mu exclusively. The swap must fit one journal transaction (see
// the top of the file), which WriteAtomic checks against jmeta.maxChunk,
// an eighth of the journal.
func (f *File) atomicCredits(lblk, nblk uint64, runs []extent.Extent) (int, error) {
	depth := f.m.tree.Depth()
	bpg := uint64(f.v.sb.BlocksPerGroup)
	first := uint64(f.v.sb.FirstDataBlock)
	groups := map[uint64]bool{}
	addRun := func(p, n uint64) {
		for g := (p - min(p, first)) / bpg; g <= (p+n-1-min(p+n-1, first))/bpg; g++ {
			groups[g] = true
		}
	}
	for _, r := range runs {
		addRun(r.Pblk, uint64(r.Len))
	}
	for b := lblk; b < lblk+nblk; {
		m, err := f.m.lookupN(b, lblk+nblk-b)
		if err != nil {
			return 0, err
		}
		k := min(max(m.n, 1), lblk+nblk-b)
		if m.kind == mapWritten || m.kind == mapUnwritten {
			addRun(m.pblk, k)
		}
		b += k
	}
	tree, err := f.m.tree.RangeBlocks(uint32(lblk), uint32(nblk))
	if err != nil {
		return 0, err
	}
	return 2*len(groups) + tree + 2*(depth+1) + 2, nil
}

// atomicWorstCredits bounds atomicCredits for any nblk-block swap on a
// tree of the given depth, without looking at the range: every old and
// every new block in a group of its own (2*nblk groups), and every old
// block in an extent of its own on a path of depth tree blocks. A small
// swap whose bound fits a transaction skips the exact count.
func atomicWorstCredits(nblk uint64, depth int) int {
	return 2*(2*int(nblk)) + int(nblk)*depth + 2*(depth+1) + 2
}
