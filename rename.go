package ext4io

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/ext4io/ext4io/internal/errs"
	"github.com/ext4io/ext4io/layout"
)

// renameMu serializes renames (Linux's s_vfs_rename_mutex): ancestry
// checks need a tree that does not change shape meanwhile.
var renameMu sync.Mutex

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

// renameEnds checks the last names of a rename once both parents are
// found and before either name is looked up, as Linux's do_renameat2: an
// empty path is ErrNotFound; ".", ".." or the root at either end is
// ErrBusy, except that with RENAME_NOREPLACE such a newname is ErrExist.
func renameEnds(oldname, obase, newname, nbase string, noReplace bool) error {
	for _, n := range [2]string{oldname, newname} {
		if n == "" {
			return ErrNotFound
		}
	}
	if obase == "" || obase == "." || obase == ".." {
		return fmt.Errorf("cannot rename %q: %w", oldname, ErrBusy)
	}
	if nbase == "" || nbase == "." || nbase == ".." {
		if noReplace {
			return fmt.Errorf("cannot rename onto %q: %w", newname, ErrExist)
		}
		return fmt.Errorf("cannot rename onto %q: %w", newname, ErrBusy)
	}
	return nil
}

// rename renames oldname; with noReplace an existing newname fails with
// ErrExist (RENAME_NOREPLACE).
func (v *Volume) rename(oldname, newname string, noReplace bool) error {
	v.fcIneligible("rename") // fast commits cannot express it (fcwrite.go)
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
	if err := renameEnds(oldname, obase, newname, nbase, noReplace); err != nil {
		return err
	}
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
	if !srcDir && (strings.HasSuffix(oldname, "/") || strings.HasSuffix(newname, "/")) {
		return ErrNotDir // a name ending in "/" names a directory
	}
	var dst *File
	if e, err := ndir.lookupName(nbase); err == nil {
		if noReplace {
			return ErrExist
		}
		if e.Inode == src.ino {
			return nil
		}
		if dst, err = v.entryFile(ndir.ino, e.Inode, nbase); err != nil {
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
	src.n.mu.Lock()
	defer src.n.mu.Unlock()
	dstInUse := false
	if dst != nil {
		dst.n.mu.Lock()
		defer dst.n.mu.Unlock()
		// Under dst's lock, as unlink checks it (trackOpen).
		dstInUse = !dst.in.IsDir() && v.inodeInUse(dst.ino)
		if srcDir {
			if err := dst.checkEmpty(); err != nil {
				return err
			}
		}
		if dst.in.IsDir() || dst.n.in.LinksCount == 1 && !dstInUse {
			if err := v.checkEvictLocked(dst.n); err != nil {
				return err
			}
		}
	}
	var dotdot *dotDotUpdate
	if srcDir && !same {
		if dotdot, err = src.prepareDotDotLocked(ndir.ino); err != nil {
			return err
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
		if dotdot != nil {
			if err := dotdot.write(); err != nil {
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
		if errors.Is(err, ErrNotFound) || err == nil && e.Inode == 0 {
			// Every directory has a "..": ext4_get_parent's "bad parent
			// inode number".
			return false, &errs.CorruptError{What: "directory", Ino: ino, Off: -1, Msg: "no \"..\" entry"}
		}
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

// dotDotUpdate is a directory's ".." change made ready before a rename
// changes anything: block 0 read, parsed and checked, the new parent
// written into a copy (checksum too), so that what is left, write, fails
// only for I/O.
type dotDotUpdate struct {
	f      *File
	parent uint32
	buf    []byte // block 0 as it will be written; nil for an inline directory
}

// prepareDotDotLocked reads and checks what pointing directory f's ".."
// at parent changes (f.n.mu held): a damaged ".." fails here, while the
// rename can still refuse whole.
func (f *File) prepareDotDotLocked(parent uint32) (*dotDotUpdate, error) {
	u := &dotDotUpdate{f: f, parent: parent}
	if f.m == nil {
		n := f.n
		if len(n.inl) < layout.InlineDirParentLen || n.in.Flags&layout.InodeFlagInlineData == 0 {
			return nil, fmt.Errorf("directory inode %d: neither mapped nor inline: %w", f.ino, ErrCorrupt)
		}
		return u, nil
	}
	buf := make([]byte, f.v.bs)
	ok, err := f.dirBlock(0, buf)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("directory inode %d: block 0 not mapped: %w", f.ino, ErrCorrupt)
	}
	// The checksum and entries as a lookup checks them.
	if err := f.leafEntries(0, buf, func(layout.DirEntry) error { return nil }); err != nil {
		return nil, err
	}
	if !layout.SetDirDotDot(buf, parent) {
		return nil, fmt.Errorf("directory inode %d: block 0 does not start with . and ..: %w", f.ino, ErrCorrupt)
	}
	if f.v.csum && f.v.isDxDir(f.in) && !layout.HasDirTail(buf) {
		if err := f.setDxCsum(0, buf); err != nil {
			return nil, err
		}
	}
	u.buf = buf
	return u, nil
}

// write makes the prepared change; the caller writes the inode.
func (u *dotDotUpdate) write() error {
	f := u.f
	if u.buf == nil {
		return f.setInlineDotDotLocked(u.parent)
	}
	if err := f.writeDirBlock(0, u.buf); err != nil {
		return err
	}
	f.n.dotdot.Store(u.parent)
	return nil
}

// Flags of Rename2, with the values of Linux's renameat2(2) flags.
const (
	// RENAME_NOREPLACE makes Rename2 fail with ErrExist (EEXIST) when
	// newname exists, instead of replacing it.
	RENAME_NOREPLACE = 1 << 0
	// RENAME_EXCHANGE swaps oldname and newname, which must both exist;
	// they may be of different types (a directory and a file).
	RENAME_EXCHANGE = 1 << 1
)

// Rename2 is Rename with the flags of Linux's renameat2(2):
// RENAME_NOREPLACE or RENAME_EXCHANGE (0 is Rename). The name says what
// a Linux programmer looks for (renameat2, unix.Renameat2); the flags keep
// the kernel's names and values, so code can pass unix.RENAME_NOREPLACE
// unchanged. Other flags, or both together, fail with ErrInvalid.
// Errors are *os.LinkError, as Rename's.
func (v *Volume) Rename2(oldname, newname string, flags uint) error {
	var err error
	switch flags {
	case 0:
		return v.Rename(oldname, newname)
	case RENAME_NOREPLACE:
		err = v.op(func() error { return v.rename(oldname, newname, true) })
	case RENAME_EXCHANGE:
		err = v.op(func() error { return v.exchange(oldname, newname) })
	default:
		err = fmt.Errorf("rename flags %#x: %w", flags, ErrInvalid)
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	return nil
}

// exchange swaps the inodes oldname and newname name (RENAME_EXCHANGE).
// Locking is rename's: renameMu, the directories ancestor first, then the
// two inodes.
func (v *Volume) exchange(oldname, newname string) error {
	v.fcIneligible("rename") // fast commits cannot express it (fcwrite.go)
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
	if err := renameEnds(oldname, obase, newname, nbase, false); err != nil {
		return err
	}
	if err := checkName(obase); err != nil {
		return err
	}
	a, err := odir.lookupChild(obase)
	if err != nil {
		return err
	}
	if err := checkName(nbase); err != nil {
		return err
	}
	b, err := ndir.lookupChild(nbase)
	if err != nil {
		return err
	}
	aDir, bDir := a.in.IsDir(), b.in.IsDir()
	if !aDir && strings.HasSuffix(oldname, "/") || !bDir && strings.HasSuffix(newname, "/") {
		return ErrNotDir // a name ending in "/" names a directory
	}
	if a.n == b.n {
		return nil // two names of one inode: nothing to swap
	}
	if !same {
		// Neither may move into its own subtree.
		for _, c := range []struct {
			d   *File
			dst *File
		}{{a, ndir}, {b, odir}} {
			if !c.d.in.IsDir() {
				continue
			}
			if c.d.ino == c.dst.ino {
				return fmt.Errorf("cannot move a directory into itself: %w", ErrInvalid)
			}
			under, err := v.isUnder(c.dst.ino, c.d.ino)
			if err != nil {
				return err
			}
			if under {
				return fmt.Errorf("cannot move a directory into its own subtree: %w", ErrInvalid)
			}
		}
		if aDir && !bDir && v.dirLinkMax(ndir.n) || bDir && !aDir && v.dirLinkMax(odir.n) {
			return ErrTooManyLinks
		}
	} else if a.n == odir.n || b.n == odir.n {
		return fmt.Errorf("cannot exchange a directory with its entry: %w", ErrInvalid)
	}
	a.n.mu.Lock()
	defer a.n.mu.Unlock()
	b.n.mu.Lock()
	defer b.n.mu.Unlock()
	// Both ".." changes are read and checked before the first entry
	// changes: a damaged one refuses the swap whole.
	var dotdots []*dotDotUpdate
	if !same {
		for _, c := range []struct {
			d      *File
			parent uint32
		}{{a, ndir.ino}, {b, odir.ino}} {
			if !c.d.in.IsDir() {
				continue
			}
			u, err := c.d.prepareDotDotLocked(c.parent)
			if err != nil {
				return err
			}
			dotdots = append(dotdots, u)
		}
	}
	aft, bft := v.entryType(a.n.in.Mode), v.entryType(b.n.in.Mode)
	if err := odir.setEntryLocked(obase, a.ino, b.ino, bft); err != nil {
		return err
	}
	if err := ndir.setEntryLocked(nbase, b.ino, a.ino, aft); err != nil {
		odir.setEntryLocked(obase, b.ino, a.ino, aft) // undo
		return err
	}
	t := now()
	a.n.in.Ctime, b.n.in.Ctime = t, t
	for _, u := range dotdots {
		if err := u.write(); err != nil {
			return err
		}
	}
	if !same {
		switch {
		case aDir && !bDir:
			decLink(odir.n)
			v.incDirLink(ndir.n)
		case bDir && !aDir:
			decLink(ndir.n)
			v.incDirLink(odir.n)
		}
	}
	for _, n := range []*inode{a.n, b.n} {
		if err := v.writeInodeLocked(n); err != nil {
			return err
		}
	}
	odir.touchLocked()
	if err := v.writeInodeLocked(odir.n); err != nil {
		return err
	}
	if !same {
		ndir.touchLocked()
		return v.writeInodeLocked(ndir.n)
	}
	return nil
}
