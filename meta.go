package ext4io

import (
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/ext4io/ext4io/alloc"
	"github.com/ext4io/ext4io/extent"
	"github.com/ext4io/ext4io/internal/errs"
	"github.com/ext4io/ext4io/iomap"
	"github.com/ext4io/ext4io/layout"
)

// Metadata writes of a writable volume.
//
// Every metadata block (inode table blocks, extent tree blocks, bitmaps and
// descriptors through alloc) is changed through v.meta, an alloc.MetaIO.
// Without a journal it writes in place; the journal replaces it with one
// that logs each block in the running transaction.

// blockLocks serialize read-modify-write of shared metadata blocks (an
// inode table block holds several inodes).
type blockLocks [64]sync.Mutex

func (l *blockLocks) lock(blk uint64) *sync.Mutex {
	m := &l[blk%uint64(len(l))]
	m.Lock()
	return m
}

// writeInodeLocked encodes n's inode (with its checksum, and the times of
// shared-lock writes) into its inode table block. The caller holds n.mu
// exclusively, or n.mu shared and n.dataMu. Each call is one metadata
// update.
func (v *Volume) writeInodeLocked(n *inode) error {
	v.applyTouchLocked(n)
	if n.m != nil && n.m.tree != nil {
		n.in.Block = n.m.tree.Root()
	}
	v.stats.metaUpdates.Add(1)
	in := n.in
	if n.sizeAhead.Load() {
		// The on-disk size moves only when data is on the device (ext4's
		// i_disksize); i_size stays in memory.
		c := *in
		c.Raw = slices.Clone(in.Raw)
		c.Size = n.disksize.Load()
		in = &c
	}
	if err := v.writeInode(n.ino, in); err != nil {
		// The change is in memory only: n stays dirty, so that the next
		// write of it (Sync, Close, the committer) carries it.
		n.dirty = true
		return err
	}
	n.dirty, n.blocksChanged = false, false
	return nil
}

// writeMappingLocked writes n's inode if a mapping change reached it (a
// new extent-tree root in i_block, or i_blocks), so that it commits with
// the tree blocks of the change; a change confined to tree blocks leaves
// the inode's times for Sync or Close, as overwrites do. The caller holds
// n.mu exclusively, or shared with n.dataMu.
func (v *Volume) writeMappingLocked(n *inode) error {
	if n.blocksChanged || n.m == nil || n.m.tree == nil || n.m.tree.Root() != n.in.Block {
		return v.writeInodeLocked(n)
	}
	n.dirty = true
	return nil
}

// writeDirtyInodes writes every inode whose in-memory times changed under
// a shared lock (direct overwrites defer the inode write, as ext4's
// overwrite path defers it to the journal's next commit).
func (v *Volume) writeDirtyInodes() error {
	v.inoMu.Lock()
	var dirty []*inode
	for _, n := range v.inodes {
		dirty = append(dirty, n)
	}
	v.inoMu.Unlock()
	var first error
	for _, n := range dirty {
		if err := v.syncInode(n); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// syncInode writes n if it is dirty.
func (v *Volume) syncInode(n *inode) error { return v.syncInodeData(n, true) }

// syncInodeData writes n if it is dirty; without times, only if its size
// needs writing (fdatasync leaves a times-only change for later).
func (v *Volume) syncInodeData(n *inode, times bool) error {
	if err := v.beginInternalOp(); err != nil {
		return err
	}
	err := func() error {
		n.mu.RLock()
		defer n.mu.RUnlock()
		n.dataMu.Lock()
		defer n.dataMu.Unlock()
		if n.freed {
			return nil
		}
		sizeOnly := false
		v.applyTouchLocked(n)
		if n.sizeAhead.Load() && v.pc.Dirty(iomap.Key(n.ino), int64(n.disksize.Load()), math.MaxInt64) == 0 {
			// No data waits beyond the on-disk size: the rest is holes
			// (a punched or zeroed tail), so i_size can go to disk.
			n.sizeAhead.Store(false)
			n.dirty, sizeOnly = true, true
		}
		if !n.dirty || !times && !sizeOnly {
			return nil
		}
		return v.writeInodeLocked(n)
	}()
	return v.endOpErr(err)
}

func (v *Volume) writeInode(ino uint32, in *layout.Inode) error {
	return v.writeInodeFresh(ino, in, false)
}

// writeNewInode writes the inode a create has just allocated. With a
// journal, an inode table block that would come from the device and
// holds no other inode in use (by the inode bitmap) is built from
// zeroes instead of read, as Linux's __ext4_get_inode_loc does for a
// new inode: the other slots are free, so their old bytes matter to
// nobody.
func (v *Volume) writeNewInode(ino uint32, in *layout.Inode) error {
	return v.writeInodeFresh(ino, in, true)
}

func (v *Volume) writeInodeFresh(ino uint32, in *layout.Inode, fresh bool) error {
	v.fcTrackInode(ino)
	g, idx := v.sb.InodeLocation(ino)
	isz := v.sb.InodeSizeBytes()
	byteOff := uint64(idx) * uint64(isz)
	blk := v.groups[g].InodeTable + byteOff/uint64(v.bs)
	off := int(byteOff % uint64(v.bs))
	in.Encode(isz)
	if v.csum {
		in.SetChecksum(v.csumSeed, ino)
	}
	mu := v.blkLocks.lock(blk)
	defer mu.Unlock()
	if v.jm != nil {
		var zero func() bool
		if fresh {
			zero = func() bool { return v.alloc.OnlyInodeInBlock(ino) }
		}
		if err := v.jm.updateOrZero(blk, zero, func(b []byte) { copy(b[off:off+isz], in.Raw) }); err != nil {
			return fmt.Errorf("ext4io: inode %d: %w", ino, err)
		}
		return nil
	}
	if m, ok := v.meta.(*cachedIO); ok && m.writeBack {
		if err := m.update(blk, func(b []byte) { copy(b[off:off+isz], in.Raw) }); err != nil {
			return fmt.Errorf("ext4io: inode %d: %w", ino, err)
		}
		return nil
	}
	b, err := v.meta.GetWrite(blk)
	if err != nil {
		return fmt.Errorf("ext4io: inode %d: %w", ino, err)
	}
	copy(b[off:off+isz], in.Raw)
	if err := v.meta.Dirty(blk, b); err != nil {
		return fmt.Errorf("ext4io: inode %d: %w", ino, err)
	}
	return nil
}

// treeIO is the extent.BlockIO of a writable volume: tree blocks go
// through v.meta like every other metadata block.
type treeIO struct{ v *Volume }

func (t treeIO) ReadBlock(pblk uint64, buf []byte) error {
	if r, ok := t.v.meta.(metaReaderInto); ok {
		return r.readInto(pblk, buf)
	}
	b, err := t.v.meta.Read(pblk)
	if err != nil {
		return err
	}
	copy(buf, b)
	return nil
}

// WriteBlock replaces the whole block, so it needs no GetWrite: Dirty
// copies buf (jmeta: into the block's pending copy).
func (t treeIO) WriteBlock(pblk uint64, buf []byte) error {
	return t.v.meta.Dirty(pblk, buf)
}

// treeAlloc is the extent.Allocator for one inode: it takes blocks from
// the volume's allocator and keeps the inode's i_blocks in step. It is
// used with the inode lock held exclusively.
type treeAlloc struct {
	v *Volume
	n *inode
}

func (a treeAlloc) sectors(blocks uint64) uint64 { return blocks * uint64(a.v.bs/512) }

// checkRelease fails when n blocks are more than i_blocks counts, before
// anything is freed: on a volume without a journal a free done before
// the failure would stay on disk.
func (a treeAlloc) checkRelease(n uint64) error {
	if a.n.in.Blocks(a.v.sb) < a.sectors(n) {
		return errs.Corruptf("inode", 0, -1, "inode %d: freeing %d blocks, more than i_blocks %d sectors counts", a.n.ino, n, a.n.in.Blocks(a.v.sb))
	}
	return nil
}

func (a treeAlloc) addBlocks(delta int64) error {
	cur := a.n.in.Blocks(a.v.sb)
	next := int64(cur) + delta*int64(a.v.bs/512)
	if next < 0 {
		return errs.Corruptf("inode", 0, -1, "inode %d: i_blocks would go negative", a.n.ino)
	}
	if !a.n.in.SetBlocks(a.v.sb, uint64(next)) {
		return fmt.Errorf("ext4io: inode %d: i_blocks %d does not fit without huge_file: %w", a.n.ino, next, ErrNoSpace)
	}
	a.n.blocksChanged = true
	return nil
}

func (a treeAlloc) AllocTreeBlock(goal uint64, mustSucceed bool) (uint64, error) {
	if a.n.convBatch {
		if start, ok := a.v.takeConvBlock(goal); ok {
			if err := a.addBlocks(1); err != nil {
				a.v.alloc.Free(start, 1)
				return 0, err
			}
			return start, nil
		}
	}
	var flags alloc.Flags
	if mustSucceed {
		flags |= alloc.MustSucceed
	}
	start, _, err := a.v.allocate(alloc.Request{Goal: goal, Min: 1, Max: 1, Flags: flags})
	if err != nil {
		return 0, err
	}
	if err := a.addBlocks(1); err != nil {
		a.v.alloc.Free(start, 1)
		return 0, err
	}
	return start, nil
}

func (a treeAlloc) FreeTreeBlock(pblk uint64) error {
	if err := a.checkRelease(1); err != nil {
		return err
	}
	if err := a.v.freeMapped(pblk, 1); err != nil {
		return err
	}
	a.v.forgetMeta(pblk)
	return a.addBlocks(-1)
}

func (a treeAlloc) FreeData(pblk, n uint64) error {
	if err := a.checkRelease(n); err != nil {
		return err
	}
	if err := a.v.freeMapped(pblk, n); err != nil {
		return err
	}
	if a.n.in.IsDir() {
		// Directory blocks are metadata: revoke them so that replaying
		// an older copy never overwrites whatever reuses them.
		for b := pblk; b < pblk+n; b++ {
			a.v.forgetMeta(b)
		}
	}
	return a.addBlocks(-int64(n))
}

var _ extent.Allocator = treeAlloc{}
