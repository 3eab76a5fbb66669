package ext4io

import (
	"weak"

	"github.com/ext4io/ext4io/iomap"
	"github.com/ext4io/ext4io/layout"
)

// The inode cache.
//
// v.inodes holds the inodes in use and the recently used ones, up to
// Options.InodeCache. Past that, shrinkInodes demotes clean, unlocked
// inodes: it moves them from v.inodes to v.inoWeak, which holds them by
// weak pointer only. Nothing counts the holders of an *inode (Files,
// operations between getInode and the inode lock, bufOps, conversion and
// write-back paths); the garbage collector does: as long as anything
// holds a demoted inode, its weak pointer resolves, and getInode returns
// that same struct (promoting it back) instead of reading a second copy.
// So no inode number ever has two live structs, whatever holds one.
//
// A demoted inode carries no state that is not on disk (demotable), and
// gets none while demoted: every locker of its mu or dataMu, through
// which all its changes go, promotes it first (held). So the scans of
// v.inodes (writeDirtyInodes, drainInodeWriters) see every inode that has
// something to write or a writer in flight, and a demoted inode that
// nothing holds any more can be collected with nothing lost.

// Values of inode.cstate.
const (
	inoCached    = iota // in v.inodes (or not yet inserted)
	inoDemoted          // in v.inoWeak only
	inoForgotten        // dropped by forgetInode or a reset: never cached again
)

// defaultInodeCache is Options.InodeCache's default.
const defaultInodeCache = 16384

// shrinkBatchMax bounds the demotions of one shrinkInodes pass
// (v.inoBatch: a 256th of the budget, at least 4, at most this).
const shrinkBatchMax = 64

// cachedLocked returns the cached inode ino, promoting it if it was
// demoted, or nil. The caller holds v.inoMu.
func (v *Volume) cachedLocked(ino uint32) *inode {
	if n := v.inodes[ino]; n != nil {
		n.used.Store(true)
		return n
	}
	w, ok := v.inoWeak[ino]
	if !ok {
		return nil
	}
	delete(v.inoWeak, ino)
	n := w.Value()
	if n == nil {
		return nil // collected: nothing held it
	}
	n.cstate.Store(inoCached)
	n.used.Store(true)
	v.inodes[ino] = n
	return n
}

// held is called by every locker of n.mu and n.dataMu once it holds the
// lock: a demoted n goes back into v.inodes before its holder changes it.
func (n *inode) held() {
	if n == nil || n.cstate.Load() != inoDemoted {
		return
	}
	v := n.v
	v.inoMu.Lock()
	if n.cstate.Load() == inoDemoted {
		// n is reachable (its lock is held), so its weak pointer in
		// inoWeak resolves: the lookup finds and promotes n itself.
		v.cachedLocked(n.ino)
	}
	v.inoMu.Unlock()
}

// shrinkInodes demotes cached inodes until v.inodes is back within its
// budget, or no more can be demoted now: those in use stay (the budget is
// a soft bound). One shrinker runs at a time; the others go on.
func (v *Volume) shrinkInodes() {
	if !v.inoShrink.TryLock() {
		return
	}
	defer v.inoShrink.Unlock()
	v.inoMu.Lock()
	excess := len(v.inodes) - v.inoBudget
	if excess <= 0 {
		v.inoMu.Unlock()
		return
	}
	// Second chance: an inode looked up since the last pass is skipped
	// once. Each pass demotes at most v.inoBatch inodes and scans a
	// bounded number, whatever the excess: a cache holding many more
	// inodes in use (pages, dirty state) than its budget costs each pass a
	// constant scan. Passes start once the cache is v.inoBatch/2 over its
	// budget (loadInode), so that one pass's scan serves several reads.
	excess = min(excess, v.inoBatch)
	scan := 4*excess + 64
	cands := make([]*inode, 0, excess+8)
	for _, n := range v.inodes {
		if scan--; scan < 0 || len(cands) >= cap(cands) {
			break
		}
		if n.used.Swap(false) {
			continue
		}
		cands = append(cands, n)
	}
	v.inoMu.Unlock()
	demoted, failed := 0, 0
	for _, n := range cands {
		if demoted == excess {
			break
		}
		v.inoTries.Add(1)
		if v.demote(n) {
			demoted++
		} else {
			failed++
			n.used.Store(true) // skipped by the next scan
		}
	}
	v.inoMu.Lock()
	// Each candidate found in use (pages cached, changes pending) puts the
	// next pass off by one more read: a cache whose excess is mostly in
	// use pays about one failed attempt per read instead of a pass whose
	// attempts fail, and grows past its budget by what is in use.
	v.inoShrinkAt = len(v.inodes) + failed
	if len(v.inoWeak) > v.inoSweepAt {
		// Drop the entries of collected inodes. The next sweep waits for
		// the map to double, so that entries not yet collected cost each
		// one amortized O(1).
		for ino, w := range v.inoWeak {
			if w.Value() == nil {
				delete(v.inoWeak, ino)
			}
		}
		v.inoSweepAt = max(2*len(v.inoWeak), min(v.inoBudget, 1<<20)+1024)
	}
	v.inoMu.Unlock()
}

// demote moves n from v.inodes to v.inoWeak if nothing holds its locks and
// it has no state that is not on disk, and reports whether it did.
func (v *Volume) demote(n *inode) bool {
	if !n.mu.tryLock() {
		return false
	}
	defer n.mu.Unlock() // n is demoted by then: RWMutex unlock only, no hook
	if !n.dataMu.TryLock() {
		return false
	}
	defer n.dataMu.Unlock()
	if !v.demotable(n) {
		return false
	}
	v.inoMu.Lock()
	defer v.inoMu.Unlock()
	if v.inodes[n.ino] != n || n.used.Load() {
		return false
	}
	delete(v.inodes, n.ino)
	v.inoWeak[n.ino] = weak.Make(n)
	n.cstate.Store(inoDemoted)
	v.inoForgets[n.ino%uint32(len(v.inoForgets))]++
	v.stats.inodeEvictions.Add(1)
	return true
}

// demotable reports whether n, whose mu and dataMu the caller holds
// exclusively, holds nothing that its on-disk inode does not: then a copy
// read again from disk is the same inode. Its page cache entry is dropped
// when it has no pages and no write-back error for the next fsync (the
// entry's Ops hold n).
func (v *Volume) demotable(n *inode) bool {
	if n.freed || n.in.LinksCount == 0 || n.ino == layout.RootIno || v.specialIno(n.ino) {
		return false // freed, orphans, system inodes: never demoted
	}
	// n.noReadahead does not keep n: the iomap ops whose writes it is
	// about hold n (through their File), so while any is left getInode
	// finds n itself, flag and all, and a copy read again has no ops.
	if n.dirty || n.blocksChanged || n.sizeAhead.Load() || n.delayed != 0 || len(n.zeroing) != 0 ||
		n.convBatch || n.touchEpoch.Load() != 0 {
		return false
	}
	if n.conv.pending() || n.conv.resvHeld.Load() {
		return false
	}
	if n.m != nil && (n.m.run.n.Load() != 0 || n.m.tree != nil && n.m.tree.Root() != n.in.Block) {
		return false
	}
	if fc := v.fc; fc != nil {
		if !fc.mu.TryLock() {
			return false
		}
		_, tracked := fc.inodes[n.ino]
		fc.mu.Unlock()
		if tracked {
			return false
		}
	}
	if v.alloc != nil {
		s := v.ns()
		if !s.mu.TryLock() {
			return false
		}
		_, orphan := s.mu.orphans[n.ino]
		s.mu.Unlock()
		if orphan {
			return false
		}
	}
	if v.pc != nil && n.bops != nil && !v.pc.ForgetUnused(iomap.Key(n.ino)) {
		return false
	}
	if v.alloc != nil {
		v.alloc.ReleasePrealloc(n.ino) // as ext4_clear_inode discards it
	}
	if n.conv.bits.used() {
		// Blocks queued writes made written may still be unwritten
		// entries in the extent-status cache, which outlives n: a copy
		// read again from disk would find them there without n's bits
		// and read zeroes. Their conversions are in the tree (nothing is
		// queued), so the entries are dropped and filled again from it.
		// n itself keeps its bits, right for as long as anything holds n.
		v.cache.Forget(n.ino)
	}
	return true
}

// resetInodesLocked drops every cached inode (recovery and fast-commit
// replay rewrote the metadata) and returns those that were in v.inodes.
// The caller holds v.inoMu.
func (v *Volume) resetInodesLocked() map[uint32]*inode {
	old := v.inodes
	for _, n := range old {
		n.cstate.Store(inoForgotten)
	}
	for _, w := range v.inoWeak {
		if n := w.Value(); n != nil {
			n.cstate.Store(inoForgotten)
		}
	}
	v.inodes = make(map[uint32]*inode)
	v.inoWeak = make(map[uint32]weak.Pointer[inode])
	for i := range v.inoForgets {
		v.inoForgets[i]++
	}
	return old
}
