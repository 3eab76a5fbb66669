package ext4io

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ext4io/ext4io/internal/errs"
	"github.com/ext4io/ext4io/layout"
)

// Orphans: inodes whose last name was removed while a File still had them
// open. They stay allocated until the last File closes, and are recorded
// on disk so that opening the volume after a crash frees them, as Linux's
// ext4_orphan_cleanup does.
//
// Two on-disk forms, as in Linux:
//
//	orphan_file (compat 0x1000): inode s_orphan_file_inum, its blocks
//	  slots of inode numbers (layout.OrphanSlot, 0 = free) and a tail
//	  with magic and checksum (layout.VerifyOrphanBlock); ro_compat
//	  orphan_present set while any slot is used.
//	s_last_orphan chain (without orphan_file, or when it is full): the
//	  superblock names the first orphan and each orphan's i_dtime the next.
//
// Invariants: O1 an inode is on the list iff its links reached 0 while
// open (or it is being truncated by recovery); O2 orphan_present is set
// iff an orphan file slot is used.

// nsState is the namespace state of one Volume (Volume.nss): open Files by
// inode and in-memory orphans. Its fields are guarded by mu; omu serializes
// changes to the on-disk orphan list.
//
// It lives in the Volume, not in a package-level table: the open Files it
// holds point back at the Volume, so a global table would keep every Volume
// (its device, caches and journal) reachable forever.
type nsState struct {
	mu struct {
		sync.Mutex
		open    map[uint32][]*File  // Files handed out by Open/Create
		tracked int                 // len of all open slices, for pruning
		orphans map[uint32]struct{} // unlinked while open, not yet freed
	}
	omu  sync.Mutex // on-disk orphan list changes
	reap sync.Mutex // one reaper at a time
	// deferred is set when an unlink left an inode with no links on the
	// orphan list because freeing it takes steps (releaseLinkLocked); the
	// operation's v.op frees it once the operation has ended.
	deferred atomic.Bool
}

func (s *nsState) init() {
	s.mu.open = make(map[uint32][]*File)
	s.mu.orphans = make(map[uint32]struct{})
}

func (v *Volume) ns() *nsState { return &v.nss }

func fileClosed(f *File) bool { return f.closed.Load() }

// trackFile records a File handed to the user, so that unlinking its inode
// defers freeing it.
func (v *Volume) trackFile(f *File) {
	if v.alloc == nil || f.in.IsDir() {
		return
	}
	s := v.ns()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.open[f.ino] = append(pruneClosed(s.mu.open[f.ino]), f)
	s.mu.tracked++
	if s.mu.tracked > 1024 && s.mu.tracked > 2*len(s.mu.open) {
		s.mu.tracked = 0
		for ino, fs := range s.mu.open {
			fs = pruneClosed(fs)
			if len(fs) == 0 {
				delete(s.mu.open, ino)
			} else {
				s.mu.open[ino] = fs
				s.mu.tracked += len(fs)
			}
		}
	}
}

// untrackFile drops the closed Files of f's inode, f among them, from the
// open Files: a closed File kept there would keep its inode in memory
// (inocache.go).
func (v *Volume) untrackFile(f *File) {
	if v.alloc == nil || f.in.IsDir() {
		return
	}
	s := v.ns()
	s.mu.Lock()
	defer s.mu.Unlock()
	fs, ok := s.mu.open[f.ino]
	if !ok {
		return
	}
	n := len(fs)
	if fs = pruneClosed(fs); len(fs) == 0 {
		delete(s.mu.open, f.ino)
	} else {
		s.mu.open[f.ino] = fs
	}
	s.mu.tracked -= n - len(fs)
}

func pruneClosed(fs []*File) []*File {
	out := fs[:0]
	for _, f := range fs {
		if !fileClosed(f) {
			out = append(out, f)
		}
	}
	clear(fs[len(out):])
	return out
}

// inodeInUse reports whether a File of ino is still open. s.mu is a leaf
// lock: callers may hold inode locks. Unlink and rename call it with the
// inode's lock held exclusively until they free it, so that an open
// racing them either is counted here or finds the inode freed
// (trackOpen); the orphan reaper calls it without, which OpenIno allows
// for (trackUnlessReaped).
func (v *Volume) inodeInUse(ino uint32) bool {
	s := v.ns()
	s.mu.Lock()
	defer s.mu.Unlock()
	fs := pruneClosed(s.mu.open[ino])
	if len(fs) == 0 {
		delete(s.mu.open, ino)
		return false
	}
	s.mu.open[ino] = fs
	return true
}

// orphanAddLocked puts n (locked, links 0) on the orphan list.
func (v *Volume) orphanAddLocked(n *inode) error {
	s := v.ns()
	s.omu.Lock()
	err := v.orphanDiskAddLocked(n)
	s.omu.Unlock()
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.mu.orphans[n.ino] = struct{}{}
	s.mu.Unlock()
	return nil
}

func (v *Volume) orphanDiskAddLocked(n *inode) error {
	if v.sb.HasCompat(layout.CompatOrphanFile) && v.sb.OrphanFileInum != 0 {
		ok, err := v.orphanFileSet(0, n.ino)
		if err != nil || ok {
			if err == nil {
				err = v.writeInodeLocked(n)
			}
			if err == nil {
				err = v.setOrphanPresent(true)
			}
			return err
		}
		// Full: fall back to the list, as Linux does.
	}
	v.sbMu.Lock()
	defer v.sbMu.Unlock()
	n.in.Dtime = v.sb.LastOrphan
	if err := v.writeInodeLocked(n); err != nil {
		return err
	}
	v.sb.LastOrphan = n.ino
	return v.writeSuperLocked()
}

// orphanFileSet replaces the first orphan file slot holding old with new
// (old 0: take a free slot). It reports whether a slot was found.
func (v *Volume) orphanFileSet(old, new uint32) (bool, error) {
	// Unlinks of different files share the orphan file's blocks: serialize
	// the read-modify-write of its slots.
	v.orphanMu.Lock()
	defer v.orphanMu.Unlock()
	found := false
	err := v.orphanFileBlocks(func(pblk uint64, b []byte) (bool, error) {
		for i := range layout.OrphanSlots(len(b)) {
			if layout.OrphanSlot(b, i) != old {
				continue
			}
			w, err := v.meta.GetWrite(pblk)
			if err != nil {
				return true, err
			}
			layout.SetOrphanSlot(w, i, new)
			v.orphanBlockCsum(pblk, w)
			found = true
			return true, v.meta.Dirty(pblk, w)
		}
		return false, nil
	})
	return found, err
}

// The orphan file sizes Linux mounts: at most 8 MiB (the first limit) or
// EXT4_MAX_ORPHAN_FILE_BLOCKS blocks (the current one).
const (
	orphanFileMaxBytes  = 8 << 20
	orphanFileMaxBlocks = 512
)

// orphanFileBlocks calls fn with each block of the orphan file (verified)
// until fn returns stop.
func (v *Volume) orphanFileBlocks(fn func(pblk uint64, b []byte) (stop bool, err error)) error {
	of, err := v.getInode(v.sb.OrphanFileInum)
	var fe *freeInodeError
	if errors.As(err, &fe) {
		// The superblock names it: no links is corruption, not a stale number.
		return &errs.CorruptError{What: "orphan file", Ino: v.sb.OrphanFileInum, Off: -1, Msg: "inode has no links"}
	}
	if err != nil {
		return fmt.Errorf("ext4io: orphan file: %w", err)
	}
	if of.m == nil {
		return &errs.CorruptError{What: "orphan file", Ino: of.ino, Off: -1, Msg: "not block-mapped"}
	}
	// Linux's ext4_init_orphan_info refuses to mount with an orphan file
	// larger than 8 MiB (older kernels) or 512 blocks (newer ones); the
	// larger of the two keeps every orphan file either accepts, and bounds
	// this walk, which every orphan add, delete and list takes.
	if limit := max(orphanFileMaxBytes, orphanFileMaxBlocks*uint64(v.bs)); of.in.Size > limit {
		return &errs.CorruptError{What: "orphan file", Ino: of.ino, Off: -1,
			Msg: fmt.Sprintf("size %d exceeds the limit of %d bytes", of.in.Size, limit)}
	}
	nblk := of.in.Size / uint64(v.bs)
	for lblk := uint64(0); lblk < nblk; lblk++ {
		m, err := of.m.lookup(lblk)
		if err != nil {
			return err
		}
		if m.kind != mapWritten {
			return &errs.CorruptError{What: "orphan file", Ino: of.ino, Off: -1, Msg: fmt.Sprintf("block %d not mapped", lblk)}
		}
		b, err := v.meta.Read(m.pblk)
		if err != nil {
			return err
		}
		seed := layout.InodeSeed(v.csumSeed, of.ino, of.in.Generation)
		if err := layout.VerifyOrphanBlock(seed, b, m.pblk, of.ino, v.csum && !v.opts.SkipChecksums); err != nil {
			return err
		}
		if stop, err := fn(m.pblk, b); stop || err != nil {
			return err
		}
	}
	return nil
}

func (v *Volume) orphanBlockCsum(pblk uint64, b []byte) {
	if !v.csum {
		return
	}
	of, err := v.getInode(v.sb.OrphanFileInum)
	if err != nil {
		return
	}
	layout.SetOrphanBlockChecksum(layout.InodeSeed(v.csumSeed, of.ino, of.in.Generation), pblk, b)
}

// setOrphanPresent sets or clears ro_compat orphan_present.
func (v *Volume) setOrphanPresent(on bool) error {
	v.sbMu.Lock()
	defer v.sbMu.Unlock()
	if v.orphanPresent.Swap(on) == on {
		return nil
	}
	return v.writeSuperLocked()
}

// orphanFileEmpty reports whether no orphan file slot is used.
func (v *Volume) orphanFileEmpty() (bool, error) {
	empty := true
	err := v.orphanFileBlocks(func(_ uint64, b []byte) (bool, error) {
		for i := range layout.OrphanSlots(len(b)) {
			if layout.OrphanSlot(b, i) != 0 {
				empty = false
				return true, nil
			}
		}
		return false, nil
	})
	return empty, err
}

// orphanDelLocked takes n (locked) off the on-disk orphan list.
func (v *Volume) orphanDelLocked(n *inode) error {
	s := v.ns()
	s.omu.Lock()
	defer s.omu.Unlock()
	if v.sb.HasCompat(layout.CompatOrphanFile) && v.sb.OrphanFileInum != 0 {
		ok, err := v.orphanFileSet(n.ino, 0)
		if err != nil {
			return err
		}
		if ok {
			empty, err := v.orphanFileEmpty()
			if err == nil && empty {
				err = v.setOrphanPresent(false)
			}
			return err
		}
	}
	// The s_last_orphan chain.
	v.sbMu.Lock()
	head := v.sb.LastOrphan
	if head == n.ino {
		v.sb.LastOrphan = n.in.Dtime
		err := v.writeSuperLocked()
		v.sbMu.Unlock()
		return err
	}
	v.sbMu.Unlock()
	for hops, cur := 0, head; cur != 0; hops++ {
		if hops > int(v.sb.InodesCount) || cur > v.sb.InodesCount {
			return errs.Corruptf("orphan list", 0, -1, "s_last_orphan chain does not end (at inode %d)", cur)
		}
		p, err := v.getOrphanInode(cur)
		if err != nil {
			return err
		}
		if p == n {
			break
		}
		p.mu.Lock()
		next := p.in.Dtime
		if next == n.ino {
			p.in.Dtime = n.in.Dtime
			err = v.writeInodeLocked(p)
			p.mu.Unlock()
			return err
		}
		p.mu.Unlock()
		cur = next
	}
	return nil // not on the list
}

// releaseOrphans frees the in-memory orphans whose Files are all closed;
// with all set (the volume is closing) it frees every one of them.
// File.Close and Volume.Close should call it; namespace operations call
// it too, so orphans go once their Files are closed.
func (v *Volume) releaseOrphans(all bool) error {
	if v.alloc == nil {
		return nil
	}
	s := v.ns()
	s.mu.Lock()
	if len(s.mu.orphans) == 0 {
		s.mu.Unlock()
		return nil
	}
	var inos []uint32
	for ino := range s.mu.orphans {
		inos = append(inos, ino)
	}
	s.mu.Unlock()
	s.reap.Lock()
	defer s.reap.Unlock()
	var first error
	for _, ino := range inos {
		if !all && v.inodeInUse(ino) {
			continue
		}
		if big, err := v.orphanNeedsSteps(ino); err != nil || big {
			// Inside an operation, which cannot commit between steps: left
			// for orphanSteps (v.op, File.Close, Volume.Close).
			if err != nil && first == nil {
				first = err
			}
			continue
		}
		s.mu.Lock()
		_, still := s.mu.orphans[ino]
		delete(s.mu.orphans, ino)
		s.mu.Unlock()
		if !still {
			continue
		}
		if err := v.freeOrphan(ino); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// freeOrphan takes ino off the orphan list and frees it if it has no
// links left, or truncates the blocks past its size (an orphan of an
// interrupted truncate).
func (v *Volume) freeOrphan(ino uint32) error {
	n, err := v.getOrphanInode(ino)
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := v.orphanDelLocked(n); err != nil {
		return err
	}
	if n.in.LinksCount == 0 {
		return v.evictLocked(n)
	}
	n.in.Dtime = 0
	if n.m != nil && n.m.tree != nil && n.in.IsReg() {
		bs := uint64(v.bs)
		if first := (n.in.Size + bs - 1) / bs; first < maxFileBlocks {
			if err := n.m.tree.Remove(uint32(first), maxFileBlocks-1); err != nil {
				return err
			}
			v.cache.Forget(ino)
		}
	}
	return v.writeInodeLocked(n)
}

// processOrphans finishes what a crash interrupted, as ext4_orphan_cleanup
// does when a volume is mounted read-write: every inode on the orphan file
// or the s_last_orphan chain is freed (no links left) or truncated to its
// size, and the list is emptied. Volume.openWritable should call it once
// the allocator is up, outside any operation: each orphan is freed in an
// operation of its own, as Linux evicts each in its own handle, so that a
// long list never needs a transaction larger than the log; the list keeps
// the rest until their turn.
func (v *Volume) processOrphans() error {
	inos, err := v.orphanList()
	if err != nil {
		return err
	}
	for _, ino := range inos {
		if err := v.beginInternalOp(); err != nil {
			return err
		}
		if err := v.endOpErr(v.freeOrphan(ino)); err != nil {
			return fmt.Errorf("ext4io: processing orphan inode %d: %w", ino, err)
		}
	}
	if err := v.beginInternalOp(); err != nil {
		return err
	}
	return v.endOpErr(v.clearOrphanList())
}

// clearOrphanList empties the on-disk orphan list once processOrphans
// freed every inode on it: s_last_orphan 0, orphan_present clear.
func (v *Volume) clearOrphanList() error {
	var err error
	v.sbMu.Lock()
	changed := v.sb.LastOrphan != 0
	v.sb.LastOrphan = 0
	if changed {
		err = v.writeSuperLocked()
	}
	v.sbMu.Unlock()
	if err != nil {
		return err
	}
	if v.sb.HasCompat(layout.CompatOrphanFile) && v.sb.OrphanFileInum != 0 {
		return v.setOrphanPresent(false)
	}
	return nil
}

// orphanList returns the inodes on the on-disk orphan list (the orphan
// file and the s_last_orphan chain), each checked by checkOrphan. An inode
// listed twice (two slots, a chain that loops or meets a slot's inode) is
// corruption: freeing it once would leave it listed, freed.
func (v *Volume) orphanList() ([]uint32, error) {
	var inos []uint32
	seen := map[uint32]bool{}
	if v.sb.HasCompat(layout.CompatOrphanFile) && v.sb.OrphanFileInum != 0 {
		err := v.orphanFileBlocks(func(_ uint64, b []byte) (bool, error) {
			for i := range layout.OrphanSlots(len(b)) {
				ino := layout.OrphanSlot(b, i)
				if ino == 0 {
					continue
				}
				if seen[ino] {
					return false, errs.Corruptf("orphan file", 0, -1, "inode %d is in two slots", ino)
				}
				seen[ino] = true
				inos = append(inos, ino)
			}
			return false, nil
		})
		if err != nil {
			return nil, err
		}
	}
	for cur, hops := v.sb.LastOrphan, 0; cur != 0; hops++ {
		if cur < v.sb.FirstInode() || cur > v.sb.InodesCount || hops > int(v.sb.InodesCount) {
			return nil, errs.Corruptf("orphan list", 0, -1, "s_last_orphan chain reaches inode %d", cur)
		}
		if seen[cur] {
			return nil, errs.Corruptf("orphan list", 0, -1, "s_last_orphan chain meets inode %d twice", cur)
		}
		seen[cur] = true
		inos = append(inos, cur)
		in, err := v.readInode(cur)
		if err != nil {
			return nil, err
		}
		cur = in.Dtime
	}
	for _, ino := range inos {
		if err := v.checkOrphan(ino); err != nil {
			return nil, err
		}
	}
	return inos, nil
}

// checkOrphan fails with ErrCorrupt unless inode ino may be on the
// on-disk orphan list, as Linux's ext4_orphan_get decides ("bad orphan
// inode"): a number in range and not a special inode (the journal, the
// orphan file, a quota file, an xattr value inode), marked in use in the
// inode bitmap (a free inode's stale block map may name blocks other
// files own now), and, when it still has links (an interrupted truncate),
// a regular file, directory or symlink. orphanList checks every orphan
// before processOrphans changes anything.
func (v *Volume) checkOrphan(ino uint32) error {
	bad := func(why string) error {
		return &errs.CorruptError{What: "orphan list", Ino: ino, Off: -1, Msg: "bad orphan inode: " + why}
	}
	if ino < v.sb.FirstInode() || ino > v.sb.InodesCount {
		return bad("out of range")
	}
	if v.specialIno(ino) {
		return bad("a special inode")
	}
	if v.alloc != nil {
		used, err := v.alloc.InodeInUse(ino)
		if err != nil {
			return err
		}
		if !used {
			return bad("free in the inode bitmap")
		}
	}
	in, err := v.readInode(ino)
	if err != nil {
		return err
	}
	if in.Flags&layout.InodeFlagEAInode != 0 {
		return bad("an xattr value inode")
	}
	if in.LinksCount > 0 && !in.IsReg() && !in.IsDir() && !in.IsSymlink() {
		return bad(fmt.Sprintf("mode %#o with %d links cannot be truncated", in.Mode, in.LinksCount))
	}
	return nil
}

// orphanFirstLocked returns the first block freeOrphan frees of orphan
// n (locked): all of a file or directory without links, those past its
// size of a regular file with links; maxFileBlocks when it frees none by
// removing a tree range.
func (v *Volume) orphanFirstLocked(n *inode) uint64 {
	if n.m == nil || n.m.tree == nil || !n.in.IsReg() && !n.in.IsDir() {
		return maxFileBlocks // others go in one operation
	}
	if n.in.LinksCount == 0 {
		return 0
	}
	if n.in.IsDir() {
		return maxFileBlocks
	}
	bs := uint64(v.bs)
	return (n.in.Size + bs - 1) / bs
}

// orphanNeedsSteps reports whether freeing orphan ino in one operation
// would change more metadata than one step may (treeCutsLocked).
func (v *Volume) orphanNeedsSteps(ino uint32) (bool, error) {
	n, err := v.orphanInode(ino, true)
	if n == nil || err != nil {
		return false, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	cuts, err := v.treeCutsLocked(n, v.orphanFirstLocked(n), maxFileBlocks)
	return len(cuts) > 0, err
}

// orphanSteps frees, in steps of their own operations (as truncateSteps
// does), what freeing orphan ino frees, but for what one operation
// (freeOrphan) can take: the blocks of a file, or of a directory removed
// by Rmdir (its blocks are metadata, a revoke each: treeCutsLocked). The
// orphan stays on the list meanwhile: a crash between steps leaves it for
// the next open to finish. The caller is outside any operation. With
// inMemory, each step first checks that ino is still an in-memory orphan:
// releaseOrphans takes it off before freeing it, after which its number
// may be reused. Every step checks, under the inode lock, that its inode
// was not freed meanwhile (evictLocked marks it freed): the number may be
// an in-memory orphan again, of a new file whose inode is not n.
func (v *Volume) orphanSteps(ino uint32, inMemory bool) error {
	n, err := v.orphanInode(ino, inMemory)
	if n == nil || err != nil {
		return err
	}
	var cuts []uint32
	step := func(fn func() error) error {
		if err := v.beginInternalOp(); err != nil {
			return err
		}
		n.mu.Lock()
		err := fn()
		n.mu.Unlock()
		return v.endOpErr(err)
	}
	if err := step(func() (err error) {
		if n.freed || inMemory && !v.isOrphan(ino) {
			return nil
		}
		cuts, err = v.treeCutsLocked(n, v.orphanFirstLocked(n), maxFileBlocks)
		return err
	}); err != nil {
		return err
	}
	for _, c := range cuts {
		if v.stepHook != nil {
			v.stepHook(false)
		}
		if err := step(func() error {
			if n.freed || inMemory && !v.isOrphan(ino) {
				// n was evicted: ino, an orphan again, may be another
				// file's now, which n is not.
				return errOrphanGone
			}
			if uint64(c) < v.orphanFirstLocked(n) {
				return nil // no longer an orphan's blocks to free
			}
			v.cache.Forget(ino)
			return v.removeStepLocked(n, c, maxFileBlocks)
		}); err == errOrphanGone {
			return nil // freed by releaseOrphans meanwhile
		} else if err != nil {
			return fmt.Errorf("ext4io: freeing orphan inode %d: %w", ino, err)
		}
	}
	return nil
}

// orphanInode returns orphan ino's inode. An in-memory orphan's inode
// stays cached until evictLocked frees it, so it is looked up in the cache
// only: nil means another Close freed it since its number was listed, and
// reading it again would cache a freed inode, which the inode allocator
// would then find live when it hands the number out again. An orphan
// listed at Open is read from its inode table.
func (v *Volume) orphanInode(ino uint32, inMemory bool) (*inode, error) {
	if inMemory {
		return v.cachedInode(ino), nil
	}
	return v.getOrphanInode(ino)
}

// errOrphanGone stops orphanSteps: the orphan was freed meanwhile.
var errOrphanGone = errors.New("orphan freed")

// isOrphan reports whether ino is an in-memory orphan.
func (v *Volume) isOrphan(ino uint32) bool {
	s := v.ns()
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.mu.orphans[ino]
	return ok
}

// stepOrphans runs orphanSteps for the in-memory orphans whose Files are
// all closed (all of them with all set) and that need it, then frees
// them. The caller is outside any operation.
func (v *Volume) stepOrphans(all bool) error {
	if v.alloc == nil || v.jm == nil {
		return nil
	}
	s := v.ns()
	s.mu.Lock()
	var inos []uint32
	for ino := range s.mu.orphans {
		inos = append(inos, ino)
	}
	s.mu.Unlock()
	for _, ino := range inos {
		if !all && v.inodeInUse(ino) {
			continue
		}
		if big, err := v.orphanNeedsSteps(ino); err != nil || !big {
			if err != nil {
				return err
			}
			continue
		}
		if err := v.orphanSteps(ino, true); err != nil {
			return err
		}
	}
	return nil
}
