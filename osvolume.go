package ext4io

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/ext4io/ext4io/internal/errs"
	"github.com/ext4io/ext4io/layout"
)

// The os surface of Volume: OpenFile with os's flags, Create that
// truncates, Remove, RemoveAll, MkdirAll, ReadFile, WriteFile, Truncate
// and ReadDir sorted by name, each failing as the os function does (an
// *fs.PathError with the op and the path as given, wrapping an error
// that matches the syscall.Errno os would report).
//
// ext4io applies no umask: a mode passed in is the mode the inode gets
// (os's are masked by the process umask).

// OpenFile opens the file at name as os.OpenFile does. flag combines one
// of os.O_RDONLY, os.O_WRONLY and os.O_RDWR with os.O_CREATE, os.O_EXCL,
// os.O_TRUNC, os.O_APPEND, os.O_SYNC and O_DIRECT; perm is the mode of a
// file O_CREATE makes (no umask applies). A final symlink is followed,
// also to create its missing target (without O_EXCL, as open(2) does).
// On Unix hosts syscall.O_DIRECTORY and syscall.O_NOFOLLOW act as in
// open(2): O_DIRECTORY fails with ErrNotDir (ENOTDIR) unless name is a
// directory, and with ErrInvalid beside O_CREATE; O_NOFOLLOW fails with
// ELOOP when the last element of name is a symlink.
//
// Writes through a File opened O_RDONLY fail with ErrBadFile (EBADF),
// reads through one opened O_WRONLY too. Opening a directory for writing
// fails with ErrIsDir; opening for writing on a read-only volume with
// ErrReadOnly.
//
// O_DIRECT makes ReadAt and WriteAt (and Read and Write) direct I/O:
// offsets and lengths must be multiples of the device's logical block size
// (ErrInvalid otherwise), and data moves between the caller's buffer and
// the device without the page cache (dirty cached pages of the range are
// written back first; reads of a file with cached pages copy them).
// ReadFrom and WriteTo, which io.Copy uses, align by themselves.
func (v *Volume) OpenFile(name string, flag int, perm fs.FileMode) (*File, error) {
	f, err := v.openTracked(func() (*File, error) { return v.openFile(name, flag, perm, 0) })
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	f.name, f.flag = name, flag&^O_DIRECT
	if flag&O_DIRECT != 0 && f.in.IsReg() {
		f.direct = true
		f.n.mu.share() // direct I/O takes the inode lock shared from many goroutines
	}
	if flag&os.O_TRUNC != 0 && f.in.IsReg() {
		t := f.bufferedTwin()
		t.flag = os.O_RDWR
		if err := t.Truncate(0); err != nil {
			f.Close() // untracks it
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
	}
	return f, nil
}

// openTracked runs open and keeps the File it returns open (trackOpen).
// When the File's inode was freed before trackOpen counted it, its last
// name went meanwhile: open runs again, as the open would have run after
// the removal (maxOpenRetries times at most, then ErrNotFound).
func (v *Volume) openTracked(open func() (*File, error)) (*File, error) {
	for try := 0; ; try++ {
		f, err := open()
		if err != nil {
			return nil, err
		}
		if v.openHook != nil {
			v.openHook(f)
		}
		if v.trackOpen(f) {
			return f, nil
		}
		if try == maxOpenRetries {
			return nil, ErrNotFound
		}
	}
}

// maxOpenRetries bounds the lookups an open repeats when the inode it
// found is freed before trackOpen counts its File: each repeat follows a
// removal of the name by another goroutine.
const maxOpenRetries = 8

// trackOpen records f as open (trackFile), so that removing the inode's
// last name from now on makes it an orphan instead of freeing it, and
// reports whether the inode is still live (keptOpen).
func (v *Volume) trackOpen(f *File) bool {
	v.trackFile(f)
	return v.keptOpen(f)
}

// keptOpen reports whether the inode of f, just recorded as open, is
// still live. It is not when an unlink or rename freed it after the
// lookup that found f and before f was recorded: the remover checks
// inodeInUse under the inode's lock held exclusively until the inode is
// freed, so the freed flag read here under that lock after the record is
// either false for good or already set. f is marked closed then (the open
// Files drop it), and must not be used.
func (v *Volume) keptOpen(f *File) bool {
	f.n.mu.RLock()
	freed := f.n.freed
	f.n.mu.RUnlock()
	if freed {
		f.closed.Store(true)
	}
	return !freed
}

// openFile resolves (or with O_CREATE creates) the file OpenFile opens.
// hops counts the dangling symlinks followed to create their targets.
func (v *Volume) openFile(name string, flag int, perm fs.FileMode, hops int) (*File, error) {
	if err := v.checkOpen(); err != nil {
		return nil, err
	}
	write := flag&accMode != os.O_RDONLY
	if flag&oDirectory != 0 && flag&os.O_CREATE != 0 {
		return nil, ErrInvalid // as Linux since 6.4
	}
	follow := flag&oNoFollow == 0
	if flag&(os.O_CREATE|os.O_EXCL) == os.O_CREATE|os.O_EXCL {
		// O_EXCL: any name there, a symlink (even a loop) too, is EEXIST.
		if _, err := v.resolve(name, false); err == nil {
			return nil, ErrExist
		} else if !errors.Is(err, ErrNotFound) {
			return nil, err
		}
		if !strings.HasSuffix(name, "/") {
			// Nothing at name, not even a dangling symlink to follow:
			// create it (create fails with ErrExist should a name
			// appear meanwhile).
			return v.createFile(name, perm)
		}
	}
	if flag&(os.O_CREATE|os.O_EXCL) == os.O_CREATE {
		if f, ok, err := v.createOrOpen(name, perm); ok {
			return f, err
		}
	}
	for {
		f, lastMissing, err := v.resolveMissing(name, follow)
		if err == nil {
			switch {
			case flag&(os.O_CREATE|os.O_EXCL) == os.O_CREATE|os.O_EXCL:
				return nil, ErrExist
			case flag&oDirectory != 0 && !f.in.IsDir():
				return nil, ErrNotDir
			case f.in.IsSymlink():
				return nil, errLoop // O_NOFOLLOW
			case f.in.IsDir() && (write || flag&(os.O_CREATE|os.O_TRUNC) != 0):
				return nil, ErrIsDir
			case strings.HasSuffix(name, "/") && !f.in.IsDir():
				return nil, ErrNotDir
			case (write || flag&os.O_TRUNC != 0) && v.alloc == nil:
				return nil, ErrReadOnly
			}
			return f, nil
		}
		if flag&os.O_CREATE == 0 || !errors.Is(err, ErrNotFound) {
			return nil, err
		}
		if strings.HasSuffix(name, "/") {
			return nil, ErrIsDir
		}
		// A missing name, or a dangling symlink whose target O_CREATE
		// makes. A name missing itself needs no second look.
		var l *File
		lerr := ErrNotFound
		if !lastMissing {
			l, lerr = v.resolve(name, false)
		}
		if lerr == nil && l.in.IsSymlink() {
			if flag&os.O_EXCL != 0 {
				return nil, ErrExist
			}
			if hops++; hops > maxSymlinkHops {
				return nil, errLoop
			}
			target, err := l.readlink()
			if err != nil {
				return nil, err
			}
			if !path.IsAbs(target) {
				// Relative to the link's directory, walked as given:
				// cleaning "d/b/../a" would skip a symlink d/b.
				dir, _ := path.Split(strings.TrimRight(name, "/"))
				target = dir + target
			}
			return v.openFile(target, flag, perm, hops)
		}
		if lerr != nil && !errors.Is(lerr, ErrNotFound) {
			return nil, lerr
		}
		f, err = v.createFile(name, perm)
		if errors.Is(err, ErrExist) && flag&os.O_EXCL == 0 {
			continue // created meanwhile: open it
		}
		return f, err
	}
}

// createOrOpen is openFile's O_CREATE without O_EXCL in one look at the
// directory (as Linux's lookup_open under the directory's lock): it
// creates the file, or opens the regular file already there. ok false
// leaves the name to openFile's general walk, which also reports its
// errors: a read-only volume, a name ending in "/" or whose last
// element is not a plain name, a parent that does not resolve to an
// extent-mapped directory, or an entry that is not a regular file (a
// symlink to follow, a directory to refuse).
func (v *Volume) createOrOpen(name string, perm fs.FileMode) (f *File, ok bool, err error) {
	if v.alloc == nil || strings.HasSuffix(name, "/") {
		return nil, false, nil
	}
	dirName, base := path.Split(name)
	if checkName(base) != nil {
		return nil, false, nil
	}
	dir, err := v.resolveParent(dirName)
	if err != nil || !dir.in.IsDir() || dir.n.inline.live.Load() || dir.m == nil || dir.m.tree == nil {
		return nil, false, nil
	}
	var ino uint32
	var n *inode
	err = v.op(func() (err error) {
		f, ino, n, err = v.createOrLookup(dir, base, layout.ModeReg|unixMode(perm))
		return err
	})
	if f != nil || err != nil {
		return f, true, err
	}
	// An entry was there: open it as resolve would, if it is a regular
	// file.
	if f, err = v.fileOf(n, ino, base); err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, false, nil // removed since: the walk creates it again
		}
		return nil, true, err
	}
	if !f.in.IsReg() {
		return nil, false, nil
	}
	return f, true, nil
}

// createFile creates the regular file name with permission bits perm,
// as one operation (retried once for space, as op does).
func (v *Volume) createFile(name string, perm fs.FileMode) (*File, error) {
	if v.alloc == nil {
		return nil, ErrReadOnly
	}
	var f *File
	err := v.op(func() (err error) {
		f, err = v.create(name, layout.ModeReg|unixMode(perm))
		return err
	})
	return f, err
}

// Create creates or truncates the file at name, as os.Create does:
// OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o666).
//
// Inserts into linear directories take the first block with room; a
// full single-block directory is converted to an htree when dir_index is
// on, and inserts into htree directories split leaves and index nodes as
// Linux does.
func (v *Volume) Create(name string) (*File, error) {
	return v.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o666)
}

// Remove removes the file or empty directory at name, as os.Remove does.
func (v *Volume) Remove(name string) error {
	err := v.op(func() error { return v.unlink(name) })
	if err == nil {
		return nil
	}
	err1 := v.op(func() error { return v.rmdir(name) })
	if err1 == nil {
		return nil
	}
	// Both failed: report the error that says more, as os.Remove does.
	if !errors.Is(err1, ErrNotDir) {
		err = err1
	}
	return &fs.PathError{Op: "remove", Path: name, Err: err}
}

// RemoveAll removes name and everything it contains, as os.RemoveAll
// does: a missing name is no error, and the first error met is returned.
// A directory that contains itself (a hostile image's entry naming an
// ancestor) fails with an error matching ErrCorrupt instead of recursing
// for ever.
func (v *Volume) RemoveAll(name string) error {
	if name == "" {
		return nil
	}
	if name == "." || strings.HasSuffix(name, "/.") {
		return &fs.PathError{Op: "RemoveAll", Path: name, Err: ErrInvalid}
	}
	return v.removeAll(name, map[uint32]bool{})
}

// removeAll is RemoveAll; above holds the inode numbers of the
// directories name lies in, which it must not meet again.
func (v *Volume) removeAll(name string, above map[uint32]bool) error {
	err := v.Remove(name)
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	fi, serr := v.Lstat(name)
	if serr != nil {
		if errors.Is(serr, fs.ErrNotExist) {
			return nil
		}
		return serr
	}
	if !fi.IsDir() {
		return err
	}
	if above[fi.Ino] {
		return &fs.PathError{Op: "RemoveAll", Path: name, Err: &errs.CorruptError{What: "directory", Ino: fi.Ino, Off: -1,
			Msg: "the directory lies inside itself (an entry names an ancestor)"}}
	}
	ents, rerr := v.ReadDir(name)
	if rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
		return rerr
	}
	above[fi.Ino] = true
	var first error
	for _, e := range ents {
		if err := v.removeAll(strings.TrimRight(name, "/")+"/"+e.Name(), above); err != nil && first == nil {
			first = err
		}
	}
	delete(above, fi.Ino)
	err = v.Remove(name)
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return first
	}
	if first != nil {
		return first
	}
	return err
}

// MkdirAll makes the directory name and every missing parent with mode
// perm, as os.MkdirAll does. An existing directory is no error; an
// existing non-directory fails with ErrNotDir.
func (v *Volume) MkdirAll(name string, perm fs.FileMode) error {
	if fi, err := v.Stat(name); err == nil {
		if fi.IsDir() {
			return nil
		}
		return &fs.PathError{Op: "mkdir", Path: name, Err: ErrNotDir}
	}
	i := len(name)
	for i > 0 && name[i-1] == '/' {
		i--
	}
	j := i
	for j > 0 && name[j-1] != '/' {
		j--
	}
	if j > 1 {
		if err := v.MkdirAll(name[:j-1], perm); err != nil {
			return err
		}
	}
	if err := v.Mkdir(name, perm); err != nil {
		if fi, err1 := v.Lstat(name); err1 == nil && fi.IsDir() {
			return nil
		}
		return err
	}
	return nil
}

// ReadFile returns the contents of the file at name, as os.ReadFile does.
func (v *Volume) ReadFile(name string) ([]byte, error) {
	f, err := v.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var buf []byte
	if size := f.Size(); size > 0 && size < 1<<30 {
		buf = make([]byte, 0, size+1)
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// WriteFile writes data to the file at name, creating it with perm or
// truncating it first, as os.WriteFile does.
func (v *Volume) WriteFile(name string, data []byte, perm fs.FileMode) error {
	f, err := v.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err1 := f.Close(); err1 != nil && err == nil {
		err = err1
	}
	return err
}

// Truncate changes the size of the file at name, as os.Truncate does.
func (v *Volume) Truncate(name string, size int64) error {
	f, err := v.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			pe.Op = "truncate"
		}
		return err
	}
	defer f.Close()
	return f.Truncate(size)
}

// ReadDir returns the entries of the directory at name sorted by name,
// without "." and "..", as os.ReadDir does. Each entry's Info().Sys() is a
// *FileInfo (inode number and raw mode).
func (v *Volume) ReadDir(name string) ([]fs.DirEntry, error) {
	f, err := v.resolve(name, true)
	if err == nil {
		var ents []fs.DirEntry
		if ents, err = f.fsDirEntries(); err == nil {
			slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
			return ents, nil
		}
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: err}
}

// DirEntries returns the entries of the directory at name in on-disk
// order, without "." and "..", with their inode numbers and on-disk file
// types (what ReadDir returned before it sorted like os.ReadDir).
func (v *Volume) DirEntries(name string) ([]DirEntry, error) {
	f, err := v.resolve(name, true)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	ents, err := f.readDirAll()
	if err != nil {
		return nil, &fs.PathError{Op: "readdirent", Path: name, Err: err}
	}
	return ents, nil
}

// inheritGroup gives a new inode in directory dir (lock held) the
// directory's group when the directory is setgid, and a new directory the
// setgid bit too, as Linux's inode_init_owner does (BSD group semantics).
func inheritGroup(dir *File, in *layout.Inode) {
	if dir.in.Mode&0o2000 == 0 {
		return
	}
	in.GID = dir.in.GID
	if in.IsDir() {
		in.Mode |= 0o2000
	}
}
