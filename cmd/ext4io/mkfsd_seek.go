//go:build linux || darwin || freebsd

package main

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// dataRanges returns the [start, end) ranges of f (of size bytes) that
// hold data, by SEEK_DATA and SEEK_HOLE; the whole file where the host
// file system does not tell.
func dataRanges(f *srcFile, size int64) ([][2]int64, error) {
	fd := f.fd
	var out [][2]int64
	for off := int64(0); off < size; {
		hostCalls.seek.Add(1)
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if errors.Is(err, unix.EINVAL) && off == 0 {
			return [][2]int64{{0, size}}, nil // not supported here
		}
		if err != nil {
			return nil, &os.PathError{Op: "lseek SEEK_DATA", Path: f.name, Err: err}
		}
		hostCalls.seek.Add(1)
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil {
			return nil, &os.PathError{Op: "lseek SEEK_HOLE", Path: f.name, Err: err}
		}
		if start >= size {
			break
		}
		out = append(out, [2]int64{start, min(end, size)})
		off = end
	}
	return out, nil
}
