//go:build unix

package main

import (
	"io/fs"
	"syscall"
)

// umask returns the process's umask (setting it and back: ext4io is
// single-threaded where it calls this).
func umask() fs.FileMode {
	m := syscall.Umask(0)
	syscall.Umask(m)
	return fs.FileMode(m) & fs.ModePerm
}
