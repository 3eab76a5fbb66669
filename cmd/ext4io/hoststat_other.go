//go:build !linux && !darwin && !freebsd

package main

import (
	"io/fs"
	"time"
)

// oNoatime is 0: ext4io does not use O_NOATIME here.
const oNoatime = 0

// hostStat reports no access time or owner where ext4io does not know the
// host's stat layout; put then keeps mode and modification time only.
func hostStat(fs.FileInfo) (atime time.Time, uid, gid int, ok bool) {
	return time.Time{}, 0, 0, false
}

// hostID reports nothing here: hard links are then copied as separate
// files, and device files are refused (their numbers are unknown).
func hostID(fs.FileInfo) (id fileID, nlink, rdev uint64, ok bool) {
	return fileID{}, 0, 0, false
}
