package main

import (
	"errors"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// hostXattrs returns the extended attributes of the host file path, not
// following a final symlink, by name.
func hostXattrs(path string) (map[string][]byte, error) {
	names, err := hostList(path)
	if err != nil || len(names) == 0 {
		return nil, err
	}
	attrs := make(map[string][]byte, len(names))
	for _, name := range names {
		val, err := hostGet(path, name)
		if errors.Is(err, unix.ENODATA) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, &os.PathError{Op: "lgetxattr " + name, Path: path, Err: err}
		}
		attrs[name] = val
	}
	return attrs, nil
}

func hostList(path string) ([]string, error) {
	for size := 256; ; size *= 4 {
		buf := make([]byte, size)
		n, err := unix.Llistxattr(path, buf)
		if errors.Is(err, unix.ERANGE) && size < 1<<20 {
			continue
		}
		if errors.Is(err, unix.ENOTSUP) {
			return nil, nil // the host file system keeps none
		}
		if err != nil {
			return nil, &os.PathError{Op: "llistxattr", Path: path, Err: err}
		}
		var names []string
		for _, name := range strings.Split(string(buf[:n]), "\x00") {
			if name != "" {
				names = append(names, name)
			}
		}
		return names, nil
	}
}

func hostGet(path, name string) ([]byte, error) {
	for size := 256; ; size *= 4 {
		buf := make([]byte, size)
		n, err := unix.Lgetxattr(path, name, buf)
		if errors.Is(err, unix.ERANGE) && size < 1<<20 {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}

// setHostXattr sets the attribute name of the open host file f.
func setHostXattr(f *os.File, name string, value []byte) error {
	if err := unix.Fsetxattr(int(f.Fd()), name, value, 0); err != nil {
		return &os.PathError{Op: "fsetxattr " + name, Path: f.Name(), Err: err}
	}
	return nil
}
