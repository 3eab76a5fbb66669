package ext4io

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
)

// FS is a read-only io/fs view of a Volume. It implements fs.FS,
// fs.ReadDirFS, fs.StatFS and fs.ReadLinkFS, so fs.WalkDir, http.FS and
// testing/fstest.TestFS work on an image. Names follow io/fs rules
// (unrooted, slash-separated, no "." or ".." elements).
//
// An FS is safe for concurrent use.
type FS struct{ v *Volume }

var (
	_ fs.FS          = FS{}
	_ fs.ReadDirFS   = FS{}
	_ fs.StatFS      = FS{}
	_ fs.ReadLinkFS  = FS{}
	_ fs.ReadDirFile = (*File)(nil)
	_ io.ReaderAt    = (*File)(nil)
	_ io.Seeker      = (*File)(nil)
)

// FS returns the io/fs view of the volume.
func (v *Volume) FS() FS { return FS{v} }

func (fsys FS) check(op, name string) error {
	if !fs.ValidPath(name) {
		return &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	return nil
}

// Open opens the named file or directory, following symlinks.
func (fsys FS) Open(name string) (fs.File, error) {
	if err := fsys.check("open", name); err != nil {
		return nil, err
	}
	f, err := fsys.v.openTracked(func() (*File, error) { return fsys.v.resolve(name, true) })
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	f.name, f.flag = name, os.O_RDONLY
	return f, nil
}

// Stat returns the named file's metadata, following symlinks.
func (fsys FS) Stat(name string) (fs.FileInfo, error) {
	if err := fsys.check("stat", name); err != nil {
		return nil, err
	}
	f, err := fsys.v.resolve(name, true)
	if err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	f.name = path.Base(name)
	return f.info(), nil
}

// Lstat returns the named file's metadata without following a final symlink.
func (fsys FS) Lstat(name string) (fs.FileInfo, error) {
	if err := fsys.check("lstat", name); err != nil {
		return nil, err
	}
	f, err := fsys.v.resolve(name, false)
	if err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: name, Err: err}
	}
	f.name = path.Base(name)
	return f.info(), nil
}

// ReadLink returns the target of the named symlink.
func (fsys FS) ReadLink(name string) (string, error) {
	if err := fsys.check("readlink", name); err != nil {
		return "", err
	}
	return fsys.v.Readlink(name)
}

// ReadDir returns the named directory's entries sorted by name.
func (fsys FS) ReadDir(name string) ([]fs.DirEntry, error) {
	if err := fsys.check("readdir", name); err != nil {
		return nil, err
	}
	f, err := fsys.v.resolve(name, true)
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	ents, err := f.fsDirEntries()
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return ents, nil
}

func (f *File) fsDirEntries() ([]fs.DirEntry, error) {
	ents, err := f.readDirAll()
	if err != nil {
		return nil, err
	}
	out := make([]fs.DirEntry, 0, len(ents))
	for _, e := range ents {
		de := &fsDirEntry{v: f.v, e: e, dir: f}
		// The dirent's file type is a hint; the inode is the truth and
		// fs.DirEntry.Type must agree with Info().Mode().Type().
		fi, err := de.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since the scan, as os.ReadDir skips it
		}
		if err != nil {
			return nil, err
		}
		de.typ = fi.Mode().Type()
		out = append(out, de)
	}
	return out, nil
}

// dirReader holds a directory's entries for File.ReadDir.
type dirReader struct {
	ents []fs.DirEntry
	pos  int
}

// ReadDir reads directory entries (fs.ReadDirFile). With n > 0 it returns
// at most n entries and io.EOF at the end; with n <= 0 it returns the rest.
func (f *File) ReadDir(n int) ([]fs.DirEntry, error) {
	if err := f.checkOpen("readdir"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.in.IsDir() {
		return nil, &fs.PathError{Op: "readdir", Path: f.name, Err: ErrNotDir}
	}
	f.n.mu.RLock()
	removed := f.n.removedDirLocked()
	f.n.mu.RUnlock()
	if removed {
		return nil, &fs.PathError{Op: "readdir", Path: f.name, Err: ErrNotFound} // removed since opened
	}
	if f.dir == nil {
		ents, err := f.fsDirEntries()
		if err != nil {
			return nil, &fs.PathError{Op: "readdir", Path: f.name, Err: err}
		}
		f.dir = &dirReader{ents: ents}
	}
	rest := f.dir.ents[f.dir.pos:]
	if n <= 0 {
		f.dir.pos = len(f.dir.ents)
		return rest, nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	if n > len(rest) {
		n = len(rest)
	}
	f.dir.pos += n
	return rest[:n], nil
}

type fsDirEntry struct {
	v   *Volume
	e   DirEntry
	dir *File // the directory e was read from
	typ fs.FileMode
}

func (d *fsDirEntry) Name() string      { return d.e.Name }
func (d *fsDirEntry) IsDir() bool       { return d.typ.IsDir() }
func (d *fsDirEntry) Type() fs.FileMode { return d.typ }
func (d *fsDirEntry) String() string    { return fs.FormatDirEntry(d) }

// Info returns the metadata of the entry's inode. An entry removed since
// the directory was read fails with an *fs.PathError matching
// fs.ErrNotExist, as os's DirEntry.Info: its inode may be free by now
// (links count 0), which is corruption only while the entry still names
// it. A failure is therefore looked at again under the directory's lock,
// which removals take exclusively.
func (d *fsDirEntry) Info() (fs.FileInfo, error) {
	fi, err := d.info()
	if err == nil || d.dir == nil || d.e.Ino == d.dir.ino {
		return fi, err
	}
	d.dir.n.mu.RLock()
	defer d.dir.n.mu.RUnlock()
	e, lerr := d.dir.lookupName(d.e.Name)
	if errors.Is(lerr, ErrNotFound) || lerr == nil && e.Inode != d.e.Ino {
		return nil, &fs.PathError{Op: "lstat", Path: d.e.Name, Err: ErrNotFound}
	}
	// Still named (perhaps again, by a new inode of the same number).
	return d.info()
}

func (d *fsDirEntry) info() (fs.FileInfo, error) {
	n := d.v.cachedInode(d.e.Ino)
	if n != nil {
		return d.v.liveInfo(n, d.e.Ino, d.e.Name, true)
	}
	in, err := d.v.readInode(d.e.Ino)
	if err != nil {
		return nil, err
	}
	if err := checkLinked(d.e.Ino, in); err != nil {
		return nil, err
	}
	if err := checkSize(d.e.Ino, in); err != nil {
		return nil, err
	}
	return newFileInfo(d.v, d.e.Name, d.e.Ino, in), nil
}

func (fi *FileInfo) String() string { return fs.FormatFileInfo(fi) }

// isNotExist reports whether err means a missing file.
func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
