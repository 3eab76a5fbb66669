package ext4io

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/ext4io/ext4io/extent"
	"github.com/ext4io/ext4io/internal/errs"
	"github.com/ext4io/ext4io/layout"
)

// Namespace operations: directories, links, renames, symlinks and
// attribute changes.
//
// Locking: every change to a directory's blocks or inode happens under
// that directory's inode lock (inode.mu, exclusive); an entry's target
// inode is locked after its directory (parent before child). Rename takes
// renameMu first, then both directories (ancestor first), then the inodes
// it relinks, so that the tree cannot change shape under its ancestry
// check.
//
// Invariants kept by every operation:
//   - N1: a directory's i_links_count is 2 + its subdirectories, or 1 when
//     an indexed directory outgrows EXT4_LINK_MAX (dir_nlink); a file's
//     is its number of names.
//   - N2: a directory's ".." names its parent.
//   - N3: an inode whose last name is removed is freed (blocks, then the
//     inode) unless it is on the orphan list (see orphan.go).
//   - N4: every failure after the first on-disk change undoes what was
//     done, so nothing half-created is left behind.

// Errors of namespace operations, in addition to the package sentinels.
// Each matches the syscall.Errno os would report (errors.Is(err,
// syscall.ENOTDIR)).
var (
	// ErrNotEmpty: Rmdir, Remove or Rename over a directory found entries
	// other than "." and ".." (ENOTEMPTY).
	ErrNotEmpty = errs.ErrNotEmpty
	// ErrIsDir: a file operation (Unlink, Rename of a file over a
	// directory, a write open of a directory) named a directory (EISDIR).
	ErrIsDir = errs.ErrIsDir
	// ErrNotDir: a directory operation or a path component named
	// something that is not a directory (ENOTDIR).
	ErrNotDir = errs.ErrNotDir
	// ErrTooManyLinks: Link or Mkdir would take i_links_count past
	// EXT4_LINK_MAX (EMLINK). It matches ErrNoSpace too.
	ErrTooManyLinks error = &errs.Errno{Msg: "too many links", Errno: syscall.EMLINK, Also: ErrNoSpace}
)

// linkMax is EXT4_LINK_MAX: the most names of a file, and subdirectories
// + 2 of a directory without dir_nlink overflow. Part of the on-disk format.
const linkMax = 65000

// op runs one metadata-changing operation as one journal handle: fn
// takes and releases its inode locks inside (see beginOp). An fn that
// fails for space runs once more after a commit made the blocks freed by
// earlier operations allocatable (retryNoSpace), as ext4_mkdir,
// ext4_symlink and the others retry: a failed fn undid what it did (N4).
func (v *Volume) op(fn func() error) error {
	for retried := false; ; retried = true {
		if err := v.beginOp(); err != nil {
			return err
		}
		err := v.stoppedErr()
		if err == nil {
			err = fn()
		}
		err = v.endOpErr(err)
		if v.ns().deferred.Swap(false) {
			// fn unlinked a file too large to free in one operation: free it
			// in steps now. Its errors are not fn's (the name is gone, as
			// after Linux's unlink whose final iput fails); one that stops
			// the volume is reported by later operations and Close.
			if v.stepOrphans(false) == nil && v.beginOp() == nil {
				_ = v.endOpErr(v.releaseOrphans(false))
			}
		}
		if err == nil || retried || !v.retryNoSpace(err) {
			return err
		}
	}
}

// checkName validates one path component for creation.
func checkName(base string) error {
	if base == "" || base == "." || base == ".." || strings.ContainsRune(base, 0) || strings.ContainsRune(base, '/') {
		return fmt.Errorf("bad file name %q: %w", base, ErrInvalid)
	}
	if len(base) > layout.MaxNameLen {
		return ErrNameTooLong
	}
	return nil
}

// writableNS checks the volume is open and writable, and has not
// stopped after an error (stoppedErr).
func (v *Volume) writableNS() error {
	if err := v.checkOpen(); err != nil {
		return err
	}
	if v.alloc == nil {
		return ErrReadOnly
	}
	if err := v.stoppedErr(); err != nil {
		return err
	}
	return v.releaseOrphans(false)
}

// stoppedErr returns an error matching ErrReadOnly once an error stopped
// the volume committing (failed): a change made after it would never
// reach the device, so it is refused, as Linux's errors=remount-ro
// refuses it with EROFS.
func (v *Volume) stoppedErr() error {
	if err := v.failed(); err != nil {
		return fmt.Errorf("%w after an earlier error: %w", ErrReadOnly, err)
	}
	return nil
}

// nameOp is what a call does with the last name of its path. It decides
// the error Linux gives when that name is ".", ".." or the root (the
// path "/"), which it refuses once the parent is found.
type nameOp uint8

const (
	opCreate nameOp = iota // mkdir, mknod, symlink, link: filename_create's EEXIST
	opRmdir                // do_rmdir: EINVAL for ".", ENOTEMPTY for "..", EBUSY for the root
	opUnlink               // do_unlinkat: EISDIR
)

// dotNameErr returns the error of op for a path whose last name base is
// not an ordinary name, or nil. An empty path is ErrNotFound, as for
// every call taking a path on Linux.
func dotNameErr(name, base string, op nameOp) error {
	switch {
	case name == "":
		return ErrNotFound
	case base != "" && base != "." && base != "..":
		return nil
	case op == opCreate:
		return ErrExist
	case op == opUnlink:
		return ErrIsDir
	case base == ".":
		return fmt.Errorf("cannot remove %q: %w", name, ErrInvalid)
	case base == "..":
		return ErrNotEmpty
	}
	return fmt.Errorf("cannot remove the root: %w", ErrBusy)
}

// parentDir resolves the directory holding name and returns it with the
// last component, which must be an ordinary name (dotNameErr for op
// otherwise).
func (v *Volume) parentDir(name string, op nameOp) (*File, string, error) {
	dir, base, err := v.parentOnly(name)
	if err == nil {
		err = dotNameErr(name, base, op)
	}
	if err == nil {
		err = checkName(base)
	}
	return dir, base, err
}

// notDirName fails the missing name of a new file other than a
// directory when it ends in "/", which names a directory: ENOENT, as
// Linux's filename_create (an existing name is EEXIST first).
func notDirName(name string) error {
	if strings.HasSuffix(name, "/") {
		return ErrNotFound
	}
	return nil
}

// errBlockMappedDir is the error for a change to a directory mapped by
// block lists (ext2/ext3), which ext4io reads but does not change.
func errBlockMappedDir(name string, ino uint32) error {
	if name = strings.TrimRight(name, "/"); name == "" {
		name = "/"
	}
	return fmt.Errorf("directory %q (inode %d) is block-mapped (ext2/ext3), and ext4io changes only extent-mapped directories: %w", name, ino, ErrUnsupported)
}

// parentOnly is parentDir without checking the last component: the
// parent's errors come first, as Linux resolves parents before it looks
// at the last name (rename resolves both parents first).
func (v *Volume) parentOnly(name string) (*File, string, error) {
	dirName, base := path.Split(strings.TrimRight(name, "/"))
	dir, err := v.resolveParent(dirName)
	if err != nil {
		return nil, "", err
	}
	if !dir.in.IsDir() {
		return nil, "", ErrNotDir
	}
	if err := dir.ensureDirNotInline(); err != nil {
		return nil, "", err
	}
	if dir.m == nil || dir.m.tree == nil {
		return nil, "", errBlockMappedDir(dirName, dir.ino)
	}
	return dir, base, nil
}

// ftOf returns the directory entry file type of an inode mode.
func ftOf(mode uint16) uint8 {
	switch mode & layout.ModeFmt {
	case layout.ModeReg:
		return layout.FtRegFile
	case layout.ModeDir:
		return layout.FtDir
	case layout.ModeLnk:
		return layout.FtSymlink
	case layout.ModeChr:
		return layout.FtChrdev
	case layout.ModeBlk:
		return layout.FtBlkdev
	case layout.ModeFIFO:
		return layout.FtFifo
	case layout.ModeSock:
		return layout.FtSock
	}
	return layout.FtUnknown
}

// entryType is the file type stored in entries (0 without filetype).
func (v *Volume) entryType(mode uint16) uint8 {
	if !v.sb.HasIncompat(layout.IncompatFiletype) {
		return 0
	}
	return ftOf(mode)
}

// lookupChild finds name in f (lock held) and opens its inode.
func (f *File) lookupChild(name string) (*File, error) {
	e, err := f.lookupName(name)
	if err != nil {
		return nil, err
	}
	return f.v.entryFile(f.ino, e.Inode, name)
}

// entryFile is inodeFile for the inode that entry name of directory dir
// names: a directory must have dir as its parent (checkDirParent).
func (v *Volume) entryFile(dir, ino uint32, name string) (*File, error) {
	f, err := v.inodeFile(ino, name)
	if err != nil {
		return nil, err
	}
	if err := v.checkDirParent(dir, name, f.n); err != nil {
		return nil, err
	}
	return f, nil
}

// inodeFile opens the inode a directory entry names for callers that
// hold the directory's lock exclusively (or renameMu) and may hold the
// inode's lock already (a rename's directories): it takes no lock.
func (v *Volume) inodeFile(ino uint32, name string) (*File, error) {
	n, err := v.entryInode(ino)
	if err != nil {
		return nil, err
	}
	if n.in.LinksCount == 0 {
		return nil, &errs.CorruptError{What: "inode", Ino: ino, Off: -1, Msg: "unused inode referenced (links count 0)"}
	}
	return newFile(v, n, ino, name), nil
}

// incDirLink adds a subdirectory link to directory n (ext4_inc_count):
// an indexed directory whose count passes EXT4_LINK_MAX, or was already
// 1, stays at 1.
func (v *Volume) incDirLink(n *inode) {
	n.in.LinksCount++
	if n.in.Flags&layout.InodeFlagIndex != 0 && (n.in.LinksCount > linkMax || n.in.LinksCount == 2) {
		n.in.LinksCount = 1
	}
}

// decLink drops a link (ext4_dec_count): a directory at 1 or 2 (an
// overflowed dir_nlink count) keeps it.
func decLink(n *inode) {
	if !n.in.IsDir() || n.in.LinksCount > 2 {
		n.in.LinksCount--
	}
}

// dirLinkMax reports whether directory n cannot take another
// subdirectory (EXT4_DIR_LINK_MAX).
func (v *Volume) dirLinkMax(n *inode) bool {
	return !v.isDxDir(n.in) && n.in.LinksCount >= linkMax
}

func now() layout.Timestamp { return layout.TimestampOf(time.Now()) }

// Mkdir makes a directory at name with permission bits perm and the
// sticky bit if perm has it. As mkdir(2), setuid and setgid in perm are
// dropped, and the directory is setgid (and takes the parent's group)
// when its parent is setgid. The parent must exist; an existing name
// fails with ErrExist.
func (v *Volume) Mkdir(name string, perm fs.FileMode) error {
	if err := v.op(func() error { return v.mkdir(name, perm) }); err != nil {
		return &fs.PathError{Op: "mkdir", Path: name, Err: err}
	}
	return nil
}

// unixMode converts fs.FileMode permission bits to i_mode bits.
func unixMode(perm fs.FileMode) uint16 {
	m := uint16(perm & 0o777)
	if perm&fs.ModeSetuid != 0 {
		m |= 0o4000
	}
	if perm&fs.ModeSetgid != 0 {
		m |= 0o2000
	}
	if perm&fs.ModeSticky != 0 {
		m |= 0o1000
	}
	return m
}

func (v *Volume) mkdir(name string, perm fs.FileMode) error {
	v.fcIneligible("mkdir") // fast commits cannot express it (fcwrite.go)
	if err := v.writableNS(); err != nil {
		return err
	}
	dir, base, err := v.parentDir(name, opCreate)
	if err != nil {
		return err
	}
	_, err = v.mkdirIn(dir, base, perm)
	return err
}

// mkdirIn makes directory base in directory dir (checked by parentDir or
// dirAt), inside an operation, and returns it open.
func (v *Volume) mkdirIn(dir *File, base string, perm fs.FileMode) (*File, error) {
	dir.n.mu.Lock()
	defer dir.n.mu.Unlock()
	if dir.n.in.LinksCount == 0 {
		return nil, ErrNotFound // removed since resolved (Linux's IS_DEADDIR)
	}
	if _, err := dir.lookupName(base); err == nil {
		return nil, ErrExist
	} else if !isNotExist(err) {
		return nil, err
	}
	if v.dirLinkMax(dir.n) {
		return nil, ErrTooManyLinks
	}
	ino, err := v.allocInode(dir.ino, true)
	if err != nil {
		return nil, err
	}
	// vfs_mkdir keeps the permission and sticky bits only; setgid comes
	// from the parent (inheritGroup).
	in := v.newInode(layout.ModeDir | unixMode(perm)&0o1777)
	inheritGroup(dir, in)
	in.LinksCount = 2
	if err := v.writeNewInode(ino, in); err != nil {
		v.alloc.FreeInode(ino, true)
		return nil, err
	}
	child, err := v.openInode(ino, base)
	if err != nil {
		v.discardInode(ino, in, true)
		return nil, err
	}
	child.n.mu.Lock()
	err = child.initDirLocked(dir.ino)
	child.n.mu.Unlock()
	if err != nil {
		v.dropInode(child.n)
		return nil, err
	}
	if err := dir.addEntryLocked(base, ino, v.entryType(layout.ModeDir)); err != nil {
		v.dropInode(child.n)
		return nil, err
	}
	v.incDirLink(dir.n)
	return child, v.writeInodeLocked(dir.n)
}

// initDirLocked writes the first block of a new directory: "." and "..".
func (f *File) initDirLocked(parent uint32) error {
	v := f.v
	b := make([]byte, v.bs)
	end := v.bs
	if v.csum {
		end -= layout.DirTailLen
	}
	ft := v.entryType(layout.ModeDir)
	layout.PutDirEntry(b, 0, f.ino, layout.DirRecLen(1), ft, []byte("."))
	layout.PutDirEntry(b, layout.DirRecLen(1), parent, end-layout.DirRecLen(1), ft, []byte(".."))
	if v.csum {
		layout.SetDirTail(layout.InodeSeed(v.csumSeed, f.ino, f.in.Generation), b)
	}
	_, err := f.appendBlockLocked(b)
	if err == nil {
		f.n.dotdot.Store(parent)
	}
	return err
}

// appendBlockLocked appends directory block b (checksum tail set here when
// b has one) and returns its logical block number.
func (f *File) appendBlockLocked(b []byte) (uint64, error) {
	v := f.v
	bs := uint64(v.bs)
	lblk := f.in.Size / bs
	if lblk >= maxFileBlocks {
		return 0, fmt.Errorf("directory inode %d is full: %w", f.ino, ErrNoSpace)
	}
	if v.csum && layout.HasDirTail(b) {
		layout.SetDirTail(layout.InodeSeed(v.csumSeed, f.ino, f.in.Generation), b)
	}
	start, got, err := f.allocRun(lblk, 1, 1)
	if err != nil {
		return 0, err
	}
	w, err := v.getNewMeta(start)
	if err != nil {
		v.alloc.Free(start, got)
		return 0, err
	}
	copy(w, b)
	if err := v.meta.Dirty(start, w); err != nil {
		v.alloc.Free(start, got)
		return 0, err
	}
	if err := f.mapRun(lblk, start, got, false); err != nil {
		return 0, err
	}
	f.in.Size += bs
	f.touchLocked()
	return lblk, v.writeInodeLocked(f.n)
}

// checkEvictLocked fails with ErrCorrupt when inode n (locked) could not
// be evicted whole: its tree maps more blocks than i_blocks counts, which
// evictLocked finds only after it has begun. A volume without a journal
// calls it before an unlink, rmdir or rename removes n's last name, so
// that such an inode fails the operation before anything is written (with
// a journal, the failed operation is never committed). It reads every
// tree block, as the eviction would.
func (v *Volume) checkEvictLocked(n *inode) error {
	if v.jm != nil || n.m == nil || n.m.tree == nil {
		return nil
	}
	blocks, err := v.checkRemoveLocked(n, 0, extent.EndLblk-1)
	if err != nil {
		return err
	}
	if err := n.m.tree.Blocks(func(uint64, int) error {
		blocks++
		return nil
	}); err != nil {
		return fmt.Errorf("ext4io: inode %d: %w", n.ino, err)
	}
	if n.in.FileACL != 0 {
		blocks++
	}
	if have := n.in.Blocks(v.sb); have < blocks*uint64(v.bs/512) {
		return errs.Corruptf("inode", 0, -1, "inode %d: maps %d blocks, more than i_blocks %d sectors counts", n.ino, blocks, have)
	}
	return nil
}

// checkRemoveLocked fails with ErrCorrupt when removing logical blocks
// [from, to] of inode n (locked) would free a block the file still maps
// elsewhere or frees twice (two extents mapping it), or a block the bitmap
// does not count as in use or that is file system metadata: on a volume
// without a journal, callers check before the tree's Remove, whose frees
// up to such a block would stay on disk. With a journal it does nothing
// (a failed operation is never committed). It walks the whole tree,
// refuses a tree with any block mapped twice, and returns the number of
// data blocks the tree maps.
func (v *Volume) checkRemoveLocked(n *inode, from, to uint32) (mapped uint64, err error) {
	if v.jm != nil || n.m == nil || n.m.tree == nil || from > to {
		return 0, nil
	}
	type run struct {
		start, n uint64
		freed    bool
	}
	var runs []run
	err = n.m.tree.Walk(func(e extent.Extent) error {
		mapped += uint64(e.Len)
		lo, hi := max(uint64(e.Lblk), uint64(from)), min(e.End(), uint64(to)+1)
		if lo >= hi {
			runs = append(runs, run{e.Pblk, uint64(e.Len), false})
			return nil
		}
		if lo > uint64(e.Lblk) {
			runs = append(runs, run{e.Pblk, lo - uint64(e.Lblk), false})
		}
		runs = append(runs, run{e.Pblk + (lo - uint64(e.Lblk)), hi - lo, true})
		if hi < e.End() {
			runs = append(runs, run{e.Pblk + (hi - uint64(e.Lblk)), e.End() - hi, false})
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("ext4io: inode %d: %w", n.ino, err)
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].start < runs[j].start })
	var end uint64
	for i, r := range runs {
		if i > 0 && r.start < end {
			return 0, errs.Corruptf("inode", 0, -1, "inode %d: block %d is mapped twice", n.ino, r.start)
		}
		end = max(end, r.start+r.n)
		if r.freed {
			if err := v.alloc.CheckInUse(r.start, r.n); err != nil {
				return 0, fmt.Errorf("ext4io: inode %d: %w", n.ino, err)
			}
		}
	}
	return mapped, nil
}

// releaseLinkLocked handles an inode whose link count dropped (n locked):
// at zero it is freed, or put on the orphan list while it is open.
// inUse says whether a File has it open (checked before locking n).
func (v *Volume) releaseLinkLocked(n *inode, inUse bool) error {
	if n.in.LinksCount > 0 {
		n.in.Ctime = now()
		return v.writeInodeLocked(n)
	}
	if inUse {
		n.in.Ctime = now()
		return v.orphanAddLocked(n)
	}
	if cuts, err := v.treeCutsLocked(n, v.orphanFirstLocked(n), maxFileBlocks); err != nil {
		return err
	} else if len(cuts) > 0 {
		// Too large to free in this operation: an orphan until v.op
		// frees it in steps (orphanSteps), as one still open would be.
		n.in.Ctime = now()
		if err := v.orphanAddLocked(n); err != nil {
			return err
		}
		v.ns().deferred.Store(true)
		return nil
	}
	return v.evictLocked(n)
}

// Rmdir removes the empty directory at name.
func (v *Volume) Rmdir(name string) error {
	if err := v.op(func() error { return v.rmdir(name) }); err != nil {
		return &fs.PathError{Op: "rmdir", Path: name, Err: err}
	}
	return nil
}

func (v *Volume) rmdir(name string) error {
	v.fcIneligible("rmdir") // fast commits cannot express it (fcwrite.go)
	if err := v.writableNS(); err != nil {
		return err
	}
	dir, base, err := v.parentDir(name, opRmdir)
	if err != nil {
		return err
	}
	dir.n.mu.Lock()
	defer dir.n.mu.Unlock()
	child, err := dir.lookupChild(base)
	if err != nil {
		return err
	}
	if !child.in.IsDir() {
		return ErrNotDir
	}
	child.n.mu.Lock()
	defer child.n.mu.Unlock()
	if err := child.checkEmpty(); err != nil {
		return err
	}
	if err := v.checkEvictLocked(child.n); err != nil {
		return err
	}
	if _, err := dir.removeEntryLocked(base, child.ino); err != nil {
		return err
	}
	decLink(dir.n)
	if err := v.writeInodeLocked(dir.n); err != nil {
		return err
	}
	child.n.in.LinksCount = 0
	return v.releaseLinkLocked(child.n, false)
}

// checkEmpty fails with ErrNotEmpty unless directory f holds only "." and
// "..". A block-mapped directory whose i_size cannot hold those two is
// corruption: the walk, bounded by i_size, would find it empty whatever
// its blocks hold (Linux's ext4_empty_dir records "invalid size" as a
// filesystem error and removes it; here nothing is removed).
func (f *File) checkEmpty() error {
	if f.inl == nil && f.in.Flags&layout.InodeFlagInlineData == 0 && f.in.Size < uint64(layout.DirRecLen(1)+layout.DirRecLen(2)) {
		return &errs.CorruptError{What: "directory", Ino: f.ino, Off: -1, Msg: fmt.Sprintf("invalid size %d: less than \".\" and \"..\"", f.in.Size)}
	}
	err := f.scanDir(func(e layout.DirEntry) error {
		if n := string(e.Name); n != "." && n != ".." {
			return ErrNotEmpty
		}
		return nil
	})
	return err
}

// Unlink removes the name of a non-directory. The inode is freed with its
// last name, or when its last open File closes.
func (v *Volume) Unlink(name string) error {
	if err := v.op(func() error { return v.unlink(name) }); err != nil {
		return &fs.PathError{Op: "unlink", Path: name, Err: err}
	}
	return nil
}

func (v *Volume) unlink(name string) error {
	if err := v.writableNS(); err != nil {
		return err
	}
	dir, base, err := v.parentDir(name, opUnlink)
	if err != nil {
		return err
	}
	dir.n.mu.Lock()
	defer dir.n.mu.Unlock()
	// One walk finds the entry for both the lookup and the removal.
	buf := getBlockBuf(v.bs)
	defer putBlockBuf(buf)
	lblk, off, prev, err := dir.findEntry(base, 0, buf)
	if err != nil {
		return err
	}
	e := layout.DirEntry{Inode: binary.LittleEndian.Uint32(buf[off:]), Name: []byte(base)}
	if err := v.checkEntryIno(dir.ino, e); err != nil {
		return err
	}
	child, err := v.inodeFile(e.Inode, base)
	if err != nil {
		return err
	}
	if child.in.IsDir() {
		return ErrIsDir
	}
	if strings.HasSuffix(name, "/") {
		return ErrNotDir // a name ending in "/" names a directory
	}
	child.n.mu.Lock()
	defer child.n.mu.Unlock()
	// Under the inode's lock: an open racing this unlink either tracked
	// its File before (the inode becomes an orphan) or sees it freed
	// after (trackOpen).
	inUse := v.inodeInUse(child.ino)
	if child.n.in.LinksCount == 1 && !inUse {
		if err := v.checkEvictLocked(child.n); err != nil {
			return err
		}
	}
	layout.RemoveDirEntry(buf, off, prev)
	if err := dir.writeDirBlock(lblk, buf); err != nil {
		return err
	}
	v.fcDentry(layout.FCTagUnlink, dir.ino, child.ino, base)
	if child.n.in.LinksCount == 0 {
		return fmt.Errorf("inode %d had a name but no links: %w", child.ino, ErrCorrupt)
	}
	child.n.in.LinksCount--
	return v.releaseLinkLocked(child.n, inUse)
}

// Link makes newname another name of the non-directory at oldname (a
// final symlink is not followed, as with linkat without
// AT_SYMLINK_FOLLOW). A directory fails with ErrPermission (EPERM) and
// an empty name with ErrNotFound (ENOENT), as link(2) fails.
func (v *Volume) Link(oldname, newname string) error {
	if err := v.op(func() error { return v.link(oldname, newname) }); err != nil {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: err}
	}
	return nil
}

func (v *Volume) link(oldname, newname string) error {
	if err := v.writableNS(); err != nil {
		return err
	}
	if oldname == "" {
		return ErrNotFound // as for every call taking a path on Linux
	}
	src, err := v.resolve(oldname, false)
	if err != nil {
		return err
	}
	dir, base, err := v.parentDir(newname, opCreate)
	if err != nil {
		return err
	}
	dir.n.mu.Lock()
	defer dir.n.mu.Unlock()
	if _, err := dir.lookupName(base); err == nil {
		return ErrExist
	} else if !isNotExist(err) {
		return err
	}
	if err := notDirName(newname); err != nil {
		return err
	}
	if src.in.IsDir() {
		return ErrPermission // link(2): EPERM for a directory, after the new name's checks
	}
	src.n.mu.Lock()
	defer src.n.mu.Unlock()
	if src.n.in.LinksCount == 0 {
		return fmt.Errorf("inode %d was unlinked: %w", src.ino, ErrNotFound)
	}
	if src.n.in.LinksCount >= linkMax {
		return ErrTooManyLinks
	}
	if err := dir.addEntryLocked(base, src.ino, v.entryType(src.n.in.Mode)); err != nil {
		return err
	}
	v.fcDentry(layout.FCTagLink, dir.ino, src.ino, base)
	src.n.in.LinksCount++
	src.n.in.Ctime = now()
	return v.writeInodeLocked(src.n)
}

// Symlink makes a symbolic link at name pointing to target. Targets under
// 60 bytes are stored in the inode (a fast symlink, without the extents
// flag, as Linux stores them); longer ones in one extent-mapped block.
func (v *Volume) Symlink(target, name string) error {
	if err := v.op(func() error { return v.symlink(target, name) }); err != nil {
		return &os.LinkError{Op: "symlink", Old: target, New: name, Err: err}
	}
	return nil
}

func (v *Volume) symlink(target, name string) error {
	v.fcIneligible("symlink") // fast commits cannot express it (fcwrite.go)
	if err := v.writableNS(); err != nil {
		return err
	}
	// Linux refuses an empty target as it refuses an empty path, before
	// it looks at name.
	if target == "" {
		return fmt.Errorf("empty symlink target: %w", ErrNotFound)
	}
	if strings.ContainsRune(target, 0) {
		return fmt.Errorf("bad symlink target %q: %w", target, ErrInvalid)
	}
	if err := checkPath(target); err != nil {
		return err
	}
	dir, base, err := v.parentDir(name, opCreate)
	if err != nil {
		return err
	}
	dir.n.mu.Lock()
	defer dir.n.mu.Unlock()
	if _, err := dir.lookupName(base); err == nil {
		return ErrExist
	} else if !isNotExist(err) {
		return err
	}
	if err := notDirName(name); err != nil {
		return err
	}
	// ext4_symlink, once name is known to be free: the target must fit
	// in a block with its NUL.
	if len(target) >= v.bs {
		return fmt.Errorf("symlink target of %d bytes (max %d): %w", len(target), v.bs-1, ErrNameTooLong)
	}
	ino, err := v.allocInode(dir.ino, false)
	if err != nil {
		return err
	}
	in := v.newInode(layout.ModeLnk | 0o777)
	inheritGroup(dir, in)
	in.Size = uint64(len(target))
	fast := len(target) < layout.InodeBlockSize
	if fast {
		in.Flags &^= layout.InodeFlagExtents
		in.Block = [layout.InodeBlockSize]byte{}
		copy(in.Block[:], target)
	}
	if err := v.writeNewInode(ino, in); err != nil {
		v.alloc.FreeInode(ino, false)
		return err
	}
	if !fast {
		f, err := v.openInode(ino, base)
		if err != nil {
			v.discardInode(ino, in, false)
			return err
		}
		f.n.mu.Lock()
		b := make([]byte, v.bs)
		copy(b, target)
		var start, got uint64
		start, got, err = f.allocRun(0, 1, 1)
		if err == nil {
			if _, werr := v.dev.WriteAt(b, int64(start)*int64(v.bs)); werr != nil {
				v.alloc.Free(start, got)
				err = fmt.Errorf("ext4io: symlink inode %d: %w", ino, wrapIO(werr))
			} else if err = f.mapRun(0, start, got, false); err == nil {
				err = v.writeInodeLocked(f.n)
			}
		}
		f.n.mu.Unlock()
		if err != nil {
			v.dropInode(f.n)
			return err
		}
	}
	if err := dir.addEntryLocked(base, ino, v.entryType(layout.ModeLnk)); err != nil {
		if n := v.cachedInode(ino); n != nil {
			v.dropInode(n)
		} else {
			v.discardInode(ino, in, false)
		}
		return err
	}
	return nil
}

// findEntry locates name (naming ino when ino != 0) in directory f: the
// logical block (read into buf), the entry's offset and the offset of the
// entry before it in the block (-1 for the first).
func (f *File) findEntry(name string, ino uint32, buf []byte) (lblk uint64, off, prev int, err error) {
	v := f.v
	hasFt := v.sb.HasIncompat(layout.IncompatFiletype)
	off, prev = -1, -1
	read := ^uint64(0) // the block buf holds
	try := func(blk uint64) (bool, error) {
		ok, err := f.dirBlock(blk, buf)
		if err != nil || !ok {
			return false, err
		}
		read = blk
		if v.isDxDir(f.in) && (blk == 0 || layout.IsDxNodeBlock(buf)) {
			return false, nil // index block
		}
		if v.csum && !v.opts.SkipChecksums {
			if err := layout.VerifyDirBlock(layout.InodeSeed(v.csumSeed, f.ino, f.in.Generation), buf, f.physOf(blk), f.ino); err != nil {
				return false, err
			}
		}
		p := -1
		err = layout.DirBlock(buf, f.physOf(blk), f.ino, v.csum && layout.HasDirTail(buf), hasFt, blk == 0, func(e layout.DirEntry) error {
			if e.Inode != 0 && string(e.Name) == name && (ino == 0 || e.Inode == ino) {
				off, prev = e.Off, p
				return errStop
			}
			p = e.Off
			return nil
		})
		if errors.Is(err, errStop) {
			lblk = blk
			return true, nil
		}
		return false, err
	}
	if v.isDxDir(f.in) {
		err = f.dxWalk(name, func(blk uint64) (bool, error) { return try(blk) })
	} else {
		err = f.dirRuns(f.in.Size/uint64(v.bs), func(blk, n uint64) error {
			for end := blk + n; blk < end; blk++ {
				if found, err := try(blk); found || err != nil {
					if found {
						return errStop
					}
					return err
				}
			}
			return nil
		})
		if errors.Is(err, errStop) {
			err = nil
		}
	}
	if err != nil {
		return 0, 0, 0, err
	}
	if off < 0 {
		return 0, 0, 0, ErrNotFound
	}
	if read != lblk {
		if _, err := f.dirBlock(lblk, buf); err != nil {
			return 0, 0, 0, err
		}
	}
	return lblk, off, prev, nil
}

// removeEntryLocked deletes the entry name (-> ino) from directory f (lock
// held) as ext4_generic_delete_entry does: its record joins the previous
// entry's, or, first in its block, its inode becomes 0.
func (f *File) removeEntryLocked(name string, ino uint32) (uint64, error) {
	buf := make([]byte, f.v.bs)
	lblk, off, prev, err := f.findEntry(name, ino, buf)
	if err != nil {
		return 0, err
	}
	layout.RemoveDirEntry(buf, off, prev)
	return lblk, f.writeDirBlock(lblk, buf)
}

// setEntryLocked points the existing entry name (-> oldIno) at newIno.
func (f *File) setEntryLocked(name string, oldIno, newIno uint32, ft uint8) error {
	buf := make([]byte, f.v.bs)
	lblk, off, _, err := f.findEntry(name, oldIno, buf)
	if err != nil {
		return err
	}
	layout.RetargetDirEntry(buf, off, newIno, ft, f.v.sb.HasIncompat(layout.IncompatFiletype))
	return f.writeDirBlock(lblk, buf)
}
