//go:build !linux

package ext4io

import (
	"io/fs"
	"os"
)

func hostRename2(oldpath, newpath string, flags uint) error {
	if flags == 0 {
		return os.Rename(oldpath, newpath) // Go's rename: a directory is not replaced
	}
	return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: ErrUnsupported}
}

func hostMknod(path string, mode fs.FileMode, dev uint64) error {
	return &fs.PathError{Op: "mknod", Path: path, Err: ErrUnsupported}
}

func hostStatfs(path string) (Statfs, error) {
	return Statfs{}, &fs.PathError{Op: "statfs", Path: path, Err: ErrUnsupported}
}
