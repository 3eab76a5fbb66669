package ext4io

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ext4io/ext4io/extent"
	"github.com/ext4io/ext4io/internal/errs"
	"github.com/ext4io/ext4io/iomap"
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

// renameMu serializes renames (Linux's s_vfs_rename_mutex): ancestry
// checks need a tree that does not change shape meanwhile.
var renameMu sync.Mutex

// op runs one metadata-changing operation as one journal handle: fn
// takes and releases its inode locks inside (see beginOp).
func (v *Volume) op(fn func() error) error {
	v.beginOp()
	return v.endOpErr(fn())
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

// writableNS checks the volume is open and writable.
func (v *Volume) writableNS() error {
	if err := v.checkOpen(); err != nil {
		return err
	}
	if v.alloc == nil {
		return ErrReadOnly
	}
	return v.releaseOrphans(false)
}

// parentDir resolves the directory holding name and returns it with the
// last component.
func (v *Volume) parentDir(name string) (*File, string, error) {
	dir, base, err := v.parentOnly(name)
	if err == nil {
		err = checkName(base)
	}
	return dir, base, err
}

// parentOnly is parentDir without checking the last component: the
// parent's errors come first, as Linux resolves parents before it looks
// at the last name (rename resolves both parents first).
func (v *Volume) parentOnly(name string) (*File, string, error) {
	dirName, base := path.Split(strings.TrimRight(name, "/"))
	dir, err := v.resolve(dirName, true)
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
		return nil, "", fmt.Errorf("directory %s (inode %d) is not extent-mapped: %w", dirName, dir.ino, ErrUnsupported)
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

// lookupChild finds name in d (lock held) and opens its inode.
func (d *File) lookupChild(name string) (*File, error) {
	e, err := d.lookupName(name)
	if err != nil {
		return nil, err
	}
	return d.v.inodeFile(e.Inode, name)
}

// inodeFile is openInode for callers that may hold the inode's lock
// already (a rename's directories): it takes no lock.
func (v *Volume) inodeFile(ino uint32, name string) (*File, error) {
	n, err := v.getInode(ino)
	if err != nil {
		return nil, err
	}
	if n.in.LinksCount == 0 {
		return nil, &CorruptError{What: "inode", Ino: ino, Off: -1, Msg: "unused inode referenced (links count 0)"}
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

// Mkdir makes a directory at name with permission bits perm (and setgid,
// setuid, sticky). The parent must exist; an existing name fails with
// ErrExist.
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
	if err := v.writableNS(); err != nil {
		return err
	}
	dir, base, err := v.parentDir(name)
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
	if v.dirLinkMax(dir.n) {
		return ErrTooManyLinks
	}
	ino, err := v.allocInode(dir.ino, true)
	if err != nil {
		return err
	}
	in := v.newInode(layout.ModeDir | unixMode(perm))
	inheritGroup(dir, in)
	in.LinksCount = 2
	if err := v.writeInode(ino, in); err != nil {
		v.alloc.FreeInode(ino, true)
		return err
	}
	child, err := v.openInode(ino, base)
	if err != nil {
		v.discardInode(ino, in, true)
		return err
	}
	child.n.mu.Lock()
	err = child.initDirLocked(dir.ino)
	child.n.mu.Unlock()
	if err != nil {
		v.dropInode(child.n)
		return err
	}
	if err := dir.addEntryLocked(base, ino, v.entryType(layout.ModeDir)); err != nil {
		v.dropInode(child.n)
		return err
	}
	v.incDirLink(dir.n)
	return v.writeInodeLocked(dir.n)
}

// initDirLocked writes the first block of a new directory: "." and "..".
func (d *File) initDirLocked(parent uint32) error {
	v := d.v
	b := make([]byte, v.bs)
	end := v.bs
	if v.csum {
		end -= layout.DirTailLen
	}
	ft := v.entryType(layout.ModeDir)
	layout.PutDirEntry(b, 0, d.ino, layout.DirRecLen(1), ft, []byte("."))
	layout.PutDirEntry(b, layout.DirRecLen(1), parent, end-layout.DirRecLen(1), ft, []byte(".."))
	if v.csum {
		layout.SetDirTail(layout.InodeSeed(v.csumSeed, d.ino, d.in.Generation), b)
	}
	_, err := d.appendBlockLocked(b)
	return err
}

// appendBlockLocked appends directory block b (checksum tail set here when
// b has one) and returns its logical block number.
func (d *File) appendBlockLocked(b []byte) (uint64, error) {
	v := d.v
	bs := uint64(v.bs)
	lblk := d.in.Size / bs
	if lblk >= maxFileBlocks {
		return 0, fmt.Errorf("directory inode %d is full: %w", d.ino, ErrNoSpace)
	}
	if v.csum && layout.HasDirTail(b) {
		layout.SetDirTail(layout.InodeSeed(v.csumSeed, d.ino, d.in.Generation), b)
	}
	start, got, err := d.allocRun(lblk, 1, 1)
	if err != nil {
		return 0, err
	}
	w, err := v.meta.GetWrite(start)
	if err != nil {
		v.alloc.Free(start, got)
		return 0, err
	}
	copy(w, b)
	if err := v.meta.Dirty(start, w); err != nil {
		v.alloc.Free(start, got)
		return 0, err
	}
	if err := d.mapRun(lblk, start, got, false); err != nil {
		return 0, err
	}
	d.in.Size += bs
	d.touchLocked()
	return lblk, v.writeInodeLocked(d.n)
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
		if n.in.IsDir() && v.jm != nil {
			// Directory blocks are metadata: revoke them so that the
			// journal never writes an old copy over their next user.
			err = n.m.tree.Walk(func(e extent.Extent) error {
				for i := uint64(0); i < uint64(e.Len); i++ {
					v.jm.revoke(e.Pblk + i)
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
	n := v.inodes[ino]
	delete(v.inodes, ino)
	v.inoMu.Unlock()
	if v.pc != nil {
		v.pc.Forget(iomap.Key(ino))
	}
	v.cache.Forget(ino)
	if n != nil && n.delayed > 0 {
		v.alloc.Unreserve(n.delayed)
		n.delayed = 0
	}
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
	if err := v.writableNS(); err != nil {
		return err
	}
	dir, base, err := v.parentDir(name)
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
// "..".
func (f *File) checkEmpty() error {
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
	dir, base, err := v.parentDir(name)
	if err != nil {
		return err
	}
	dir.n.mu.Lock()
	defer dir.n.mu.Unlock()
	child, err := dir.lookupChild(base)
	if err != nil {
		return err
	}
	if child.in.IsDir() {
		return ErrIsDir
	}
	inUse := v.inodeInUse(child.ino)
	child.n.mu.Lock()
	defer child.n.mu.Unlock()
	if _, err := dir.removeEntryLocked(base, child.ino); err != nil {
		return err
	}
	if child.n.in.LinksCount == 0 {
		return fmt.Errorf("inode %d had a name but no links: %w", child.ino, ErrCorrupt)
	}
	child.n.in.LinksCount--
	return v.releaseLinkLocked(child.n, inUse)
}

// Link makes newname another name of the non-directory at oldname (a
// final symlink is not followed, as with linkat without
// AT_SYMLINK_FOLLOW). A directory fails with ErrPermission (EPERM), as
// link(2) fails.
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
	src, err := v.resolve(oldname, false)
	if err != nil {
		return err
	}
	dir, base, err := v.parentDir(newname)
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
	if err := v.writableNS(); err != nil {
		return err
	}
	if target == "" || strings.ContainsRune(target, 0) {
		return fmt.Errorf("bad symlink target %q: %w", target, ErrInvalid)
	}
	if len(target) >= v.bs || len(target) >= 4096 {
		return fmt.Errorf("symlink target of %d bytes (max %d): %w", len(target), min(v.bs, 4096)-1, ErrInvalid)
	}
	dir, base, err := v.parentDir(name)
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
	if err := v.writeInode(ino, in); err != nil {
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

// cachedInode returns the cached state of ino, or nil.
func (v *Volume) cachedInode(ino uint32) *inode {
	v.inoMu.Lock()
	defer v.inoMu.Unlock()
	return v.inodes[ino]
}

// Rename renames oldname to newname, replacing newname if it exists: a
// file replaces a non-directory, a directory an empty directory. Moving a
// directory to another parent updates its ".." and both parents' link
// counts. Renaming a name onto another name of the same inode does
// nothing, as rename(2) does. These are rename(2)'s semantics, which
// os.Rename narrows (it refuses to replace a directory); errors are
// rename(2)'s too: a directory over a non-directory is ErrNotDir, a
// non-directory over a directory ErrIsDir, over a non-empty directory or
// an ancestor of oldname ErrNotEmpty, into its own subtree ErrInvalid.
// Rename2 adds RENAME_NOREPLACE and RENAME_EXCHANGE.
func (v *Volume) Rename(oldname, newname string) error {
	if err := v.op(func() error { return v.rename(oldname, newname, false) }); err != nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	return nil
}

// lockRenameDirs finds the parent directories of oldname and newname and
// locks them, an ancestor before its descendant (one lock when they are
// the same); unlock releases them. The caller holds renameMu, which keeps
// the ancestry stable.
func (v *Volume) lockRenameDirs(oldname, newname string) (odir *File, obase string, ndir *File, nbase string, unlock func(), err error) {
	if odir, obase, err = v.parentOnly(oldname); err != nil {
		return nil, "", nil, "", nil, err
	}
	if ndir, nbase, err = v.parentOnly(newname); err != nil {
		return nil, "", nil, "", nil, err
	}
	first, second := odir, ndir
	if odir.n == ndir.n {
		first.n.mu.Lock()
		return odir, obase, ndir, nbase, first.n.mu.Unlock, nil
	}
	under, err := v.isUnder(odir.ino, ndir.ino)
	if err != nil {
		return nil, "", nil, "", nil, err
	}
	if under { // odir lies below ndir
		first, second = ndir, odir
	}
	first.n.mu.Lock()
	second.n.mu.Lock()
	return odir, obase, ndir, nbase, func() { second.n.mu.Unlock(); first.n.mu.Unlock() }, nil
}

// rename renames oldname; with noReplace an existing newname fails with
// ErrExist (RENAME_NOREPLACE).
func (v *Volume) rename(oldname, newname string, noReplace bool) error {
	if err := v.writableNS(); err != nil {
		return err
	}
	renameMu.Lock()
	defer renameMu.Unlock()
	odir, obase, ndir, nbase, unlock, err := v.lockRenameDirs(oldname, newname)
	if err != nil {
		return err
	}
	defer unlock()
	same := odir.n == ndir.n
	if err := checkName(obase); err != nil {
		return err
	}
	src, err := odir.lookupChild(obase)
	if err != nil {
		return err
	}
	if err := checkName(nbase); err != nil {
		return err
	}
	srcDir := src.in.IsDir()
	var dst *File
	if e, err := ndir.lookupName(nbase); err == nil {
		if noReplace {
			return ErrExist
		}
		if e.Inode == src.ino {
			return nil
		}
		if dst, err = v.inodeFile(e.Inode, nbase); err != nil {
			return err
		}
		if dst.in.IsDir() {
			// newname is an ancestor of oldname ("a/b/x" over "a"):
			// ENOTEMPTY whatever oldname is, as Linux's lock_rename trap.
			under := dst.n == odir.n
			if !under {
				if under, err = v.isUnder(odir.ino, dst.ino); err != nil {
					return err
				}
			}
			if under {
				return ErrNotEmpty
			}
		}
	} else if !isNotExist(err) {
		return err
	}
	if srcDir {
		// A directory cannot move into its own subtree.
		if src.ino == ndir.ino {
			return fmt.Errorf("cannot move a directory into itself: %w", ErrInvalid)
		}
		if !same {
			under, err := v.isUnder(ndir.ino, src.ino)
			if err != nil {
				return err
			}
			if under {
				return fmt.Errorf("cannot move a directory into its own subtree: %w", ErrInvalid)
			}
			if dst == nil && v.dirLinkMax(ndir.n) {
				return ErrTooManyLinks
			}
		}
	}
	if dst != nil {
		switch {
		case srcDir && !dst.in.IsDir():
			return ErrNotDir
		case !srcDir && dst.in.IsDir():
			return ErrIsDir
		}
	}
	dstInUse := dst != nil && !dst.in.IsDir() && v.inodeInUse(dst.ino)
	src.n.mu.Lock()
	defer src.n.mu.Unlock()
	if dst != nil {
		dst.n.mu.Lock()
		defer dst.n.mu.Unlock()
		if srcDir {
			if err := dst.checkEmpty(); err != nil {
				return err
			}
		}
	}
	ft := v.entryType(src.n.in.Mode)
	// New name first, then the old one goes: a crash in between leaves two
	// names rather than none.
	if dst != nil {
		if err := ndir.setEntryLocked(nbase, dst.ino, src.ino, ft); err != nil {
			return err
		}
	} else if err := ndir.addEntryLocked(nbase, src.ino, ft); err != nil {
		return err
	}
	if _, err := odir.removeEntryLocked(obase, src.ino); err != nil {
		// Undo the new name.
		if dst != nil {
			ndir.setEntryLocked(nbase, src.ino, dst.ino, v.entryType(dst.n.in.Mode))
		} else {
			ndir.removeEntryLocked(nbase, src.ino)
		}
		return err
	}
	src.n.in.Ctime = now()
	if srcDir {
		if !same {
			if err := src.setDotDotLocked(ndir.ino); err != nil {
				return err
			}
		}
		decLink(odir.n)
		if dst == nil {
			v.incDirLink(ndir.n)
		}
	}
	if err := v.writeInodeLocked(src.n); err != nil {
		return err
	}
	if err := v.writeInodeLocked(odir.n); err != nil {
		return err
	}
	if !same {
		ndir.touchLocked()
		if err := v.writeInodeLocked(ndir.n); err != nil {
			return err
		}
	}
	if dst != nil {
		if dst.in.IsDir() {
			dst.n.in.LinksCount = 0
		} else {
			dst.n.in.LinksCount--
		}
		return v.releaseLinkLocked(dst.n, dstInUse)
	}
	return nil
}

// isUnder reports whether directory ino lies strictly below directory
// anc, following ".." entries up to the root.
func (v *Volume) isUnder(ino, anc uint32) (bool, error) {
	for hops := 0; ino != layout.RootIno; hops++ {
		if hops > 1<<16 {
			return false, fmt.Errorf("directory inode %d: \"..\" chain does not reach the root: %w", ino, ErrCorrupt)
		}
		f, err := v.inodeFile(ino, "..")
		if err != nil {
			return false, err
		}
		e, err := f.lookupName("..")
		if err != nil {
			return false, fmt.Errorf("directory inode %d has no \"..\": %w", ino, err)
		}
		if e.Inode == anc {
			return true, nil
		}
		ino = e.Inode
	}
	return false, nil
}

// setDotDotLocked points directory d's ".." at parent.
func (d *File) setDotDotLocked(parent uint32) error {
	if d.m == nil {
		return d.setInlineDotDotLocked(parent)
	}
	buf := make([]byte, d.v.bs)
	ok, err := d.dirBlock(0, buf)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("directory inode %d: block 0 not mapped: %w", d.ino, ErrCorrupt)
	}
	if string(buf[0x14:0x16]) != ".." || buf[0x12] != 2 || string(buf[8:9]) != "." {
		return fmt.Errorf("directory inode %d: block 0 does not start with . and ..: %w", d.ino, ErrCorrupt)
	}
	binary.LittleEndian.PutUint32(buf[12:], parent)
	return d.writeBlockRawLocked(0, buf)
}

// writeBlockRawLocked writes directory block lblk, refreshing its
// checksum: the linear tail, or for an htree root or node the dx_tail.
func (d *File) writeBlockRawLocked(lblk uint64, b []byte) error {
	v := d.v
	if v.csum && v.isDxDir(d.in) && !layout.HasDirTail(b) {
		if err := d.setDxCsum(lblk, b); err != nil {
			return err
		}
	}
	return d.writeDirBlock(lblk, b)
}

// findEntry locates name (naming ino when ino != 0) in directory d: the
// logical block (read into buf), the entry's offset and the offset of the
// entry before it in the block (-1 for the first).
func (d *File) findEntry(name string, ino uint32, buf []byte) (lblk uint64, off, prev int, err error) {
	v := d.v
	hasFt := v.sb.HasIncompat(layout.IncompatFiletype)
	off, prev = -1, -1
	try := func(blk uint64) (bool, error) {
		ok, err := d.dirBlock(blk, buf)
		if err != nil || !ok {
			return false, err
		}
		if v.isDxDir(d.in) && (blk == 0 || binary.LittleEndian.Uint32(buf) == 0 && layout.DecodeRecLen(binary.LittleEndian.Uint16(buf[4:]), len(buf)) == len(buf)) {
			return false, nil // index block
		}
		p := -1
		err = layout.DirBlock(buf, d.physOf(blk), d.ino, v.csum && layout.HasDirTail(buf), hasFt, blk == 0, func(e layout.DirEntry) error {
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
	if v.isDxDir(d.in) {
		err = d.dxWalk(name, func(blk uint64) (bool, error) { return try(blk) })
	} else {
		err = d.dirRuns(d.in.Size/uint64(v.bs), func(blk, n uint64) error {
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
	// try may have read later blocks after the match; re-read the match.
	if _, err := d.dirBlock(lblk, buf); err != nil {
		return 0, 0, 0, err
	}
	return lblk, off, prev, nil
}

// removeEntryLocked deletes the entry name (-> ino) from directory d (lock
// held) as ext4_generic_delete_entry does: its record joins the previous
// entry's, or, first in its block, its inode becomes 0.
func (d *File) removeEntryLocked(name string, ino uint32) (uint64, error) {
	le := binary.LittleEndian
	buf := make([]byte, d.v.bs)
	lblk, off, prev, err := d.findEntry(name, ino, buf)
	if err != nil {
		return 0, err
	}
	rec := layout.DecodeRecLen(le.Uint16(buf[off+4:]), len(buf))
	if prev >= 0 {
		prevLen := layout.DecodeRecLen(le.Uint16(buf[prev+4:]), len(buf))
		le.PutUint16(buf[prev+4:], layout.EncodeRecLen(prevLen+rec, len(buf)))
		clear(buf[off : off+layout.DirEntryHeaderLen+int(buf[off+6])])
	} else {
		le.PutUint32(buf[off:], 0)
	}
	return lblk, d.writeDirBlock(lblk, buf)
}

// setEntryLocked points the existing entry name (-> oldIno) at newIno.
func (d *File) setEntryLocked(name string, oldIno, newIno uint32, ft uint8) error {
	buf := make([]byte, d.v.bs)
	lblk, off, _, err := d.findEntry(name, oldIno, buf)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(buf[off:], newIno)
	if d.v.sb.HasIncompat(layout.IncompatFiletype) {
		buf[off+7] = ft
	}
	return d.writeDirBlock(lblk, buf)
}

// Chmod sets the permission bits (and setuid, setgid, sticky) of the file
// at name, following symlinks.
func (v *Volume) Chmod(name string, mode fs.FileMode) error {
	return v.setattr("chmod", name, func(in *layout.Inode) {
		in.Mode = in.Mode&layout.ModeFmt | unixMode(mode)
	})
}

// Chown sets the owner and group of the file at name, following symlinks.
// A negative id leaves that one unchanged.
func (v *Volume) Chown(name string, uid, gid int) error {
	return v.setattr("chown", name, chown(uid, gid))
}

// Lchown is Chown without following a final symlink.
func (v *Volume) Lchown(name string, uid, gid int) error {
	return v.setattrNoFollow("lchown", name, chown(uid, gid))
}

// Chtimes sets the access and modification times (nanoseconds kept) of
// the file at name, following symlinks. A zero time leaves that one
// unchanged. The change time becomes now; the creation time is kept.
func (v *Volume) Chtimes(name string, atime, mtime time.Time) error {
	return v.setattr("chtimes", name, setTimes(atime, mtime))
}

// Lchtimes is Chtimes without following a final symlink.
func (v *Volume) Lchtimes(name string, atime, mtime time.Time) error {
	return v.setattrNoFollow("lchtimes", name, setTimes(atime, mtime))
}

func setTimes(atime, mtime time.Time) func(*layout.Inode) {
	return func(in *layout.Inode) {
		if !atime.IsZero() {
			in.Atime = layout.TimestampOf(atime)
		}
		if !mtime.IsZero() {
			in.Mtime = layout.TimestampOf(mtime)
		}
	}
}

func (v *Volume) setattr(op, name string, fn func(*layout.Inode)) error {
	return v.setattrFollow(op, name, true, fn)
}

func (v *Volume) setattrNoFollow(op, name string, fn func(*layout.Inode)) error {
	return v.setattrFollow(op, name, false, fn)
}

func (v *Volume) setattrFollow(op, name string, follow bool, fn func(*layout.Inode)) error {
	v.beginOp()
	err := v.setattrOp(name, follow, fn)
	if err = v.endOpErr(err); err != nil {
		return &fs.PathError{Op: op, Path: name, Err: err}
	}
	return nil
}

func (v *Volume) setattrOp(name string, follow bool, fn func(*layout.Inode)) error {
	err := v.writableNS()
	var f *File
	if err == nil {
		f, err = v.resolve(name, follow)
	}
	if err == nil {
		f.n.mu.Lock()
		fn(f.n.in)
		f.n.in.Ctime = now()
		err = v.writeInodeLocked(f.n)
		f.n.mu.Unlock()
	}
	return err
}
