//go:build unix && !linux

package blockdev

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// mapShared maps size bytes of fd shared; MAP_SYNC is Linux-only.
func mapShared(fd, size, prot int) (data []byte, sync bool, fallback, err error) {
	data, err = unix.Mmap(fd, 0, size, prot, unix.MAP_SHARED)
	return data, false, fmt.Errorf("MAP_SYNC is Linux-only: %w", ErrUnsupported), err
}

// daxSize refuses character devices: device DAX is Linux-only.
func daxSize(path string, st os.FileInfo) (int64, error) {
	return 0, fmt.Errorf("blockdev: mmap %s: a character device: %w", path, ErrInvalid)
}
