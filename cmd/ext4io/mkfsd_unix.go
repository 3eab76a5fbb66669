//go:build unix

package main

import (
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// srcFile is a host regular file open for reading by mkfs -d and put: a
// plain descriptor, which the runtime's poller and finalizers (*os.File)
// would only cost a few system calls and allocations per file.
type srcFile struct {
	fd   int
	name string
}

// openSource opens a host regular file for reading: not through a final
// symlink, without blocking should it have become a fifo, and without
// updating its atime where the host allows (O_NOATIME needs the file's
// owner or CAP_FOWNER).
func openSource(name string) (*srcFile, error) {
	return openSourceAt(unix.AT_FDCWD, name, name)
}

// openSourceAt is openSource of the file named name relative to the
// directory dirfd, host its host path (for errors).
func openSourceAt(dirfd int, name, host string) (*srcFile, error) {
	flags := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	fd, err := openRetry(dirfd, name, flags|oNoatime)
	if oNoatime != 0 && err == unix.EPERM {
		fd, err = openRetry(dirfd, name, flags)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: host, Err: err}
	}
	return &srcFile{fd: fd, name: host}, nil
}

func openRetry(dirfd int, name string, flags int) (int, error) {
	hostCalls.open.Add(1)
	for {
		fd, err := unix.Openat(dirfd, name, flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// same reports whether f is still the regular file fi (lstat'ed) names,
// and its size now.
func (f *srcFile) same(fi fs.FileInfo) (size int64, ok bool, err error) {
	var st unix.Stat_t
	hostCalls.stat.Add(1)
	if err := unix.Fstat(f.fd, &st); err != nil {
		return 0, false, &os.PathError{Op: "fstat", Path: f.name, Err: err}
	}
	id, _, _, hasID := hostID(fi)
	ok = st.Mode&unix.S_IFMT == unix.S_IFREG && (!hasID || id == fileID{uint64(st.Dev), st.Ino})
	return st.Size, ok, nil
}

// size returns f's size now.
func (f *srcFile) size() (int64, error) {
	var st unix.Stat_t
	hostCalls.stat.Add(1)
	if err := unix.Fstat(f.fd, &st); err != nil {
		return 0, &os.PathError{Op: "fstat", Path: f.name, Err: err}
	}
	return st.Size, nil
}

// ReadAt reads len(p) bytes at off, as io.ReaderAt.
func (f *srcFile) ReadAt(p []byte, off int64) (int, error) {
	done := 0
	for done < len(p) {
		n, err := unix.Pread(f.fd, p[done:], off+int64(done))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return done, &os.PathError{Op: "read", Path: f.name, Err: err}
		}
		if n == 0 {
			return done, io.EOF
		}
		done += n
	}
	return done, nil
}

// Close closes the descriptor.
func (f *srcFile) Close() error {
	if err := unix.Close(f.fd); err != nil {
		return &os.PathError{Op: "close", Path: f.name, Err: err}
	}
	return nil
}
