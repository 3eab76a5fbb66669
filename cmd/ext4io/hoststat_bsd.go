//go:build darwin || freebsd

package main

import (
	"io/fs"
	"syscall"
	"time"
)

// hostStat returns the access time and owner of a host file, if its
// FileInfo carries them.
func hostStat(fi fs.FileInfo) (atime time.Time, uid, gid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return time.Time{}, 0, 0, false
	}
	return time.Unix(int64(st.Atimespec.Sec), int64(st.Atimespec.Nsec)), int(st.Uid), int(st.Gid), true
}
