package ext4io

import (
	"testing"
	"time"
)

// TestFileChtimesAccessed: File.Chtimes sets atime and mtime and the
// change time, on a named file and on one whose name is gone; File.Accessed
// sets atime alone and leaves ctime, as a read does on Linux.
func TestFileChtimesAccessed(t *testing.T) {
	_, v := memVolume(t, 32<<20, 4096)
	defer v.Close()
	f, err := v.Create("f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stat := func() *FileInfo {
		t.Helper()
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		return fi.(*FileInfo)
	}
	a, m := time.Unix(1e9, 5), time.Unix(1e9+7, 9)
	if err := f.Chtimes(a, m); err != nil {
		t.Fatal(err)
	}
	fi := stat()
	if !fi.Atime.Equal(a) || !fi.Mtime.Equal(m) || fi.Ctime.Before(time.Now().Add(-time.Minute)) {
		t.Fatalf("after Chtimes: atime %v mtime %v ctime %v", fi.Atime, fi.Mtime, fi.Ctime)
	}
	ctime := fi.Ctime
	at := time.Unix(2e9, 3)
	if err := f.Accessed(at); err != nil {
		t.Fatal(err)
	}
	if fi := stat(); !fi.Atime.Equal(at) || !fi.Mtime.Equal(m) || !fi.Ctime.Equal(ctime) {
		t.Fatalf("after Accessed: atime %v mtime %v ctime %v→%v", fi.Atime, fi.Mtime, ctime, fi.Ctime)
	}
	if err := v.Remove("f"); err != nil {
		t.Fatal(err)
	}
	if err := f.Chtimes(time.Time{}, a); err != nil {
		t.Fatalf("Chtimes of an unlinked open file: %v", err)
	}
	if fi := stat(); !fi.Mtime.Equal(a) || !fi.Atime.Equal(at) {
		t.Fatalf("after Chtimes of the unlinked file: atime %v mtime %v", fi.Atime, fi.Mtime)
	}
}
