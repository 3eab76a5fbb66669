//go:build unix

package main

import (
	"errors"
	"os"
	"syscall"
)

// openSource opens a host regular file for reading: not through a final
// symlink, without blocking should it have become a fifo, and without
// updating its atime where the host allows (O_NOATIME needs the file's
// owner or CAP_FOWNER).
func openSource(name string) (*os.File, error) {
	flags := os.O_RDONLY | syscall.O_NOFOLLOW | syscall.O_NONBLOCK
	if oNoatime != 0 {
		f, err := os.OpenFile(name, flags|oNoatime, 0)
		if !errors.Is(err, syscall.EPERM) {
			return f, err
		}
	}
	return os.OpenFile(name, flags, 0)
}
