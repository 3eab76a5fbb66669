package ext4io

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ext4io/ext4io/extent"
	"github.com/ext4io/ext4io/internal/errs"
	"github.com/ext4io/ext4io/internal/stripe"
	"github.com/ext4io/ext4io/iomap"
	"github.com/ext4io/ext4io/layout"
)

// inode is the in-memory state of an inode shared by all its Files.
type inode struct {
	// mu is the inode lock (ext4's i_rwsem): reads and the write fast
	// paths (aligned in-EOF overwrites and writes into unwritten blocks)
	// share it; allocating, extending and size-changing operations take it
	// exclusively.
	mu inodeLock
	// dataMu (ext4's i_data_sem) serializes changes to in and the extent
	// tree made under a shared mu. Lock order: mu, then dataMu.
	dataMu dataLock
	ino    uint32
	in     *layout.Inode // decoded inode; changed in place (see mu, dataMu)
	// reg is in.IsReg() when the struct was made: the type bits of
	// i_mode never change, and lock-free checks read it rather than in
	// (a Chmod writes in.Mode under the inode lock).
	reg   bool
	m     *mapper
	inl   []byte
	dirty bool // in has changes (times) not yet written; guarded by dataMu
	// blocksChanged: i_blocks changed since in was last written (a tree
	// block allocated or freed). Guarded like in.
	blocksChanged bool

	// Delayed allocation (buffered writes through the page cache). Changed
	// like in: under mu held exclusively, or shared with dataMu. Atomic so
	// that the shared direct-write path reads the on-disk size under mu
	// shared alone (under a shared mu the size only grows).
	sizeAhead atomic.Bool   // in.Size (i_size) is past the on-disk size: extending buffered writes not yet written back
	disksize  atomic.Uint64 // the on-disk size while sizeAhead (ext4's i_disksize)
	delayed   uint64        // blocks reserved for this inode's Delayed ranges (i_reserved_data_blocks)
	bops      *bufOps       // buffered I/O ops; nil without a page cache or for non-extent files

	freed bool // the inode was freed: never write n again; set under mu exclusively

	// dotdot is the inode number a directory's ".." names: read when the
	// inode is loaded (loadDotDot), before it is cached, and stored again
	// by whatever writes ".." (initDirLocked, dotDotUpdate.write), under mu
	// held exclusively. Atomic so that a lookup, which holds the lock of
	// the directory it looks in but not this one's, can read it
	// (checkDirParent). 0 when the load found no valid ".." (or none yet:
	// a new directory): the first lookup that finds the directory then
	// stores the directory it was found in.
	dotdot atomic.Uint32

	// convBatch is set while a conversion batch changes the tree, whose
	// tree blocks then come from the conversion reservation; guarded by
	// the lock the batch holds (dataMu, mu exclusively, or txnGate
	// exclusively).
	convBatch bool

	inline inlineState // inline data not yet converted (inline.go)

	// touchEpoch is the Volume.touch epoch of the last direct write under
	// the shared lock, or buffered write, whose mtime and ctime are not in
	// in yet, 0 for none: the fast path stores it without dataMu, and
	// applyTouchLocked moves its time into in before in is read or written.
	// touchEndEpoch and touchEnd (guarded by Volume.touch.mu) are the end
	// time of an epoch the inode was stamped with (touchclock.go).
	touchEpoch    atomic.Uint64
	touchEndEpoch uint64
	touchEnd      int64 // Unix ns

	// mayCache: the page cache may hold pages of this file. Buffered
	// writes set it (under mu exclusively) before adding pages; a direct
	// write clears it (under mu) after dropping every page, so direct I/O
	// on a file without cached pages skips the cache's lock entirely.
	mayCache atomic.Bool

	// dataGen counts the changes of the file's data, each counted when it
	// is done; noReadahead is set once iomap ops were handed out, whose
	// writes dataGen does not see (readahead.go). readAhead is set (and
	// never cleared) before a File of the inode first reads ahead: until
	// then no window exists that a write could make stale, and WriteAt
	// leaves dataGen alone.
	dataGen     atomic.Uint64
	noReadahead atomic.Bool
	// atomicUnsynced is set by an atomic write and cleared by Sync and
	// Datasync: WriteAtomic journals only when it is clear
	// (atomicjournal.go).
	atomicUnsynced atomic.Bool
	// jclean is jcleanBusy from a journalled atomic write's commit to its
	// end, then jcleanDone if no data change came meanwhile; every data
	// change (dataChanged) sets it to 0. Datasync has nothing to do while
	// it is jcleanDone (atomicjournal.go).
	jclean    atomic.Uint32
	readAhead atomic.Bool

	// zeroing lists the block ranges whose unwritten blocks a direct write
	// is zeroing before converting them (Options.Tuning.ZeroOutChunk); a writer
	// into an overlapping range waits for done. Guarded like in.
	zeroing []zeroing

	// conv holds the conversions of completed shared-lock direct writes
	// that the extent tree has not taken yet (conv.go).
	conv convQueue

	// v is the volume whose inode cache holds n (inocache.go); cstate is
	// n's place in it (inoCached, inoDemoted, inoForgotten), changed under
	// v.inoMu; used is the cache's second-chance bit, set by lookups.
	v      *Volume
	cstate atomic.Int32
	used   atomic.Bool
}

// zeroing is one chunk conversion in progress: blocks [lo, hi); done is
// closed when it ends.
type zeroing struct {
	lo, hi uint64
	done   chan struct{}
}

// inodeLock is the inode lock. Once the file is opened with O_DIRECT,
// shared lockers on the I/O paths (RLockAt) take a reader stripe of fast
// instead of the RWMutex, so concurrent direct I/O from different CPUs
// does not move the lock's reader count between them on every call; Lock
// then takes the RWMutex and every stripe. Other shared lockers (RLock)
// keep using the RWMutex alone, which excludes Lock just as well.
type inodeLock struct {
	sync.RWMutex
	// fast is set once, under the RWMutex held exclusively (share), and
	// never cleared: 1 KiB per inode, spent only on files opened Direct.
	fast atomic.Pointer[stripe.RWMutex]
	// n is the inode whose lock this is: every locker puts n back into
	// the inode cache if the cache demoted it (inocache.go). Nil for the
	// zero inode of tests.
	n *inode
}

// Lock locks l for writing: the RWMutex, then the reader stripes.
func (l *inodeLock) Lock() {
	l.RWMutex.Lock()
	if f := l.fast.Load(); f != nil {
		f.Lock()
	}
	l.n.held()
}

// RLock locks l for reading (the RWMutex alone).
func (l *inodeLock) RLock() {
	l.RWMutex.RLock()
	l.n.held()
}

// tryLock locks l for writing if no one holds it, without waiting, and
// reports whether it did. It leaves n where the cache has it.
func (l *inodeLock) tryLock() bool {
	if !l.RWMutex.TryLock() {
		return false
	}
	if f := l.fast.Load(); f != nil && !f.TryLock() {
		l.RWMutex.Unlock()
		return false
	}
	return true
}

// dataLock is the inode's dataMu; like inodeLock, its lockers put a
// demoted inode back into the cache.
type dataLock struct {
	sync.Mutex
	n *inode
}

// Lock locks l.
func (l *dataLock) Lock() {
	l.Mutex.Lock()
	l.n.held()
}

// Unlock unlocks l for writing.
func (l *inodeLock) Unlock() {
	if f := l.fast.Load(); f != nil {
		f.Unlock()
	}
	l.RWMutex.Unlock()
}

// RLockAt locks l for reading on the stripe for hint (stripe.OfBuf of the
// I/O buffer) and returns the token for RUnlockAt.
func (l *inodeLock) RLockAt(hint int) int {
	if f := l.fast.Load(); f != nil {
		t := f.RLock(hint)
		l.n.held()
		return t
	}
	l.RWMutex.RLock()
	l.n.held()
	return -1
}

// RUnlockAt unlocks what RLockAt locked.
func (l *inodeLock) RUnlockAt(t int) {
	if t < 0 {
		l.RWMutex.RUnlock()
		return
	}
	l.fast.Load().RUnlock(t)
}

// share gives l its reader stripes, if it has none yet.
func (l *inodeLock) share() {
	if l.fast.Load() != nil {
		return
	}
	l.RWMutex.Lock()
	if l.fast.Load() == nil {
		l.fast.Store(new(stripe.RWMutex))
	}
	l.RWMutex.Unlock()
}

// diskSize returns the size the inode has on disk (i_disksize). The caller
// holds mu (in.Size changes only under mu held exclusively), or dataMu.
func (n *inode) diskSize() uint64 {
	if n.sizeAhead.Load() {
		return n.disksize.Load()
	}
	return n.in.Size
}

// diskBlocks returns the number of blocks the on-disk size reaches into:
// blocks at or past it must not become written (e2fsck rejects written
// blocks past i_size). The caller holds mu or dataMu, as for diskSize.
func (n *inode) diskBlocks(bs uint64) uint64 { return (n.diskSize() + bs - 1) / bs }

// applyTouchLocked moves the time of the last shared-lock direct write to
// n into its mtime and ctime. The ctime only moves forward: a change made
// after the write (a rename, a link, an xattr) may have set a later one
// before the write's time was applied. The caller holds n.mu exclusively,
// or shared with dataMu.
func (v *Volume) applyTouchLocked(n *inode) {
	if at, ok := v.touch.take(n); ok {
		ts := layout.TimestampOf(at)
		n.in.Mtime = ts
		if c := n.in.Ctime; ts.Sec > c.Sec || ts.Sec == c.Sec && ts.Nsec > c.Nsec {
			n.in.Ctime = ts
		}
		n.dirty = true
	}
}

// coverLocked moves the on-disk size up to end (at most i_size) when
// written blocks now reach end: e2fsck rejects written blocks past the
// on-disk size. The caller holds mu exclusively, or shared with dataMu.
func (n *inode) coverLocked(end uint64) {
	if n.sizeAhead.Load() && end > n.disksize.Load() {
		d := min(end, n.in.Size)
		n.disksize.Store(d)
		n.sizeAhead.Store(d < n.in.Size)
	}
}

// wroteLocked records written blocks up to end: i_size grows to cover
// them, or, inside i_size, the on-disk size does. The caller holds mu
// exclusively.
func (n *inode) wroteLocked(end uint64) {
	if end > n.in.Size {
		n.setSizeLocked(end)
	} else {
		n.coverLocked(end)
	}
}

// setSizeLocked sets i_size and the on-disk size together (truncate,
// fallocate, direct writes). The caller holds mu exclusively.
func (n *inode) setSizeLocked(size uint64) {
	n.in.Size = size
	n.sizeAhead.Store(false)
}

// checkLinked rejects a directory entry's inode that is not in use (no
// links) or has no valid file type, as ext4_lookup reports "deleted inode
// referenced".
func checkLinked(ino uint32, in *layout.Inode) error {
	if in.LinksCount == 0 {
		return &errs.CorruptError{What: "inode", Ino: ino, Off: -1, Msg: "unused inode referenced (links count 0)"}
	}
	switch in.Mode & layout.ModeFmt {
	case layout.ModeReg, layout.ModeDir, layout.ModeLnk, layout.ModeChr, layout.ModeBlk, layout.ModeFIFO, layout.ModeSock:
		return nil
	}
	return &errs.CorruptError{What: "inode", Ino: ino, Off: -1, Msg: fmt.Sprintf("invalid file type in mode %#o", in.Mode)}
}

// checkSize rejects an inode whose 64-bit i_size has its top bit set (a
// negative loff_t), as ext4_iget does ("bad i_size value").
func checkSize(ino uint32, in *layout.Inode) error {
	if int64(in.Size) < 0 {
		return &errs.CorruptError{What: "inode", Ino: ino, Off: -1, Msg: fmt.Sprintf("negative size %#x", in.Size)}
	}
	return nil
}

// freeInodeError is getInode's error for an inode that is not in use on
// disk (links count 0) and not cached: a lookup that raced the removal of
// the inode's last name, or a stale inode number (OpenIno). It matches
// ErrNotFound (fs.ErrNotExist), as ext4_iget's ESTALE for such an inode.
type freeInodeError struct{ ino uint32 }

func (e *freeInodeError) Error() string {
	return fmt.Sprintf("ext4io: inode %d is not in use (links count 0)", e.ino)
}

func (e *freeInodeError) Unwrap() error { return ErrNotFound }

// getInode returns the shared state of inode ino, reading it on first use.
// Inodes stay cached while in use, up to Options.InodeCache beyond
// (inocache.go), until evictLocked frees them. An inode read from disk
// with no links is not cached: outside
// orphan processing (getOrphanInode) it is free, or being freed, and
// caching it would keep a freed number live in v.inodes (allocInode then
// fails with "marked free but in use"); getInode fails with a
// *freeInodeError instead. Reserved inodes (below the superblock's first
// inode) are exempt: they are not freed and may have no links (the bad
// blocks inode).
func (v *Volume) getInode(ino uint32) (*inode, error) {
	return v.loadInode(ino, false)
}

// getOrphanInode is getInode for orphan processing: the orphan list
// walks (processOrphans, orphanDelLocked's s_last_orphan chain),
// freeOrphan and fast-commit replay, which read inodes whose links count
// is 0 on purpose, to free them.
func (v *Volume) getOrphanInode(ino uint32) (*inode, error) {
	return v.loadInode(ino, true)
}

// loadInode is getInode; orphan says links count 0 is expected.
//
// A read races evictLocked of the same inode: it may read the inode before
// the eviction wrote its links count 0 and insert it after forgetInode
// dropped the cached copy, caching a stale, linked copy of a freed inode.
// It races a demotion the same way: the demoted copy may change after the
// read and then be collected. forgetInode and demote bump ino's counter in
// v.inoForgets under inoMu, so a read that overlapped a forget or a
// demotion of ino (or of a number sharing its counter) is done again
// instead of inserted; the new read sees links 0, or the inode as the
// demoted copy last wrote it.
func (v *Volume) loadInode(ino uint32, orphan bool) (*inode, error) {
	for {
		v.inoMu.Lock()
		n := v.cachedLocked(ino)
		seq := v.inoForgets[ino%uint32(len(v.inoForgets))]
		v.inoMu.Unlock()
		if n != nil {
			return n, nil
		}
		n, err := v.readNewInode(ino, orphan)
		if err != nil {
			return nil, err
		}
		if v.inodeReadHook != nil {
			v.inodeReadHook(ino)
		}
		v.inoMu.Lock()
		if old := v.cachedLocked(ino); old != nil {
			v.inoMu.Unlock()
			return old, nil
		}
		if v.inoForgets[ino%uint32(len(v.inoForgets))] != seq {
			v.inoMu.Unlock()
			continue // an inode was forgotten or demoted meanwhile: perhaps this one
		}
		n.v = v
		v.inodes[ino] = n
		over := len(v.inodes) > v.inoHigh && len(v.inodes) >= v.inoShrinkAt
		v.inoMu.Unlock()
		if over {
			v.shrinkInodes()
		}
		return n, nil
	}
}

// readNewInode reads inode ino into a new inode struct for loadInode.
func (v *Volume) readNewInode(ino uint32, orphan bool) (*inode, error) {
	in, err := v.readInode(ino)
	if err != nil {
		return nil, err
	}
	if in.LinksCount == 0 && !orphan && ino >= v.sb.FirstInode() {
		return nil, &freeInodeError{ino: ino}
	}
	if err := checkSize(ino, in); err != nil {
		return nil, err
	}
	n := &inode{ino: ino, in: in, reg: in.IsReg()}
	n.mu.n, n.dataMu.n = n, n
	switch {
	case in.Flags&layout.InodeFlagInlineData != 0:
		n.inl, err = v.inlineData(ino, in)
		n.initInline()
	case in.IsSymlink() && isFastSymlink(v.sb, in):
		n.inl = append([]byte(nil), in.Block[:min(int(in.Size), layout.InodeBlockSize)]...)
	case isSpecial(in):
		// Devices, fifos and sockets map no blocks: i_block holds a
		// device number (mknod.go) or nothing.
	default:
		n.m, err = v.newMapper(n)
		if err == nil && in.IsDir() {
			err = v.checkDirSize(n)
		}
		if err == nil && v.pc != nil && n.m.tree != nil && in.IsReg() {
			n.bops = newBufOps(v, n)
			n.mayCache.Store(true) // pages may outlive an earlier inode struct
		}
	}
	if err != nil {
		return nil, err
	}
	if in.IsDir() {
		v.loadDotDot(n)
	}
	return n, nil
}

// loadDotDot reads the ".." entry of directory n, not yet cached, into
// n.dotdot. It leaves 0 when n has no valid ".." or it cannot be read (a
// new directory has no block until initDirLocked stores its parent); the
// error is not n's load's: the directory is read as it is, and the
// operations that need its ".." (rename's ancestry walk) read it again.
func (v *Volume) loadDotDot(n *inode) {
	if n.m == nil && n.inl == nil {
		return
	}
	f := &File{v: v, n: n, ino: n.ino, name: "..", in: n.in, m: n.m, inl: n.inl}
	if e, err := f.lookupName(".."); err == nil {
		n.dotdot.Store(e.Inode)
	}
}

// isFastSymlink reports a symlink whose target sits in i_block, as
// ext4_inode_is_fast_symlink decides it.
func isFastSymlink(sb *layout.Superblock, in *layout.Inode) bool {
	if in.Flags&layout.InodeFlagEAInode != 0 {
		return false
	}
	blocks := in.Blocks(sb)
	if in.FileACL != 0 {
		blocks -= uint64(sb.BlockSize() / 512)
	}
	return blocks == 0 && in.Size < layout.InodeBlockSize
}

// discardInode frees an inode that was written but never linked.
func (v *Volume) discardInode(ino uint32, in *layout.Inode, dir bool) {
	in.LinksCount, in.Dtime = 0, uint32(time.Now().Unix())
	v.writeInode(ino, in)
	v.alloc.FreeInode(ino, dir)
}

// dropInode frees an unlinked inode and everything it maps.
func (v *Volume) dropInode(n *inode) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return v.evictLocked(n)
}

// evictLocked frees inode n (lock held; no names left): its blocks, then
// the inode, as ext4_evict_inode does, and forgets its cached state.
func (v *Volume) evictLocked(n *inode) error {
	n.conv.dropFrom(0) // the blocks go with the inode
	n.conv.bits.clear(0, maxFileBlocks)
	var err error
	if n.m != nil && n.m.tree != nil {
		if n.in.IsDir() && (v.jm != nil || v.mcache != nil) {
			// Directory blocks are metadata: revoke them so that the
			// journal never writes an old copy over their next user.
			err = n.m.tree.Walk(func(e extent.Extent) error {
				for i := uint64(0); i < uint64(e.Len); i++ {
					v.forgetMeta(e.Pblk + i)
				}
				return nil
			})
		}
		if err == nil {
			err = n.m.tree.Remove(0, extent.EndLblk-1)
		}
	}
	v.alloc.ReleasePrealloc(n.ino)
	if err != nil {
		return fmt.Errorf("ext4io: freeing blocks of inode %d: %w", n.ino, err)
	}
	if err := v.releaseXattrBlockLocked(n); err != nil {
		return fmt.Errorf("ext4io: freeing xattr block of inode %d: %w", n.ino, err)
	}
	dir := n.in.IsDir()
	n.in.LinksCount = 0
	n.setSizeLocked(0)
	n.in.Dtime = uint32(time.Now().Unix())
	if err := v.writeInodeLocked(n); err != nil {
		return err
	}
	// Stale references to n (a write-back or an inode sync that looked it
	// up before this) must never write it over the slot's next user.
	n.freed = true
	v.forgetInode(n.ino)
	return v.alloc.FreeInode(n.ino, dir)
}

// forgetInode drops the cached state of inode ino.
// Its cached pages are dropped and the reservations of its Delayed blocks
// released. The caller holds the inode's lock exclusively, if it is cached.
func (v *Volume) forgetInode(ino uint32) {
	v.inoMu.Lock()
	n := v.cachedLocked(ino)
	delete(v.inodes, ino)
	if n != nil {
		n.cstate.Store(inoForgotten)
	}
	v.inoForgets[ino%uint32(len(v.inoForgets))]++
	v.inoMu.Unlock()
	if v.pc != nil {
		v.pc.Forget(iomap.Key(ino))
	}
	if n != nil && n.m != nil {
		n.m.discardRun()
	}
	v.cache.Forget(ino)
	if n != nil && n.delayed > 0 {
		v.alloc.Unreserve(n.delayed)
		n.delayed = 0
	}
}

// cachedInode returns the cached state of ino, or nil.
func (v *Volume) cachedInode(ino uint32) *inode {
	v.inoMu.Lock()
	defer v.inoMu.Unlock()
	return v.cachedLocked(ino)
}

// readInode reads and validates inode ino.
func (v *Volume) readInode(ino uint32) (*layout.Inode, error) {
	if ino == 0 || ino > v.sb.InodesCount {
		return nil, &errs.CorruptError{What: "inode number", Ino: ino, Off: -1,
			Msg: fmt.Sprintf("inode %d outside 1..%d", ino, v.sb.InodesCount)}
	}
	g, idx := v.sb.InodeLocation(ino)
	gd := v.groups[g]
	isz := v.sb.InodeSizeBytes()
	byteOff := uint64(idx) * uint64(isz)
	blk := gd.InodeTable + byteOff/uint64(v.bs)
	off := int(byteOff % uint64(v.bs))
	buf := getBlockBuf(v.bs)
	defer putBlockBuf(buf)
	if err := v.readBlockAt(blk, off, buf[:isz]); err != nil {
		return nil, fmt.Errorf("ext4io: reading inode %d: %w", ino, err)
	}
	in, err := layout.DecodeInode(buf[:isz], isz)
	if err != nil {
		if ce, ok := err.(*errs.CorruptError); ok {
			ce.Ino, ce.Block, ce.Off = ino, blk, off
		}
		return nil, err
	}
	if v.csum && !v.opts.SkipChecksums {
		if err := in.VerifyChecksum(v.csumSeed, ino, blk, off); err != nil {
			return nil, err
		}
	}
	return in, nil
}

// inlineData returns the bytes of an inline-data inode: i_block, then the
// "system.data" extended attribute in the inode's extra space.
func (v *Volume) inlineData(ino uint32, in *layout.Inode) ([]byte, error) {
	data := append([]byte(nil), in.Block[:]...)
	if in.Size <= uint64(len(data)) {
		return data[:in.Size], nil
	}
	extra, err := inodeXattr(in, layout.XattrIndexSystem, "data")
	if err != nil {
		if ce, ok := err.(*errs.CorruptError); ok {
			ce.Ino = ino
		}
		return nil, err
	}
	data = append(data, extra...)
	if uint64(len(data)) < in.Size && in.IsReg() {
		// A regular file's bytes past the stored ones read as zeroes, as
		// on Linux (ext4_readpage_inline): mkfs.ext4 -d stores a file
		// that is all hole so. File.readAt supplies them; writes to such
		// a file convert it first (changeInline).
		return data, nil
	}
	if uint64(len(data)) < in.Size {
		return nil, &errs.CorruptError{What: "inline data", Ino: ino, Off: -1,
			Msg: fmt.Sprintf("size %d but only %d bytes stored inline", in.Size, len(data))}
	}
	return data[:in.Size], nil
}

// inodeXattr finds an extended attribute stored in the inode body after
// i_extra_isize (struct ext4_xattr_ibody_header + ext4_xattr_entry list).
func inodeXattr(in *layout.Inode, index uint8, name string) ([]byte, error) {
	attrs, err := layout.DecodeXattrIbody(layout.XattrIbodyRegion(in))
	if err != nil {
		return nil, err
	}
	for _, x := range attrs {
		if x.Index == index && x.Name == name {
			if x.ValueInum != 0 {
				return nil, &errs.CorruptError{What: "in-inode xattr", Off: -1, Msg: "value in an EA inode is not supported for inline data"}
			}
			return x.Value, nil
		}
	}
	return nil, nil
}
