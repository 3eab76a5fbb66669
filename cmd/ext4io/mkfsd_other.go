//go:build !unix

package main

import (
	"io/fs"
	"os"
)

// srcFile is a host regular file open for reading by mkfs -d and put.
type srcFile struct{ *os.File }

// openSource opens a host regular file for reading.
func openSource(name string) (*srcFile, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return &srcFile{f}, nil
}

// same reports whether f is still the regular file fi (lstat'ed) names,
// and its size now.
func (f *srcFile) same(fi fs.FileInfo) (size int64, ok bool, err error) {
	st, err := f.Stat()
	if err != nil {
		return 0, false, err
	}
	return st.Size(), st.Mode().IsRegular() && os.SameFile(st, fi), nil
}

// size returns f's size now.
func (f *srcFile) size() (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}
