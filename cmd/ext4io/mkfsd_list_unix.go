//go:build unix

package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ext4io/ext4io/internal/errs"
)

// The walk and the read-ahead list a host directory through a descriptor
// of it and stat and open its entries by name relative to that (fstatat,
// openat): the kernel resolves one name per call instead of the whole
// path. A regular file is opened as it is listed and stat'ed through its
// descriptor (fstat), so its stat is the stat of the file the copy reads:
// no lstat before the open, and no check after it that the open found
// the file the lstat saw.

// maxDirFDs bounds how deep the directories listed through a descriptor
// nest: the listings on the current path each hold one open, and a
// deeper directory is listed by its path; a variable for tests.
var maxDirFDs = 128

// Stat_t of x/sys/unix and of syscall are the kernel's struct stat on
// every unix host: statInfo.Sys hands one out as the other. A host where
// their sizes differ does not compile.
var (
	_ [unsafe.Sizeof(unix.Stat_t{}) - unsafe.Sizeof(syscall.Stat_t{})]byte
	_ [unsafe.Sizeof(syscall.Stat_t{}) - unsafe.Sizeof(unix.Stat_t{})]byte
)

// statInfo is the fs.FileInfo of a host file stat'ed by descriptor or
// relative to one, as os.Lstat's: Sys returns a *syscall.Stat_t.
type statInfo struct {
	name string
	st   unix.Stat_t
}

func (fi *statInfo) Name() string       { return fi.name }
func (fi *statInfo) Size() int64        { return fi.st.Size }
func (fi *statInfo) ModTime() time.Time { return time.Unix(fi.st.Mtim.Unix()) }
func (fi *statInfo) IsDir() bool        { return fi.Mode().IsDir() }
func (fi *statInfo) Sys() any           { return (*syscall.Stat_t)(unsafe.Pointer(&fi.st)) }

func (fi *statInfo) Mode() fs.FileMode {
	m := fs.FileMode(fi.st.Mode & 0o777)
	switch fi.st.Mode & unix.S_IFMT {
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	}
	if fi.st.Mode&unix.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if fi.st.Mode&unix.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if fi.st.Mode&unix.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// readDirEntries lists the host directory e and calls fn with each entry,
// by name, stat'ed without following a symlink; a regular file comes
// open (k.in, fn's to close) or with the error opening it (k.openErr).
// fn returns false to end the listing. An entry that cannot be stat'ed
// is left out, and its error returned at the end with the others.
func readDirEntries(e *srcEntry, fn func(k *srcEntry) bool) error {
	fd, err := openRetry(unix.AT_FDCWD, e.host, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return &os.PathError{Op: "open", Path: e.host, Err: err}
	}
	d := os.NewFile(uintptr(fd), e.host) // blocking: not the runtime poller's
	ents, err := d.ReadDir(-1)
	dirfd := unix.AT_FDCWD // names are full paths
	if err != nil || e.depth >= maxDirFDs {
		d.Close()
	} else {
		defer d.Close()
		dirfd = fd
	}
	if err != nil {
		return err
	}
	slices.SortFunc(ents, func(a, b os.DirEntry) int {
		switch {
		case a.Name() < b.Name():
			return -1
		case a.Name() > b.Name():
			return 1
		}
		return 0
	})
	var failed []error
	for _, de := range ents {
		k := &srcEntry{host: filepath.Join(e.host, de.Name()), name: de.Name(), depth: e.depth + 1}
		at := k.name
		if dirfd == unix.AT_FDCWD {
			at = k.host
		}
		if err := k.statAt(dirfd, at, de.Type().IsRegular()); err != nil {
			failed = append(failed, err)
			continue
		}
		if !fn(k) {
			break
		}
	}
	return errs.Join(failed...) // one line, however many failed
}

// statAt stats k, named name relative to dirfd; with open (its listing
// said it is a regular file) it opens it and stats that.
func (k *srcEntry) statAt(dirfd int, name string, open bool) error {
	fi := &statInfo{name: k.name}
	if open {
		in, err := openSourceAt(dirfd, name, k.host)
		if err == nil {
			hostCalls.stat.Add(1)
			if err = unix.Fstat(in.fd, &fi.st); err != nil {
				in.Close()
				return &os.PathError{Op: "fstat", Path: k.host, Err: err}
			}
			k.fi = fi
			if fi.Mode().IsRegular() {
				k.in = in
			} else {
				in.Close() // it is no longer a regular file
			}
			return nil
		}
		k.openErr = err // if it still is a regular file
	}
	hostCalls.stat.Add(1)
	if err := ignoringEINTR(func() error { return unix.Fstatat(dirfd, name, &fi.st, unix.AT_SYMLINK_NOFOLLOW) }); err != nil {
		return &os.PathError{Op: "lstat", Path: k.host, Err: err}
	}
	k.fi = fi
	if !fi.Mode().IsRegular() {
		k.openErr = nil
	}
	return nil
}

func ignoringEINTR(fn func() error) error {
	for {
		if err := fn(); err != unix.EINTR {
			return err
		}
	}
}
