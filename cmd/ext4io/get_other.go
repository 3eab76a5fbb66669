//go:build !linux

package main

import (
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/ext4io/ext4io"
)

// hostMknod: get makes no special files on this host.
func hostMknod(r *os.Root, name string, typ fs.FileMode, perm uint32, rdev uint64) error {
	return fmt.Errorf("%s: making a %v here: %w", name, typ, ext4io.ErrUnsupported)
}

// hostLutimes leaves a symlink's times as made on this host.
func hostLutimes(r *os.Root, name string, atime, mtime time.Time) error { return nil }

// hostLsetxattr: get sets attributes only on files it opens here.
func hostLsetxattr(r *os.Root, name, attr string, val []byte) error {
	return fmt.Errorf("%s: extended attribute %s on a symlink or special file here: %w", name, attr, ext4io.ErrUnsupported)
}
