//go:build !linux && !darwin && !freebsd

package main

import (
	"io/fs"
	"time"
)

// hostStat reports no access time or owner where ext4io does not know the
// host's stat layout; put then keeps mode and modification time only.
func hostStat(fs.FileInfo) (atime time.Time, uid, gid int, ok bool) {
	return time.Time{}, 0, 0, false
}
