package ext4io

import (
	"io/fs"
	"os"
	"strings"

	"github.com/ext4io/ext4io/layout"
)

// Creating relative to an open directory, as openat(2) and mkdirat(2)
// with a directory descriptor do: the directory is not found again by
// its path, so a tree copied in (ext4io mkfs -d) costs one name lookup
// per file rather than a walk from the root.

// CreateAt creates the regular file name, with permission bits perm, in
// the directory d and opens it for reading and writing: as
// OpenFile(dir+"/"+name, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm) where d
// was opened from dir, but without resolving dir again. name is one path
// element (ErrInvalid otherwise); an existing name, a symlink, "." or ".."
// too, fails with ErrExist, an empty name and a directory removed since d
// was opened with ErrNotFound, as openat(2) fails. Errors are
// *fs.PathError.
func (d *File) CreateAt(name string, perm fs.FileMode) (*File, error) {
	full := d.childName(name)
	if d == nil || d.v == nil || d.n == nil {
		return nil, &fs.PathError{Op: "open", Path: full, Err: errNotOpen}
	}
	f, err := d.v.openTracked(func() (*File, error) { return d.createAt(name, perm) })
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: full, Err: err}
	}
	f.name, f.flag = full, os.O_RDWR
	return f, nil
}

func (d *File) createAt(name string, perm fs.FileMode) (*File, error) {
	v := d.v
	if err := d.dirAt(name); err != nil {
		return nil, err
	}
	var f *File
	err := v.op(func() error {
		dir, err := d.extentDir()
		if err == nil {
			f, err = v.createIn(dir, name, layout.ModeReg|unixMode(perm))
		}
		return err
	})
	return f, err
}

// MkdirAt makes the directory name, with permission bits perm and the
// sticky bit (setuid and setgid as Mkdir), in the directory d and opens
// it for reading: as Mkdir(dir+"/"+name, perm) and Open where d was
// opened from dir, but without resolving dir again. name is one path
// element (ErrInvalid otherwise); an existing name, "." or ".." too,
// fails with ErrExist, an empty name and a directory removed since d was
// opened with ErrNotFound, as mkdirat(2) fails. Errors are *fs.PathError.
func (d *File) MkdirAt(name string, perm fs.FileMode) (*File, error) {
	full := d.childName(name)
	f, err := d.mkdirAt(name, perm)
	if err != nil {
		return nil, &fs.PathError{Op: "mkdir", Path: full, Err: err}
	}
	f.name, f.flag = full, os.O_RDONLY
	return f, nil
}

func (d *File) mkdirAt(name string, perm fs.FileMode) (*File, error) {
	if err := d.dirAt(name); err != nil {
		return nil, err
	}
	v := d.v
	v.fcIneligible("mkdir") // fast commits cannot express it (fcwrite.go)
	var f *File
	err := v.op(func() error {
		err := v.writableNS()
		var dir *File
		if err == nil {
			dir, err = d.extentDir()
		}
		if err == nil {
			f, err = v.mkdirIn(dir, name, perm)
		}
		return err
	})
	return f, err
}

// dirAt checks that d is an open directory of a writable volume in which
// name, one path element, can be made: the checks parentDir makes of a
// path's parent and last element.
func (d *File) dirAt(name string) error {
	if d == nil || d.v == nil || d.n == nil {
		return errNotOpen
	}
	if d.closed.Load() {
		return ErrClosed
	}
	v := d.v
	if err := v.checkOpen(); err != nil {
		return err
	}
	if v.alloc == nil {
		return ErrReadOnly
	}
	if !d.in.IsDir() {
		return ErrNotDir
	}
	if err := dotNameErr(name, name, opCreate); err != nil {
		return err
	}
	return checkName(name)
}

// extentDir converts the directory d if it is inline (inside an
// operation, as parentOnly does) and returns a File of it as it is now.
func (d *File) extentDir() (*File, error) {
	if err := d.ensureDirNotInline(); err != nil {
		return nil, err
	}
	dir := newFile(d.v, d.n, d.ino, d.name)
	if dir.m == nil || dir.m.tree == nil {
		return nil, errBlockMappedDir(d.name, d.ino)
	}
	return dir, nil
}

// childName is the path of name in directory d, for errors and the new
// File's Name.
func (d *File) childName(name string) string {
	if d == nil {
		return name
	}
	return strings.TrimRight(d.name, "/") + "/" + name
}
