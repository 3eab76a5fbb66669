package ext4io

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/ext4io/ext4io/internal/errs"
)

// FileSystem is the os package as a value: the functions of os that work
// on paths, with the signatures os gives them, so that code written
// against it (a test, a tool) runs unchanged on an ext4 image
// (Volume.FileSystem) and on a host directory (OSFileSystem).
//
// The name says what it stands for: the file system os reaches through
// its package functions. (FS, the io/fs view, is read-only and follows
// io/fs's path rules; FileSystem writes and follows os's.) Paths are
// slash-separated and relative to the file system's root ("" names
// nothing, as in os, rather than the root); a mode passed in
// is the mode an image's inode gets, while a host's is masked by the
// process umask as os masks it.
//
// Errors are os's: *fs.PathError (*os.LinkError for Rename, Rename2, Link
// and Symlink) naming the op and the path as the caller gave it, matching
// fs.ErrNotExist, fs.ErrExist, fs.ErrPermission, ErrNotDir, ErrIsDir,
// ErrNotEmpty, ErrNameTooLong, ErrNoSpace and ErrReadOnly with errors.Is
// whichever implementation made them (they match the syscall.Errno too:
// OSFileSystem's errors wrap the host's Errno together with the ext4io
// sentinel for it).
type FileSystem interface {
	Create(name string) (FileHandle, error)
	Open(name string) (FileHandle, error)
	OpenFile(name string, flag int, perm fs.FileMode) (FileHandle, error)
	Mkdir(name string, perm fs.FileMode) error
	MkdirAll(name string, perm fs.FileMode) error
	Remove(name string) error
	RemoveAll(name string) error
	Rename(oldname, newname string) error
	// Rename2 is renameat2(2): flags RENAME_NOREPLACE or RENAME_EXCHANGE.
	Rename2(oldname, newname string, flags uint) error
	Link(oldname, newname string) error
	Symlink(oldname, newname string) error
	Readlink(name string) (string, error)
	// Mknod is mknod(2) with the type in mode's bits (Volume.Mknod).
	Mknod(name string, mode fs.FileMode, dev uint64) error
	Stat(name string) (fs.FileInfo, error)
	Lstat(name string) (fs.FileInfo, error)
	Chmod(name string, mode fs.FileMode) error
	Chown(name string, uid, gid int) error
	Lchown(name string, uid, gid int) error
	Chtimes(name string, atime, mtime time.Time) error
	Truncate(name string, size int64) error
	ReadDir(name string) ([]fs.DirEntry, error)
	ReadFile(name string) ([]byte, error)
	WriteFile(name string, data []byte, perm fs.FileMode) error
	Statfs() (Statfs, error)
}

// FileHandle is an open file of a FileSystem: the methods *os.File and
// *File share. (File is the concrete type of an image's files; a
// FileHandle is either.)
type FileHandle interface {
	io.Reader
	io.Writer
	io.StringWriter
	io.ReaderAt
	io.WriterAt
	io.Seeker
	io.Closer
	io.ReaderFrom
	io.WriterTo
	Name() string
	Stat() (fs.FileInfo, error)
	ReadDir(n int) ([]fs.DirEntry, error)
	Sync() error
	Truncate(size int64) error
	Chmod(mode fs.FileMode) error
	Chown(uid, gid int) error
}

var (
	_ FileHandle = (*File)(nil)
	_ FileHandle = (*os.File)(nil)
	_ FileSystem = volumeFS{}
	_ FileSystem = hostFS{}
)

// FileSystem returns v as a FileSystem. Its methods are v's; those that
// return a *File or *FileInfo return them as FileHandle and fs.FileInfo.
func (v *Volume) FileSystem() FileSystem { return volumeFS{v} }

type volumeFS struct{ *Volume }

func asHandle(f *File, err error) (FileHandle, error) {
	if err != nil {
		return nil, err
	}
	return f, nil
}

func asFileInfo(fi *FileInfo, err error) (fs.FileInfo, error) {
	if err != nil {
		return nil, err
	}
	return fi, nil
}

func (v volumeFS) Create(name string) (FileHandle, error) { return asHandle(v.Volume.Create(name)) }
func (v volumeFS) Open(name string) (FileHandle, error)   { return asHandle(v.Volume.Open(name)) }
func (v volumeFS) OpenFile(name string, flag int, perm fs.FileMode) (FileHandle, error) {
	return asHandle(v.Volume.OpenFile(name, flag, perm))
}
func (v volumeFS) Stat(name string) (fs.FileInfo, error)  { return asFileInfo(v.Volume.Stat(name)) }
func (v volumeFS) Lstat(name string) (fs.FileInfo, error) { return asFileInfo(v.Volume.Lstat(name)) }

// OSFileSystem returns the host directory dir as a FileSystem: each method
// calls the os function (or, for Mknod, Rename2 and Statfs, the system
// call) on dir + "/" + name, and reports errors with the name as given.
// It is meant for tests that run the same code on an image and on the
// host. Symlinks are resolved by the host: an absolute or escaping target
// leaves dir (use relative targets that stay inside). Rename is rename(2)
// (os.Rename refuses to replace a directory). Mknod, Rename2 and Statfs
// are Linux-only (ErrUnsupported elsewhere).
func OSFileSystem(dir string) FileSystem { return hostFS{strings.TrimRight(dir, "/") + "/"} }

type hostFS struct{ root string }

// path returns the host path of name. An empty name stays empty, so
// that it fails with ENOENT as it does in os rather than naming dir.
func (h hostFS) path(name string) string {
	if name == "" {
		return ""
	}
	return h.root + name
}

// fix rewrites the host paths in err back to the names the caller gave.
func (h hostFS) fix(err error, names ...string) error {
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case err == nil:
	case errors.As(err, &pe):
		pe.Path = h.unpath(pe.Path, names)
		pe.Err = hostErrno(pe.Err)
	case errors.As(err, &le):
		le.Old, le.New = h.unpath(le.Old, names), h.unpath(le.New, names)
		le.Err = hostErrno(le.Err)
	}
	return err
}

// hostErr is a host's syscall.Errno that also matches the ext4io
// sentinel for it, so that errors.Is(err, ErrNotDir) holds on both
// FileSystems. errors.As still finds the Errno.
type hostErr struct {
	errno    syscall.Errno
	sentinel error
}

func (e *hostErr) Error() string   { return e.errno.Error() }
func (e *hostErr) Unwrap() []error { return []error{e.errno, e.sentinel} }

// hostErrno wraps err in a hostErr if it is an Errno ext4io has a
// sentinel for.
func hostErrno(err error) error {
	errno, ok := err.(syscall.Errno)
	if !ok {
		return err
	}
	for _, s := range []error{ErrNotFound, ErrExist, ErrNotDir, ErrIsDir, ErrNotEmpty, ErrNameTooLong,
		ErrNoSpace, ErrReadOnly, ErrPermission, ErrBadFile, ErrInvalid, ErrTooManyLinks, errLoop, ErrBusy} {
		if s.(*errs.Errno).Errno == errno {
			return &hostErr{errno, s}
		}
	}
	return err
}

func (h hostFS) unpath(p string, names []string) string {
	for _, n := range names {
		if p == h.root+n {
			return n
		}
	}
	return strings.TrimPrefix(p, h.root)
}

func (h hostFS) file(f *os.File, name string, err error) (FileHandle, error) {
	if err != nil {
		return nil, h.fix(err, name)
	}
	return &hostFile{f, name, h}, nil
}

func (h hostFS) Create(name string) (FileHandle, error) {
	f, err := os.Create(h.path(name))
	return h.file(f, name, err)
}
func (h hostFS) Open(name string) (FileHandle, error) {
	f, err := os.Open(h.path(name))
	return h.file(f, name, err)
}
func (h hostFS) OpenFile(name string, flag int, perm fs.FileMode) (FileHandle, error) {
	f, err := os.OpenFile(h.path(name), flag, perm)
	return h.file(f, name, err)
}
func (h hostFS) Mkdir(name string, perm fs.FileMode) error {
	return h.fix(os.Mkdir(h.path(name), perm), name)
}
func (h hostFS) MkdirAll(name string, perm fs.FileMode) error {
	return h.fix(os.MkdirAll(h.path(name), perm), name)
}

func (h hostFS) Remove(name string) error {
	return h.fix(os.Remove(h.path(name)), name)
}
func (h hostFS) RemoveAll(name string) error {
	return h.fix(os.RemoveAll(h.path(name)), name)
}

// Rename is rename(2), as Volume.Rename: it replaces an empty directory,
// where os.Rename refuses to (EEXIST, a check Go adds for portability).
func (h hostFS) Rename(oldname, newname string) error {
	return h.fix(hostRename2(h.path(oldname), h.path(newname), 0), oldname, newname)
}
func (h hostFS) Rename2(oldname, newname string, flags uint) error {
	return h.fix(hostRename2(h.path(oldname), h.path(newname), flags), oldname, newname)
}
func (h hostFS) Link(oldname, newname string) error {
	return h.fix(os.Link(h.path(oldname), h.path(newname)), oldname, newname)
}

// Symlink makes newname point at oldname, which is stored as given.
func (h hostFS) Symlink(oldname, newname string) error {
	err := os.Symlink(oldname, h.path(newname))
	var le *os.LinkError
	if errors.As(err, &le) {
		le.New = newname
		le.Err = hostErrno(le.Err)
	}
	return err
}
func (h hostFS) Readlink(name string) (string, error) {
	s, err := os.Readlink(h.path(name))
	return s, h.fix(err, name)
}
func (h hostFS) Mknod(name string, mode fs.FileMode, dev uint64) error {
	return h.fix(hostMknod(h.path(name), mode, dev), name)
}
func (h hostFS) Stat(name string) (fs.FileInfo, error) {
	fi, err := os.Stat(h.path(name))
	return fi, h.fix(err, name)
}
func (h hostFS) Lstat(name string) (fs.FileInfo, error) {
	fi, err := os.Lstat(h.path(name))
	return fi, h.fix(err, name)
}
func (h hostFS) Chmod(name string, mode fs.FileMode) error {
	return h.fix(os.Chmod(h.path(name), mode), name)
}
func (h hostFS) Chown(name string, uid, gid int) error {
	return h.fix(os.Chown(h.path(name), uid, gid), name)
}
func (h hostFS) Lchown(name string, uid, gid int) error {
	return h.fix(os.Lchown(h.path(name), uid, gid), name)
}
func (h hostFS) Chtimes(name string, atime, mtime time.Time) error {
	return h.fix(os.Chtimes(h.path(name), atime, mtime), name)
}
func (h hostFS) Truncate(name string, size int64) error {
	return h.fix(os.Truncate(h.path(name), size), name)
}
func (h hostFS) ReadDir(name string) ([]fs.DirEntry, error) {
	ents, err := os.ReadDir(h.path(name))
	return ents, h.fix(err, name)
}
func (h hostFS) ReadFile(name string) ([]byte, error) {
	b, err := os.ReadFile(h.path(name))
	return b, h.fix(err, name)
}
func (h hostFS) WriteFile(name string, data []byte, perm fs.FileMode) error {
	return h.fix(os.WriteFile(h.path(name), data, perm), name)
}
func (h hostFS) Statfs() (Statfs, error) { return hostStatfs(h.root) }

// hostFile is an *os.File whose Name and errors carry the name given to
// the hostFS.
type hostFile struct {
	*os.File
	name string
	h    hostFS
}

func (f *hostFile) Name() string { return f.name }
func (f *hostFile) err(err error) error {
	return f.h.fix(err, f.name)
}
func (f *hostFile) Read(p []byte) (int, error) { n, err := f.File.Read(p); return n, f.err(err) }
func (f *hostFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	return n, f.err(err)
}
func (f *hostFile) WriteString(s string) (int, error) {
	n, err := f.File.WriteString(s)
	return n, f.err(err)
}
func (f *hostFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	return n, f.err(err)
}
func (f *hostFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	return n, f.err(err)
}
func (f *hostFile) Seek(off int64, whence int) (int64, error) {
	n, err := f.File.Seek(off, whence)
	return n, f.err(err)
}
func (f *hostFile) ReadFrom(r io.Reader) (int64, error) {
	n, err := f.File.ReadFrom(r)
	return n, f.err(err)
}
func (f *hostFile) WriteTo(w io.Writer) (int64, error) {
	n, err := f.File.WriteTo(w)
	return n, f.err(err)
}
func (f *hostFile) Stat() (fs.FileInfo, error) { fi, err := f.File.Stat(); return fi, f.err(err) }
func (f *hostFile) ReadDir(n int) ([]fs.DirEntry, error) {
	ents, err := f.File.ReadDir(n)
	return ents, f.err(err)
}
func (f *hostFile) Sync() error                  { return f.err(f.File.Sync()) }
func (f *hostFile) Truncate(size int64) error    { return f.err(f.File.Truncate(size)) }
func (f *hostFile) Chmod(mode fs.FileMode) error { return f.err(f.File.Chmod(mode)) }
func (f *hostFile) Chown(uid, gid int) error     { return f.err(f.File.Chown(uid, gid)) }
func (f *hostFile) Close() error                 { return f.err(f.File.Close()) }
