package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// openHostDisk returns the host block device holding path (path itself
// when it is a block device), or nil when there is none: tmpfs, overlay
// and other file systems without a device of their own, or no /sys.
func openHostDisk(path string) *hostDisk {
	var st syscall.Stat_t
	if path == "" || syscall.Stat(path, &st) != nil {
		return nil
	}
	dev := st.Dev
	if st.Mode&syscall.S_IFMT == syscall.S_IFBLK {
		dev = st.Rdev
	}
	maj, min := unix.Major(dev), unix.Minor(dev)
	if maj == 0 {
		return nil // an anonymous device: tmpfs, overlay, ...
	}
	dir := fmt.Sprintf("/sys/dev/block/%d:%d", maj, min)
	h := &hostDisk{statPath: dir + "/stat", read: readFileString}
	if _, ok := h.snap(); !ok {
		return nil
	}
	h.name = fmt.Sprintf("%d:%d", maj, min)
	if target, err := filepath.EvalSymlinks(dir); err == nil {
		h.name = fmt.Sprintf("%s (%d:%d)", filepath.Base(target), maj, min)
	}
	return h
}

func readFileString(p string) (string, error) {
	b, err := os.ReadFile(p)
	return string(b), err
}

// isTmpfs reports whether path is on tmpfs.
func isTmpfs(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.TMPFS_MAGIC
}
