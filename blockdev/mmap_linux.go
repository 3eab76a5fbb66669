package blockdev

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// mapShared maps size bytes of fd shared. A writable mapping asks for
// MAP_SHARED_VALIDATE|MAP_SYNC first: the kernel grants it only on DAX
// (a file on a DAX-mounted file system on persistent memory, or device
// DAX), and refuses it elsewhere with EOPNOTSUPP (EINVAL before Linux
// 4.15); then it maps plain MAP_SHARED and fallback says why.
func mapShared(fd, size, prot int) (data []byte, sync bool, fallback, err error) {
	if prot&unix.PROT_WRITE == 0 {
		fallback = fmt.Errorf("read-only mapping, MAP_SYNC not needed: %w", ErrUnsupported)
	} else {
		data, err = unix.Mmap(fd, 0, size, prot, unix.MAP_SHARED_VALIDATE|unix.MAP_SYNC)
		if err == nil {
			return data, true, nil, nil
		}
		if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EINVAL) {
			return nil, false, nil, err
		}
		fallback = fmt.Errorf("MAP_SYNC refused (not DAX): %w: %w", ErrUnsupported, err)
	}
	data, err = unix.Mmap(fd, 0, size, prot, unix.MAP_SHARED)
	return data, false, fallback, err
}

// daxSize returns the size of the device DAX character device st
// describes (/dev/daxX.Y), from sysfs; an error wrapping ErrInvalid for
// any other character device.
func daxSize(path string, st os.FileInfo) (int64, error) {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("blockdev: mmap %s: no device number: %w", path, ErrInvalid)
	}
	dir := fmt.Sprintf("/sys/dev/char/%d:%d", unix.Major(uint64(sys.Rdev)), unix.Minor(uint64(sys.Rdev)))
	sub, err := os.Readlink(dir + "/subsystem")
	if err != nil || filepath.Base(sub) != "dax" {
		return 0, fmt.Errorf("blockdev: mmap %s: a character device, but not device DAX: %w", path, ErrInvalid)
	}
	b, err := os.ReadFile(dir + "/size")
	if err != nil {
		return 0, fmt.Errorf("blockdev: mmap %s: device DAX size: %w: %w", path, ErrIO, err)
	}
	size, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || size < 0 {
		return 0, fmt.Errorf("blockdev: mmap %s: device DAX size %q: %w", path, b, ErrInvalid)
	}
	return size, nil
}
