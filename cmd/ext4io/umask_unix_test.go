//go:build unix

package main

import (
	"bytes"
	"io/fs"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ext4io/ext4io"
)

// TestNewModesFollowUmask: create, write (of a new file) and mkdir make
// modes as touch, the shell's > and mkdir do: 0666 and 0777 less the
// process's umask, not world-writable files.
func TestNewModesFollowUmask(t *testing.T) {
	old := syscall.Umask(0o027)
	defer syscall.Umask(old)
	img := filepath.Join(t.TempDir(), "m.img")
	oldStdin := stdin
	defer func() { stdin = oldStdin }()
	for _, args := range [][]string{{"mkfs", img, "16M"}, {"create", img, "c"}, {"write", img, "w"}, {"mkdir", img, "d"}} {
		stdin = bytes.NewReader([]byte("x"))
		_, errOut, code := runCmd(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
	}
	v, err := ext4io.OpenImage(img, ext4io.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	for name, want := range map[string]fs.FileMode{"c": 0o640, "w": 0o640, "d": fs.ModeDir | 0o750} {
		fi, err := v.Lstat(name)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode(), want)
		}
	}
}
