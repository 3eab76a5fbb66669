package main

import (
	"io/fs"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Host operations get needs beyond os.Root, relative to a directory this
// run opened and by one validated name, never following a final symlink.

// inDir runs fn with a descriptor of the directory r.
func inDir(r *os.Root, fn func(dirfd int) error) error {
	d, err := r.Open(".")
	if err != nil {
		return err
	}
	defer d.Close()
	return fn(int(d.Fd()))
}

// hostMknod makes the fifo, socket or device name in r (mknodat: an
// existing name fails) with the permission bits perm, and for a device
// the number rdev (as ext4io.Mkdev encodes it, Linux's own encoding).
func hostMknod(r *os.Root, name string, typ fs.FileMode, perm uint32, rdev uint64) error {
	var t uint32
	switch {
	case typ&fs.ModeNamedPipe != 0:
		t = unix.S_IFIFO
	case typ&fs.ModeSocket != 0:
		t = unix.S_IFSOCK
	case typ&fs.ModeCharDevice != 0:
		t = unix.S_IFCHR
	case typ&fs.ModeDevice != 0:
		t = unix.S_IFBLK
	}
	dev := int(unix.Mkdev(uint32(rdev>>8&0xfff|rdev>>32&^0xfff), uint32(rdev&0xff|rdev>>12&^0xff)))
	return inDir(r, func(fd int) error {
		if err := unix.Mknodat(fd, name, t|perm&0o777, dev); err != nil {
			return &os.PathError{Op: "mknod", Path: name, Err: err}
		}
		return nil
	})
}

// hostLutimes sets the times of name in r, not following a symlink.
func hostLutimes(r *os.Root, name string, atime, mtime time.Time) error {
	ts := []unix.Timespec{unix.NsecToTimespec(atime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	return inDir(r, func(fd int) error {
		if err := unix.UtimesNanoAt(fd, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &os.PathError{Op: "utimensat", Path: name, Err: err}
		}
		return nil
	})
}

// hostLsetxattr sets the attribute attr of name in r, not following a
// symlink and without opening it (a fifo would block): through the
// directory's /proc/self/fd link, which the kernel resolves to that very
// directory.
func hostLsetxattr(r *os.Root, name, attr string, val []byte) error {
	return inDir(r, func(fd int) error {
		p := "/proc/self/fd/" + strconv.Itoa(fd) + "/" + name
		if err := unix.Lsetxattr(p, attr, val, 0); err != nil {
			return &os.PathError{Op: "lsetxattr " + attr, Path: name, Err: err}
		}
		return nil
	})
}
