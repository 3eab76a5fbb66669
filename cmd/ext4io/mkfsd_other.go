//go:build !unix

package main

import (
	"io/fs"
	"os"
	"path/filepath"

	"github.com/ext4io/ext4io/internal/errs"
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

// readDirEntries lstats the entries of the host directory e, by name, and
// calls fn with each (opening none) until fn returns false. An entry that
// cannot be lstat'ed is left out, and its error returned at the end with
// the others.
func readDirEntries(e *srcEntry, fn func(k *srcEntry) bool) error {
	ents, err := os.ReadDir(e.host)
	if err != nil {
		return err
	}
	var failed []error
	for _, de := range ents {
		k := &srcEntry{host: filepath.Join(e.host, de.Name()), name: de.Name(), depth: e.depth + 1}
		if k.fi, err = os.Lstat(k.host); err != nil {
			failed = append(failed, err)
			continue
		}
		if !fn(k) {
			break
		}
	}
	return errs.Join(failed...) // one line, however many failed
}
