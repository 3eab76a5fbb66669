package ext4io

import (
	"fmt"
	"os"
)

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
	if a.n == b.n {
		return nil // two names of one inode: nothing to swap
	}
	aDir, bDir := a.in.IsDir(), b.in.IsDir()
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
	if !same {
		if aDir {
			if err := a.setDotDotLocked(ndir.ino); err != nil {
				return err
			}
		}
		if bDir {
			if err := b.setDotDotLocked(odir.ino); err != nil {
				return err
			}
		}
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
