//go:build linux

package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestMkfsAndGetCarryXattrs: mkfs -d takes the host tree's extended
// attributes (user and trusted, on a file and a directory, one value too
// big for the inode) into the image; get writes the user ones back, and
// with -p every one, and the image passes e2fsck.
func TestMkfsAndGetCarryXattrs(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.MkdirAll(filepath.Join(src, "d"), 0o755)
	f := filepath.Join(src, "d", "f")
	os.WriteFile(f, []byte("data\n"), 0o644)
	big := bytes.Repeat([]byte("v"), 2000)
	want := map[string]map[string][]byte{
		"d":   {"user.dir": []byte("on a directory")},
		"d/f": {"user.small": []byte("1"), "user.big": big, "trusted.t": []byte("trusted value")},
	}
	for p, attrs := range want {
		for name, val := range attrs {
			if err := unix.Lsetxattr(filepath.Join(src, p), name, val, 0); err != nil {
				if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EPERM) {
					t.Skipf("the host's %s takes no %s attribute: %v", dir, name, err)
				}
				t.Fatal(err)
			}
		}
	}
	img := filepath.Join(dir, "img")
	if _, errOut, code := runCmd(t, "mkfs", "-d", src, img, "16M"); code != 0 {
		t.Fatalf("mkfs -d: exit %d: %s", code, errOut)
	}
	e2fs.Fsck(t, img)
	v, err := ext4io.OpenImage(img, ext4io.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for p, attrs := range want {
		for name, val := range attrs {
			got, err := v.Lgetxattr(p, name)
			if err != nil || !bytes.Equal(got, val) {
				t.Errorf("image %s %s: %d bytes, %v; want %d bytes", p, name, len(got), err, len(val))
			}
		}
	}
	v.Close()

	for _, preserve := range []bool{false, true} {
		out := filepath.Join(t.TempDir(), "out")
		args := []string{"get", img, "/d", out}
		if preserve {
			args = []string{"get", "-p", img, "/d", out}
		}
		if _, errOut, code := runCmd(t, args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		for p, attrs := range want {
			host := filepath.Join(out, p[1:]) // "d" is out itself
			for name, val := range attrs {
				buf := make([]byte, 4096)
				n, err := unix.Lgetxattr(host, name, buf)
				copied := preserve || name[:5] == "user."
				switch {
				case copied && (err != nil || !bytes.Equal(buf[:n], val)):
					t.Errorf("%v: host %s %s: %d bytes, %v; want %d bytes", args, p, name, n, err, len(val))
				case !copied && err == nil:
					t.Errorf("%v: host %s has %s without -p", args, p, name)
				}
			}
		}
	}
}
