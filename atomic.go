package ext4io

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sync"

	"github.com/ext4io/ext4io/alloc"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/esc"
	"github.com/ext4io/ext4io/extent"
	"github.com/ext4io/ext4io/internal/stripe"
)

// Untorn multi-block writes (File.WriteAtomic, File.WriteAtomicBatch).
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
//     i_blocks and the size, and writes the inode when the swap changed
//     it: a new size, i_blocks (holes filled) or a new root in i_block.
//     Otherwise its times wait for Sync or Close, as an overwrite's do
//     (the touch clock). Whatever mapped the
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
// pending set it joins stays small (jmeta.log puts a whole set in one
// transaction). A swap whose bound (atomicWorstCredits
// from its size, else the count of atomicCredits) exceeds jmeta.maxChunk,
// an eighth of the journal, is refused before it changes anything: the
// old blocks of such a range are scattered over more groups or tree
// leaves than a transaction can be sure to hold.
//
// A batch (WriteAtomicBatch) is the same with several ranges: one
// allocation of all their blocks, written one range after the other in
// offset order (one vectored device write per allocated run), then, in
// the same operation and under one exclusive inode lock, one tree
// mutation for all ranges (extent.Tree.ReplaceRanges: all or nothing, each
// changed tree block encoded and logged once). The operation's changes
// land in one journal transaction, so the batch is one untorn unit; the
// credit check counts all its ranges. The mutation takes the tree blocks
// its splits need from the allocator's reserve.
//
// Fast commits: a swap is tracked like any write (the mapper's set
// records the swapped ranges and their inode, fcTrackRange), so the next
// fsync of any file on a volume with fast commits (fcwrite.go) logs it as
// ADD_RANGE tags of the range's new blocks and the INODE tag, in one fast
// commit: the swap's data was written before its operation ended, and a
// fast commit with ADD_RANGE flushes the device after building its tags
// and before writing them, then again after them. That is Linux's own
// representation of a range whose blocks changed
// (ext4_fc_write_inode_data logs what ext4_map_blocks maps now:
// ADD_RANGE where mapped, DEL_RANGE for holes), and every replay handles
// an ADD_RANGE over a range mapped elsewhere by unmapping the old blocks
// and freeing them in the bitmap: Linux's ext4_fc_replay_add_range
// ("logical to physical mapping changed": the extent updated, the old
// blocks marked free, every replayed inode's blocks marked used at the
// end), e2fsck 1.47's ext4_modify_extent_list (the overlapped extents'
// blocks unmarked, the inode's list marked again) and ext4io's (Remove,
// then Insert). A range that was a hole or unwritten is the same tag. A
// batch is one operation, so a fast commit holds all of its ranges or
// none (fcBuild takes txnGate exclusively), and one TAIL's crc covers
// them however many blocks the fast commit spans: a torn one replays none
// of them. docs/fastcommit.md ("Atomic writes") has the details.
//
// The old blocks stay busy (freeMapped) until a full jbd2 commit holding
// the swap is durable (jmeta.commit releases them after WaitCommit; fast
// commits release nothing): no later fast commit of the same area can
// map them, and once they are reused a full commit has superseded the
// fast commits that freed them, so even a replay that drops the area
// finds the new mapping. An allocation that fails for space while blocks
// are busy commits in full and retries (retryNoSpace). A file whose
// extent tree is deeper than i_block (more than four extents, the usual
// state of a file written at random this way) still commits in full, as
// every fsync of such a file does (fcInodeTags: e2fsck 1.47.0's replay
// rebuilds the tree with blocks a later ADD_RANGE may map), and so does
// every swap on a volume opened with Tuning.FastCommitOneFlush, whose
// fast commits do not flush the data before the tags that map it.
//
// Where the device guarantees untorn writes of the size
// (blockdev.AtomicWriter) and the range lies in written blocks of one
// extent, physically aligned to the write's size and inside the on-disk
// size, WriteAtomic overwrites in place instead, under the shared inode
// lock, changing no metadata, as directOverwrite does.
//
// Otherwise a write (or batch) of at most Tuning.AtomicJournalMax bytes
// (64 KiB by default) over written blocks inside the on-disk size, on a
// file synced since its previous atomic write, is journalled: its data is
// logged in a journal commit at the blocks' own numbers and then written
// in place, the blocks staying where they are (atomicjournal.go). Only
// the rest is remapped as above.

// maxAtomicWrite is AtomicWriteUnitMax on a journaled volume: 1 MiB. The
// swap of a range this size touches a handful of metadata blocks, far
// below a journal transaction (a quarter of the smallest journal mke2fs
// makes, 1024 blocks).
const maxAtomicWrite = 1 << 20

// maxAtomicBatch is AtomicWriteBatchMax on a journaled volume: 4 MiB,
// 1,024 4 KiB blocks. The credit check may still refuse a batch of that
// size (ErrUnsupported): a swap changes a few metadata blocks per range
// (atomicCredits). A batch of 64 16 KiB pages fits the transaction of a
// 16 MiB journal (an eighth of it, 512 blocks, jmeta.maxChunk), the
// journal mke2fs gives volumes from 128 MiB to 1 GiB.
const maxAtomicBatch = 4 << 20

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
	// AtomicWriteBatchMax is the largest total of the ranges of one
	// WriteAtomicBatch, in bytes: at least AtomicWriteUnitMax.
	AtomicWriteBatchMax int64
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
		AtomicWriteBatchMax:    max(bs, maxAtomicWrite, maxAtomicBatch),
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

// AtomicWrite is one range of a batch written by File.WriteAtomicBatch:
// Data goes at Off of the file.
type AtomicWrite struct {
	Off  int64
	Data []byte
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
// new ones, never a mix. A write that goes through the journal (below) is
// durable when it returns. A file opened with O_APPEND refuses it, as it
// refuses WriteAt. Concurrent WriteAtomic calls on
// one file or on different files run in parallel except for the mapping
// swap; of two overlapping ones, the one that swaps last wins the whole
// overlap. The file's dirty cached pages of the range are written back
// first, and its cached pages dropped.
//
// A write of at most Tuning.AtomicJournalMax bytes (64 KiB by default)
// over blocks already written inside the file's size, on a file synced
// (Sync, Datasync) since its previous atomic write or never written
// atomically, keeps its blocks: the data is committed to the journal,
// then written in place (data=journal for the write; atomicjournal.go).
// It costs a journal commit of its own, so a writer that syncs after
// every page pays one commit per page either way, and one that writes
// many pages before a sync has the first journalled and the rest moved.
// Other writes move the range to new blocks (see the top of atomic.go),
// so a file written that way at random fragments unless its writes stay
// in place on a device with a large enough AtomicWriteUnitInPlace.
func (f *File) WriteAtomic(p []byte, off int64) (int, error) {
	return f.writeAtomicOp("atomic write", []AtomicWrite{{Off: off, Data: p}})
}

// WriteAtomicBatch writes every range of ws as one untorn unit: a crash
// at any point leaves every range reading as before, or all of them
// reading as ws. It returns the number of bytes written, the sum of the
// ranges' lengths, or 0 with an error.
//
// Each range is aligned and sized as for WriteAtomic (a whole number of
// AtomicWriteUnitMin blocks, at most AtomicWriteUnitMax bytes); the
// ranges must not overlap, may come in any order, and may number at most
// 1024 and hold at most AtomicWriteBatchMax bytes in all
// (File.AtomicWriteInfo). Other batches are refused with an error
// wrapping ErrInvalid, and nothing is written; ErrUnsupported as for
// WriteAtomic, also when the batch's swap would not fit one journal
// transaction (an eighth of the journal): its ranges' old blocks are
// scattered, or it has many ranges for a small journal, as a swap
// changes a few metadata blocks per range (a batch of 64 pages needs a
// journal of 16 MiB, the mke2fs default from 128 MiB volumes). Durability,
// O_APPEND, O_SYNC and the page cache are as for WriteAtomic; concurrent
// batches and WriteAtomic calls that overlap are ordered as whole units:
// the one that swaps last wins every block they share.
//
// A batch of at most Tuning.AtomicJournalMax bytes in all over written
// blocks is journalled and written in place as WriteAtomic describes, in
// one commit. Otherwise the batch goes to one fresh run of blocks (a few
// runs when free space is fragmented), written with one vectored device
// write per run (blockdev.VectorWriter, else one WriteAt per range
// piece), and all its ranges are swapped in one journal transaction. A
// batch of one range is WriteAtomic; a batch of several never relies on
// the device's untorn writes (AtomicWriteUnitInPlace), as the device
// keeps only one write untorn, not the batch. Writing a batch of
// scattered pages by remapping puts them next to each other on the
// device, so the file holds about one extent per page written.
func (f *File) WriteAtomicBatch(ws []AtomicWrite) (int, error) {
	return f.writeAtomicOp("atomic batch write", ws)
}

// maxAtomicBatchRanges is the most ranges WriteAtomicBatch takes: IOV_MAX,
// so that a run written with one pwritev never needs more vectors.
const maxAtomicBatchRanges = 1024

// writeAtomicOp is WriteAtomic and WriteAtomicBatch, named op in errors.
func (f *File) writeAtomicOp(op string, ws []AtomicWrite) (int, error) {
	if err := f.checkOpen(op); err != nil {
		return 0, err
	}
	if f.flag&os.O_APPEND != 0 {
		return 0, errAppendWriteAt // as WriteAt
	}
	n, err := f.writeAtomic(op, ws)
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

// atomicRange is one range of an atomic write: p at off, logical blocks
// [lblk, lblk+nblk), and the new blocks that map them (runs, set by
// atomicAlloc, in logical order).
type atomicRange struct {
	p          []byte
	off        int64
	lblk, nblk uint64
	runs       []extent.Extent
}

// atomicRanges checks ws against the file's limits (info) and returns its
// ranges sorted by offset, with their total size in bytes.
func (f *File) atomicRanges(op string, ws []AtomicWrite, info AtomicWriteInfo) ([]atomicRange, int64, error) {
	bs := info.AtomicWriteUnitMin
	if len(ws) == 0 || len(ws) > maxAtomicBatchRanges {
		return nil, 0, &fs.PathError{Op: op, Path: f.name, Err: fmt.Errorf(
			"a batch of %d ranges: an atomic batch holds 1 to %d: %w", len(ws), maxAtomicBatchRanges, ErrInvalid)}
	}
	rs := make([]atomicRange, len(ws))
	total := int64(0)
	for i, w := range ws {
		p, off := w.Data, w.Off
		if err := f.checkRange(op, off, int64(len(p))); err != nil {
			return nil, 0, err
		}
		if len(p) == 0 || off%bs != 0 || int64(len(p))%bs != 0 || int64(len(p)) > info.AtomicWriteUnitMax {
			return nil, 0, &fs.PathError{Op: op, Path: f.name, Err: fmt.Errorf(
				"%d bytes at %d: an atomic write must be a whole number of %d-byte blocks, block-aligned, of at most %d bytes: %w",
				len(p), off, bs, info.AtomicWriteUnitMax, ErrInvalid)}
		}
		if !aligned(off, f.v.align) || !aligned(int64(len(p)), f.v.align) {
			return nil, 0, &fs.PathError{Op: op, Path: f.name, Err: fmt.Errorf("%d bytes at %d are not aligned to the device's %d bytes: %w", len(p), off, f.v.align, ErrInvalid)}
		}
		total += int64(len(p))
		rs[i] = atomicRange{p: p, off: off, lblk: uint64(off) >> f.v.bshift, nblk: uint64(len(p)) >> f.v.bshift}
	}
	if total > info.AtomicWriteBatchMax {
		return nil, 0, &fs.PathError{Op: op, Path: f.name, Err: fmt.Errorf(
			"a batch of %d bytes: an atomic batch holds at most %d: %w", total, info.AtomicWriteBatchMax, ErrInvalid)}
	}
	if len(rs) > 1 {
		slices.SortFunc(rs, func(a, b atomicRange) int { return cmp.Compare(a.off, b.off) })
		for i := 1; i < len(rs); i++ {
			if prev := rs[i-1]; prev.off+int64(len(prev.p)) > rs[i].off {
				return nil, 0, &fs.PathError{Op: op, Path: f.name, Err: fmt.Errorf(
					"the ranges [%d, +%d) and [%d, +%d) of an atomic batch overlap: %w", prev.off, len(prev.p), rs[i].off, len(rs[i].p), ErrInvalid)}
			}
		}
	}
	return rs, total, nil
}

// writeAtomic is writeAtomicOp without O_APPEND and O_SYNC.
func (f *File) writeAtomic(op string, ws []AtomicWrite) (int, error) {
	if err := f.writable(op); err != nil {
		return 0, err
	}
	info := f.AtomicWriteInfo()
	if info.AtomicWriteUnitMax == 0 {
		return 0, &fs.PathError{Op: op, Path: f.name, Err: fmt.Errorf("atomic writes need a journaled volume: %w", ErrUnsupported)}
	}
	rs, total, err := f.atomicRanges(op, ws, info)
	if err != nil {
		return 0, err
	}
	retried := false
	for {
		for _, r := range rs {
			if err := f.flushCache(r.off, r.off+int64(len(r.p))); err != nil {
				return 0, &fs.PathError{Op: op, Path: f.name, Err: err}
			}
		}
		if u := info.AtomicWriteUnitInPlace; u > 0 && len(rs) == 1 {
			if n, err, ok := f.atomicInPlace(rs[0].p, rs[0].off, u); ok {
				f.n.dataChanged()
				if err != nil {
					return n, &fs.PathError{Op: op, Path: f.name, Err: err}
				}
				return n, nil
			}
		}
		if ok, err := f.atomicJournal(rs, total); ok {
			if err != nil {
				return 0, &fs.PathError{Op: op, Path: f.name, Err: err}
			}
			return int(total), nil
		}
		if m := f.v.jm; m.pendingLen() >= m.commitAt {
			// Start the swap in a small transaction (see the top of the
			// file). An error here stops the volume; the operation below
			// reports it.
			_ = m.commit(false)
		}
		s, err := f.v.beginOpAt(stripe.OfBuf(rs[0].p))
		if err != nil {
			return 0, &fs.PathError{Op: op, Path: f.name, Err: err}
		}
		err = f.atomicSwap(rs, total)
		err = f.v.endOpErrAt(s, err)
		if err == errCacheRace {
			continue // a buffered write dirtied a range again
		}
		if !retried && f.v.retryNoSpace(err) {
			retried = true // blocks freed by earlier swaps are allocatable after the commit
			continue
		}
		if err != nil {
			return 0, &fs.PathError{Op: op, Path: f.name, Err: err}
		}
		f.n.atomicUnsynced.Store(true)
		f.n.dataChanged()
		return int(total), nil
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

// atomicSwap is the copy-on-write path of WriteAtomic and
// WriteAtomicBatch, inside an operation: new blocks for all of rs (sorted,
// not overlapping, total bytes), the data, then the mapping swap of every
// range (see the top of the file).
func (f *File) atomicSwap(rs []atomicRange, total int64) error {
	sh := f.v.bshift
	nblk := uint64(total) >> sh
	phys, err := f.atomicAlloc(rs, nblk)
	if err != nil {
		return err
	}
	freeNew := func() {
		for _, r := range phys {
			f.v.alloc.Free(r.Pblk, uint64(r.Len))
		}
	}
	if err := f.atomicWriteData(rs, phys); err != nil {
		freeNew()
		return err
	}
	f.n.mu.Lock()
	defer f.n.mu.Unlock()
	if err := f.closedLocked(); err != nil {
		freeNew()
		return err
	}
	for _, r := range rs {
		if !f.cacheCleanLocked(r.off, r.off+int64(len(r.p))) {
			freeNew()
			return errCacheRace
		}
	}
	if err := f.v.applyConversionsLocked(f.n); err != nil {
		freeNew()
		return err
	}
	f.v.stats.exclusive.Add(1)
	if f.n.delayed > 0 {
		for _, r := range rs {
			f.n.bops.dropDelayedLocked(r.lblk, r.nblk)
		}
	}
	most := f.v.jm.maxChunk
	adds := len(rs) // leaf entries the Replaces add at most: see atomicCredits
	for _, r := range rs {
		adds += len(r.runs)
	}
	c := atomicWorstCredits(nblk, adds, f.m.tree.Depth(), f.v.sb.GroupCount())
	if c > most {
		if c, err = f.atomicCredits(rs); err != nil {
			freeNew()
			return err
		}
	}
	if c > most {
		freeNew()
		return fmt.Errorf("ext4io: inode %d: atomic write of %d bytes in %d ranges from %d: its old blocks are scattered so that the swap would change about %d metadata blocks, more than one journal transaction takes here (%d): %w",
			f.ino, total, len(rs), rs[0].off, c, most, ErrUnsupported)
	}
	if f.v.opts.Tuning.FastCommitOneFlush {
		// One flush would let the fast commit's tags reach the device
		// with the new blocks' data still in flight: a crash could then
		// map the range to blocks that hold neither the old nor the new
		// data. Inside the operation, so that the full commit that ends
		// the ineligibility is the one holding the swap.
		f.v.fcIneligible("atomic write remap with FastCommitOneFlush")
	}
	// One tree mutation for all ranges: on error the tree is unchanged and
	// the new blocks go back, except for an error while writing the tree or
	// freeing the old blocks (ErrIO, ErrCorrupt), which stops the volume
	// (endOpErr) so that no commit holds the half-done swap. The unmapped
	// blocks reach freeMapped (treeAlloc).
	swaps := make([]extent.ReplaceRange, len(rs))
	for i, r := range rs {
		swaps[i] = extent.ReplaceRange{Lblk: uint32(r.lblk), Len: uint32(r.nblk), With: r.runs}
	}
	blocks, blocksChanged := f.n.in.Blocks(f.v.sb), f.n.blocksChanged
	if err := f.m.tree.ReplaceRanges(swaps, true); err != nil {
		freeNew()
		return err
	}
	// The runs cover the ranges: each Insert replaces what the cache held
	// there (the Delayed blocks were dropped above), with no Remove first.
	for _, r := range rs {
		for _, e := range r.runs {
			if err := f.m.set(esc.Extent{Lblk: e.Lblk, Len: e.Len, Pblk: e.Pblk, Status: esc.Written}); err != nil {
				return err
			}
		}
	}
	if err := (treeAlloc{f.v, f.n}).addBlocks(int64(nblk)); err != nil {
		return err
	}
	if !blocksChanged && f.n.in.Blocks(f.v.sb) == blocks {
		f.n.blocksChanged = false // as many blocks freed as allocated: i_blocks is as written
	}
	last := rs[len(rs)-1]
	end := uint64(last.off) + uint64(len(last.p))
	grows := end > f.n.in.Size || f.n.sizeAhead.Load() && end > f.n.disksize.Load()
	f.n.wroteLocked(end)
	// The times as an overwrite's (directOverwrite): stamped, and written
	// with the inode when something else changes it, or by Sync or Close.
	f.v.touch.stamp(f.n)
	if grows {
		return f.v.writeInodeLocked(f.n) // i_size or the on-disk size
	}
	// The inode only if the mapping reached it: a new root in i_block
	// (a tree of depth 0) or i_blocks (the range had holes).
	return f.v.writeMappingLocked(f.n)
}

// atomicWriteData writes the ranges' data to the new blocks phys, which
// hold them one after the other: one request per run where the device
// takes several buffers in one (blockdev.VectorWriter), or is a direct-I/O
// device (blockdev.Aligner, where each request reaches the disk): there
// the pieces are copied into one pooled buffer first. On other devices
// (memory) a copy of the batch costs more than a call per piece, which
// blockdev.WriteVAt makes.
func (f *File) atomicWriteData(rs []atomicRange, phys []extent.Extent) error {
	sh := f.v.bshift
	_, vectored := f.v.dev.(blockdev.VectorWriter)
	_, direct := f.v.dev.(blockdev.Aligner)
	var vbuf [1][]byte
	bufs := vbuf[:0]
	ri, roff := 0, 0 // the range and the byte in it that the next run starts with
	for _, e := range phys {
		bufs = bufs[:0]
		size := int(e.Len) << sh
		for need := size; need > 0; {
			p := rs[ri].p[roff:]
			k := min(len(p), need)
			bufs = append(bufs, p[:k])
			need -= k
			if roff += k; roff == len(rs[ri].p) {
				ri, roff = ri+1, 0
			}
		}
		var err error
		if len(bufs) > 1 && !vectored && direct && size <= maxAtomicBatch {
			b := atomicStaging.Get().(*[]byte)
			done := 0
			for _, p := range bufs {
				done += copy((*b)[done:], p)
			}
			_, err = f.v.dev.WriteAt((*b)[:size], int64(e.Pblk)<<sh)
			atomicStaging.Put(b)
		} else {
			_, err = blockdev.WriteVAt(f.v.dev, bufs, int64(e.Pblk)<<sh)
		}
		if err != nil {
			return fmt.Errorf("ext4io: inode %d: atomic write of %d ranges from %d at block %d: %w", f.ino, len(rs), rs[0].off, e.Pblk, wrapIO(err))
		}
	}
	return nil
}

// atomicStaging holds atomicWriteData's staging buffers (*[]byte of
// maxAtomicBatch bytes). Allocations this large start on a page boundary,
// so blockdev.Direct writes them without a bounce.
var atomicStaging = sync.Pool{New: func() any {
	b := make([]byte, maxAtomicBatch)
	return &b
}}

// atomicAlloc allocates nblk blocks for the ranges rs (sorted, nblk
// blocks in all) and sets each range's runs; it returns the allocated
// runs, which hold the ranges one after the other. On error nothing
// stays allocated.
//
// Its placement keeps a file written at random one range at a time from
// fragmenting without bound. A single range goes, whole, right after the
// blocks mapping lblk-1 or right before those mapping lblk+nblk when those
// are free, extending a neighbour's extent; otherwise, and for a batch of
// several ranges always, through the inode's preallocation window near
// the first range's neighbour (allocRequest), as few runs as the
// allocator gives. A page rewritten in place of a neighbour's extent is
// thus away from it after one write and usually back after the next: its
// old blocks, freed once the swap committed, are where the neighbour's
// extent continues, and the two merge again. Every moved page is one
// extent at most, not several.
func (f *File) atomicAlloc(rs []atomicRange, nblk uint64) ([]extent.Extent, error) {
	lblk := rs[0].lblk
	// The goals come from lookups, which fill the extent-status cache
	// from the tree: under the shared inode lock, so that no swap runs
	// between a fill's tree lookup and its insertion (esc.Tree.Fill).
	s := f.n.mu.RLockAt(int(lblk))
	var gbuf [2]uint64
	goals := gbuf[:0]
	if len(rs) == 1 {
		goals = f.atomicGoals(goals, lblk, nblk)
	}
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
			phys := []extent.Extent{{Lblk: uint32(lblk), Len: uint32(nblk), Pblk: goal}}
			rs[0].runs = phys
			return phys, nil
		}
	}
	var phys []extent.Extent
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
			for _, r := range phys {
				f.v.alloc.Free(r.Pblk, uint64(r.Len))
			}
			return nil, fmt.Errorf("ext4io: inode %d: allocating %d blocks for an atomic write: %w", f.ino, nblk, err)
		}
		phys = append(phys, extent.Extent{Len: uint32(got), Pblk: start})
		done += got
		req = alloc.Request{Goal: start + got, Min: 1, Ino: f.ino}
	}
	atomicAssign(rs, phys)
	return phys, nil
}

// atomicAssign sets the runs of the ranges rs (sorted) to the pieces of
// phys that hold them, the ranges one after the other.
func atomicAssign(rs []atomicRange, phys []extent.Extent) {
	if len(rs) == 1 && len(phys) == 1 {
		phys[0].Lblk = uint32(rs[0].lblk)
		rs[0].runs = phys
		return
	}
	pieces := make([]extent.Extent, 0, len(rs)+len(phys)-1)
	pi, used := 0, uint64(0) // the run and the blocks of it taken
	for i := range rs {
		first := len(pieces)
		for done := uint64(0); done < rs[i].nblk; {
			e := phys[pi]
			k := min(uint64(e.Len)-used, rs[i].nblk-done)
			pieces = append(pieces, extent.Extent{Lblk: uint32(rs[i].lblk + done), Len: uint32(k), Pblk: e.Pblk + used})
			done += k
			if used += k; used == uint64(e.Len) {
				pi, used = pi+1, 0
			}
		}
		rs[i].runs = pieces[first:len(pieces):len(pieces)]
	}
}

// atomicGoals returns the places where nblk new blocks for lblk would
// extend a written neighbour: after the block mapping lblk-1, before the
// one mapping lblk+nblk. They are appended to goals. A place that starts
// in the range's own blocks is left out: those are in use until the swap
// commits, so an exact allocation there fails. The first place does when
// the run mapping lblk-1 goes on to lblk (the range starts in place in its
// neighbour's extent); the second is then the same place, with no lookup,
// when that run goes on through lblk+nblk. A place is returned once.
func (f *File) atomicGoals(goals []uint64, lblk, nblk uint64) []uint64 {
	if lblk > 0 {
		if m, err := f.m.lookup(lblk - 1); err == nil && m.kind == mapWritten {
			switch {
			case m.n > nblk+1:
				return goals // both places are the range's first block
			case m.n == 1:
				goals = append(goals, m.pblk+1)
			}
		}
	}
	if lblk+nblk < maxFileBlocks {
		if m, err := f.m.lookup(lblk + nblk); err == nil && m.kind == mapWritten && m.pblk >= nblk {
			if g := m.pblk - nblk; len(goals) == 0 || goals[0] != g {
				goals = append(goals, g) // not twice: the range's old place between the two
			}
		}
	}
	return goals
}

// atomicCredits bounds the metadata blocks a swap of the ranges rs
// (sorted) to their runs changes: a block bitmap and a group descriptor
// block for every group holding an old or new block, the extent-tree
// blocks holding the ranges (extent.Tree.RangeBlocks, of each range or of
// the span from the first to the last, whichever is less) and the new
// ones leaf splits may add (a path's worth for every leaf entry a range's
// Replace adds: one per new run, one more for a range inside a single
// extent), the inode and the superblock. The
// caller holds n.mu exclusively. The swap must fit one journal
// transaction (see the top of the file), which WriteAtomic checks against
// jmeta.maxChunk, an eighth of the journal.
func (f *File) atomicCredits(rs []atomicRange) (int, error) {
	depth := f.m.tree.Depth()
	bpg := uint64(f.v.sb.BlocksPerGroup)
	first := uint64(f.v.sb.FirstDataBlock)
	groups := map[uint64]bool{}
	addRun := func(p, n uint64) {
		for g := (p - min(p, first)) / bpg; g <= (p+n-1-min(p+n-1, first))/bpg; g++ {
			groups[g] = true
		}
	}
	// The blocks holding the span from the first range to the last bound
	// the tree blocks of all ranges; the sum of the ranges' own is less
	// when they are few and far apart in a large tree. The per-range
	// walks stop once their sum reaches the span's.
	span := -1
	if len(rs) > 1 {
		last := rs[len(rs)-1]
		var err error
		if span, err = f.m.tree.RangeBlocks(uint32(rs[0].lblk), uint32(last.lblk+last.nblk-rs[0].lblk)); err != nil {
			return 0, err
		}
	}
	tree, splits := 0, 0
	for _, r := range rs {
		for _, e := range r.runs {
			addRun(e.Pblk, uint64(e.Len))
		}
		lblk, nblk := r.lblk, r.nblk
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
		if span < 0 || tree < span {
			t, err := f.m.tree.RangeBlocks(uint32(lblk), uint32(nblk))
			if err != nil {
				return 0, err
			}
			tree += t
		}
		// Replace adds an entry to a leaf for every new run, and one
		// more when a single extent spans the range with blocks on both
		// sides (its removal leaves two pieces); each may split a full
		// leaf, and the split its full parents up to a new root: a
		// path's worth of new blocks.
		adds := len(r.runs)
		if lblk > 0 {
			e, found, _, err := f.m.tree.Lookup(uint32(lblk - 1))
			if err != nil {
				return 0, err
			}
			if found && e.End() > lblk+nblk {
				adds++
			}
		}
		splits += adds * (depth + 1)
	}
	if span >= 0 {
		tree = min(tree, span)
	}
	return 2*len(groups) + tree + splits + 2, nil
}

// atomicWorstCredits bounds atomicCredits for any swap of nblk blocks
// that adds at most adds leaf entries (its new runs and its ranges) on a
// tree of the given depth, on a volume of groups groups, without looking
// at the ranges: every old and every new block in a group of its own
// (2*nblk groups, at most all of them), every old block in an extent of
// its own on a path of depth tree blocks, and a split's path per entry
// added. A small swap whose bound fits a transaction skips the exact
// count.
func atomicWorstCredits(nblk uint64, adds, depth int, groups uint64) int {
	return 2*int(min(2*nblk, groups)) + int(nblk)*depth + adds*(depth+1) + 2
}
