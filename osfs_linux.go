package ext4io

import (
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

func hostRename2(oldpath, newpath string, flags uint) error {
	if err := unix.Renameat2(unix.AT_FDCWD, oldpath, unix.AT_FDCWD, newpath, flags); err != nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
	return nil
}

func hostMknod(path string, mode fs.FileMode, dev uint64) error {
	m := uint32(mode.Perm()) | uint32(unixMode(mode)&0o7000)
	switch mode.Type() {
	case 0:
		m |= unix.S_IFREG
	case fs.ModeNamedPipe:
		m |= unix.S_IFIFO
	case fs.ModeSocket:
		m |= unix.S_IFSOCK
	case fs.ModeDevice | fs.ModeCharDevice:
		m |= unix.S_IFCHR
	case fs.ModeDevice:
		m |= unix.S_IFBLK
	case fs.ModeDir:
		m |= unix.S_IFDIR
	default:
		return &fs.PathError{Op: "mknod", Path: path, Err: unix.EINVAL}
	}
	if err := unix.Mknod(path, m, int(dev)); err != nil {
		return &fs.PathError{Op: "mknod", Path: path, Err: err}
	}
	return nil
}

func hostStatfs(path string) (Statfs, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return Statfs{}, &fs.PathError{Op: "statfs", Path: path, Err: err}
	}
	return Statfs{
		BlockSize: int64(st.Bsize), Blocks: uint64(st.Blocks), BlocksFree: uint64(st.Bfree),
		BlocksAvail: uint64(st.Bavail), Files: uint64(st.Files), FilesFree: uint64(st.Ffree),
		NameMax: int64(st.Namelen),
	}, nil
}
