package main

import (
	"io/fs"
	"syscall"
	"time"

	"github.com/ext4io/ext4io"
	"golang.org/x/sys/unix"
)

// oNoatime is O_NOATIME: read without updating the atime.
const oNoatime = syscall.O_NOATIME

// hostStat returns the access time and owner of a host file, if its
// FileInfo carries them.
func hostStat(fi fs.FileInfo) (atime time.Time, uid, gid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return time.Time{}, 0, 0, false
	}
	return time.Unix(st.Atim.Sec, st.Atim.Nsec), int(st.Uid), int(st.Gid), true
}

// hostID returns the identity (device and inode numbers) and link count
// of a host file, and for a device the number it stands for as
// ext4io.Mkdev encodes it, if its FileInfo carries them.
func hostID(fi fs.FileInfo) (id fileID, nlink, rdev uint64, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, 0, 0, false
	}
	r := uint64(st.Rdev)
	return fileID{uint64(st.Dev), st.Ino}, uint64(st.Nlink), ext4io.Mkdev(unix.Major(r), unix.Minor(r)), true
}
