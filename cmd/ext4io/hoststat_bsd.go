//go:build darwin || freebsd

package main

import (
	"io/fs"
	"syscall"
	"time"

	"github.com/ext4io/ext4io"
	"golang.org/x/sys/unix"
)

// oNoatime is 0: these hosts have no O_NOATIME.
const oNoatime = 0

// hostStat returns the access time and owner of a host file, if its
// FileInfo carries them.
func hostStat(fi fs.FileInfo) (atime time.Time, uid, gid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return time.Time{}, 0, 0, false
	}
	return time.Unix(int64(st.Atimespec.Sec), int64(st.Atimespec.Nsec)), int(st.Uid), int(st.Gid), true
}

// hostID returns the identity (device and inode numbers) and link count
// of a host file, and for a device the number it stands for as
// ext4io.Mkdev encodes it (Linux's major and minor split), if its
// FileInfo carries them.
func hostID(fi fs.FileInfo) (id fileID, nlink, rdev uint64, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, 0, 0, false
	}
	r := uint64(st.Rdev)
	return fileID{uint64(st.Dev), uint64(st.Ino)}, uint64(st.Nlink), ext4io.Mkdev(unix.Major(r), unix.Minor(r)), true
}
