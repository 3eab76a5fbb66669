package blockdev_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ext4io/ext4io/blockdev"
)

// TestOpenDirectoryWritable: a writable open of a directory (an image
// path that names one) fails with ErrInvalid saying it is a directory, as
// a read-only open does, not with ErrIO. 'ext4io mkfs DIR 64M' and
// 'ext4io write DIR f' said "blockdev: open DIR: ext4: I/O error: is a
// directory", an I/O error where the path was wrong.
func TestOpenDirectoryWritable(t *testing.T) {
	dir := t.TempDir()
	opens := map[string]func() error{
		"OpenFile ro":   func() error { _, err := blockdev.OpenFile(dir, true); return err },
		"OpenFile rw":   func() error { _, err := blockdev.OpenFile(dir, false); return err },
		"OpenDirect rw": func() error { _, err := blockdev.OpenDirect(dir, false); return err },
		"CreateFile":    func() error { _, err := blockdev.CreateFile(dir, 1<<20); return err },
	}
	for name, open := range opens {
		err := open()
		if !errors.Is(err, blockdev.ErrInvalid) || errors.Is(err, blockdev.ErrIO) ||
			!strings.Contains(err.Error(), dir+": a directory, neither a regular file nor a block device") {
			t.Errorf("%s of a directory: %v; want ErrInvalid (not ErrIO) saying it is a directory", name, err)
		}
	}
}
