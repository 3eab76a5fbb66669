package ext4io

import (
	"fmt"
	"io/fs"
	"time"

	"github.com/ext4io/ext4io/layout"
)

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
		// Out of the inode's range, a time is clamped (as Linux's
		// timestamp_truncate), not wrapped by the encoding.
		if !atime.IsZero() {
			in.Atime = layout.TimestampOf(atime).Clamp(in.TimestampMax())
		}
		if !mtime.IsZero() {
			in.Mtime = layout.TimestampOf(mtime).Clamp(in.TimestampMax())
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
	if err := v.beginOp(); err != nil {
		return &fs.PathError{Op: op, Path: name, Err: err}
	}
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
		v.applyTouchLocked(f.n) // a pending write time is older than fn's
		fn(f.n.in)
		f.n.in.Ctime = now()
		err = v.writeInodeLocked(f.n)
		f.n.mu.Unlock()
	}
	return err
}

// Chmod sets the file's permission bits (and setuid, setgid, sticky), as
// os.File.Chmod does.
func (f *File) Chmod(mode fs.FileMode) error {
	return f.setattr("chmod", func(in *layout.Inode) {
		in.Mode = in.Mode&layout.ModeFmt | unixMode(mode)
	})
}

// Chown sets the file's owner and group; a negative id leaves that one
// unchanged (os.File.Chown).
func (f *File) Chown(uid, gid int) error {
	return f.setattr("chown", chown(uid, gid))
}

// Chtimes sets the file's access and modification times as Volume.Chtimes
// does (futimens); it works on a file whose last name is gone.
func (f *File) Chtimes(atime, mtime time.Time) error {
	return f.setattr("chtimes", setTimes(atime, mtime))
}

// Accessed sets the file's access time to t and leaves its change time,
// as a read does on Linux (touch_atime), for callers that keep atime
// (the FUSE server applies relatime).
func (f *File) Accessed(t time.Time) error {
	return f.setattrCtime("atime", setTimes(t, time.Time{}), false)
}

// setattr changes f's inode with fn in one operation, and its ctime to now.
func (f *File) setattr(op string, fn func(*layout.Inode)) error {
	return f.setattrCtime(op, fn, true)
}

func (f *File) setattrCtime(op string, fn func(*layout.Inode), ctime bool) error {
	if err := f.checkOpen(op); err != nil {
		return err
	}
	v := f.v
	if err := f.checkNotSystem(); err != nil {
		return &fs.PathError{Op: op, Path: f.name, Err: err}
	}
	if err := v.beginOp(); err != nil {
		return &fs.PathError{Op: op, Path: f.name, Err: err}
	}
	err := v.writableNS()
	if err == nil {
		f.n.mu.Lock()
		if err = f.closedLocked(); err == nil {
			v.applyTouchLocked(f.n) // a pending write time is older than fn's
			fn(f.n.in)
			if ctime {
				f.n.in.Ctime = now()
			}
			if !f.n.freed {
				// A freed inode (a removed directory still open)
				// changes in memory only, as an unlinked inode's would
				// until its last close on Linux.
				err = v.writeInodeLocked(f.n)
			}
		}
		f.n.mu.Unlock()
	}
	if err = v.endOpErr(err); err != nil {
		return &fs.PathError{Op: op, Path: f.name, Err: err}
	}
	return nil
}

// chown returns the inode change of Chown and Lchown: the ids (negative
// ones unchanged) and, on a non-directory, setuid and a group-executable
// setgid cleared, as Linux's chown_common asks notify_change to do for
// every caller, root too.
func chown(uid, gid int) func(*layout.Inode) {
	return func(in *layout.Inode) {
		if uid >= 0 {
			in.UID = uint32(uid)
		}
		if gid >= 0 {
			in.GID = uint32(gid)
		}
		if !in.IsDir() {
			in.Mode &^= 0o4000
			if in.Mode&0o2010 == 0o2010 {
				in.Mode &^= 0o2000
			}
		}
	}
}

// checkNotSystem refuses a change through f to an inode of the filesystem
// itself (systemInode: the journal, the bad-blocks and resize inodes, an
// xattr value inode, ...), which OpenIno opens read-only: the volume
// writes those, and their mode, owner, times and xattrs are not the
// caller's to set (e2fsck checks the reserved ones).
func (f *File) checkNotSystem() error {
	if f.v.systemInode(f.ino, f.n) {
		return fmt.Errorf("inode %d belongs to the filesystem: %w", f.ino, ErrPermission)
	}
	return nil
}
