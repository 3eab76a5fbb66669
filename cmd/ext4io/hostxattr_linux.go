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
	hostCalls.xattrPath.Add(1)
	return readXattrs(path, "l",
		func(b []byte) (int, error) { return unix.Llistxattr(path, b) },
		func(name string, b []byte) (int, error) { return unix.Lgetxattr(path, name, b) })
}

// hostXattrsOf is hostXattrs of the open file in (named path), through
// its descriptor: no path lookup.
func hostXattrsOf(in *srcFile, path string) (map[string][]byte, error) {
	return readXattrs(path, "f",
		func(b []byte) (int, error) { return unix.Flistxattr(in.fd, b) },
		func(name string, b []byte) (int, error) { return unix.Fgetxattr(in.fd, name, b) })
}

// readXattrs reads the attributes of path by list and get (their system
// calls named with prefix, for errors).
func readXattrs(path, prefix string, list func([]byte) (int, error), get func(string, []byte) (int, error)) (map[string][]byte, error) {
	names, err := hostList(path, prefix, list)
	if err != nil || len(names) == 0 {
		return nil, err
	}
	attrs := make(map[string][]byte, len(names))
	for _, name := range names {
		val, err := hostGet(name, get)
		if errors.Is(err, unix.ENODATA) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, &os.PathError{Op: prefix + "getxattr " + name, Path: path, Err: err}
		}
		attrs[name] = val
	}
	return attrs, nil
}

func hostList(path, prefix string, list func([]byte) (int, error)) ([]string, error) {
	for size := 256; ; size *= 4 {
		buf := make([]byte, size)
		n, err := list(buf)
		if errors.Is(err, unix.ERANGE) && size < 1<<20 {
			continue
		}
		if errors.Is(err, unix.ENOTSUP) {
			return nil, nil // the host file system keeps none
		}
		if err != nil {
			return nil, &os.PathError{Op: prefix + "listxattr", Path: path, Err: err}
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

func hostGet(name string, get func(string, []byte) (int, error)) ([]byte, error) {
	for size := 256; ; size *= 4 {
		buf := make([]byte, size)
		n, err := get(name, buf)
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
