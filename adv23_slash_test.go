//go:build unix

package ext4io_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/ext4iotest"
)

// TestAdv23TrailingSlash: a path ending in "/" names a directory, as in
// Linux's path walk: the last symlink is followed even by Lstat and
// Readlink, and a file (or a symlink to one) there is ENOTDIR. The same
// calls on a host tree give the errors os gives.
func TestAdv23TrailingSlash(t *testing.T) {
	v, _ := openOSVolume(t)
	defer v.Close()
	host := t.TempDir()
	type target interface {
		Stat(string) (fs.FileInfo, error)
		Lstat(string) (fs.FileInfo, error)
		Readlink(string) (string, error)
		Chmod(string, fs.FileMode) error
	}
	for _, tc := range []struct {
		name string
		t    target
	}{{"ext4io", volTarget{v}}, {"os", osTarget(host)}} {
		vt := tc.t
		var mk interface {
			Mkdir(string, fs.FileMode) error
			WriteFile(string, []byte, fs.FileMode) error
			Symlink(string, string) error
		}
		if tc.name == "ext4io" {
			mk = v
		} else {
			mk = osTarget(host)
		}
		if err := mk.Mkdir("d", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := mk.WriteFile("f", []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := mk.Symlink("d", "ld"); err != nil {
			t.Fatal(err)
		}
		if err := mk.Symlink("f", "lf"); err != nil {
			t.Fatal(err)
		}
		notDir := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, syscall.ENOTDIR) {
				t.Errorf("%s: %s: %v, want ENOTDIR", tc.name, what, err)
			}
		}
		_, err := vt.Stat("f/")
		notDir("Stat f/", err)
		_, err = vt.Lstat("f/")
		notDir("Lstat f/", err)
		_, err = vt.Lstat("lf/")
		notDir("Lstat lf/", err)
		_, err = vt.Stat("lf/")
		notDir("Stat lf/", err)
		_, err = vt.Readlink("lf/")
		notDir("Readlink lf/", err)
		notDir("Chmod f/", vt.Chmod("f/", 0o600))
		if fi, err := vt.Lstat("ld/"); err != nil || !fi.IsDir() {
			t.Errorf("%s: Lstat ld/: %v, %v; want the directory", tc.name, fi, err)
		}
		if _, err := vt.Readlink("ld/"); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%s: Readlink ld/: %v, want EINVAL", tc.name, err)
		}
		if fi, err := vt.Lstat("ld"); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			t.Errorf("%s: Lstat ld: %v, %v; want the symlink", tc.name, fi, err)
		}
		if fi, err := vt.Stat("d/"); err != nil || !fi.IsDir() {
			t.Errorf("%s: Stat d/: %v, %v", tc.name, fi, err)
		}
		if fi, err := vt.Stat("lf"); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s: Stat lf: %v, %v", tc.name, fi, err)
		}
	}
}

type volTarget struct{ v *ext4io.Volume }

func (t volTarget) Stat(n string) (fs.FileInfo, error)  { return t.v.Stat(n) }
func (t volTarget) Lstat(n string) (fs.FileInfo, error) { return t.v.Lstat(n) }
func (t volTarget) Readlink(n string) (string, error)   { return t.v.Readlink(n) }
func (t volTarget) Chmod(n string, m fs.FileMode) error { return t.v.Chmod(n, m) }

type osTarget string

func (t osTarget) p(n string) string {
	return filepath.Join(string(t), n) + map[bool]string{true: "/"}[len(n) > 0 && n[len(n)-1] == '/']
}
func (t osTarget) Stat(n string) (fs.FileInfo, error)  { return os.Stat(t.p(n)) }
func (t osTarget) Lstat(n string) (fs.FileInfo, error) { return os.Lstat(t.p(n)) }
func (t osTarget) Readlink(n string) (string, error)   { return os.Readlink(t.p(n)) }
func (t osTarget) Chmod(n string, m fs.FileMode) error { return os.Chmod(t.p(n), m) }
func (t osTarget) Mkdir(n string, m fs.FileMode) error { return os.Mkdir(t.p(n), m) }
func (t osTarget) WriteFile(n string, b []byte, m fs.FileMode) error {
	return os.WriteFile(t.p(n), b, m)
}
func (t osTarget) Symlink(o, n string) error { return os.Symlink(o, t.p(n)) }

// TestAdv23EmptySymlink: a symlink whose size is 0 (crafted: Linux's
// symlink(2) refuses an empty target, and ext4_iget calls such an inode
// corrupt) is ErrCorrupt to Readlink and to a path through it, which
// resolved to the root before (ls of it listed /).
func TestAdv23EmptySymlink(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "img")
	ext4iotest.Mkfs(t, img, "8M", "-b", "1024")
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Mkdir("d", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := v.Symlink("x", "d/l"); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	ext4iotest.Debugfs(t, img, true, "sif /d/l size 0")
	v, err = ext4io.OpenImage(img, ext4io.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if _, err := v.Readlink("d/l"); !errors.Is(err, ext4io.ErrCorrupt) {
		t.Errorf("Readlink: %v, want ErrCorrupt", err)
	}
	for _, p := range []string{"d/l", "d/l/", "d/l/lost+found"} {
		if fi, err := v.Stat(p); !errors.Is(err, ext4io.ErrCorrupt) {
			t.Errorf("Stat %s: %v, %v; want ErrCorrupt", p, fi, err)
		}
	}
	if _, err := v.ReadDir("d/l"); !errors.Is(err, ext4io.ErrCorrupt) {
		t.Errorf("ReadDir: %v, want ErrCorrupt", err)
	}
}

// TestAdv23TrailingSlashChange: Rename, Unlink and Remove of a file named
// with a trailing slash (on either side of a rename) fail with ENOTDIR
// and change nothing, as os's; a directory moves.
func TestAdv23TrailingSlashChange(t *testing.T) {
	v, _ := openOSVolume(t)
	defer v.Close()
	host := osTarget(t.TempDir())
	for _, name := range []string{"ext4io", "os"} {
		var (
			rename = v.Rename
			remove = v.Remove
			unlink = v.Unlink
			stat   = func(n string) error { _, err := v.Lstat(n); return err }
		)
		if name == "os" {
			rename = func(o, n string) error { return os.Rename(host.p(o), host.p(n)) }
			remove = func(n string) error { return os.Remove(host.p(n)) }
			unlink = func(n string) error { return syscall.Unlink(host.p(n)) }
			stat = func(n string) error { _, err := os.Lstat(host.p(n)); return err }
			if err := os.WriteFile(host.p("f"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(host.p("d"), 0o755); err != nil {
				t.Fatal(err)
			}
		} else {
			if err := v.WriteFile("f", []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := v.Mkdir("d", 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for what, err := range map[string]error{
			"rename f f/":  rename("f", "f/"),
			"rename f g/":  rename("f", "g/"),
			"rename f/ g":  rename("f/", "g"),
			"rename f/ d/": rename("f/", "d/"),
			"unlink f/":    unlink("f/"),
			"remove f/":    remove("f/"),
		} {
			if !errors.Is(err, syscall.ENOTDIR) {
				t.Errorf("%s: %s: %v, want ENOTDIR", name, what, err)
			}
		}
		if err := stat("f"); err != nil {
			t.Errorf("%s: f: %v", name, err)
		}
		if err := stat("g"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: g: %v, want it missing", name, err)
		}
		if err := rename("d/", "e/"); err != nil {
			t.Errorf("%s: rename d/ e/: %v", name, err)
		}
	}
}

// TestAdv23TrailingSlashCreate: Symlink, Link and Mknod of a missing name
// ending in "/" create nothing and fail with ENOENT, as os's (they made a
// file named without the slash); an existing name is EEXIST.
func TestAdv23TrailingSlashCreate(t *testing.T) {
	v, _ := openOSVolume(t)
	defer v.Close()
	host := osTarget(t.TempDir())
	if err := os.WriteFile(host.p("f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := v.WriteFile("f", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	type call struct {
		what   string
		os, vo error
		want   syscall.Errno
	}
	for _, c := range []call{
		{"symlink x n/", os.Symlink("x", host.p("n/")), v.Symlink("x", "n/"), syscall.ENOENT},
		{"link f m/", os.Link(host.p("f"), host.p("m/")), v.Link("f", "m/"), syscall.ENOENT},
		{"mknod p/", syscall.Mknod(host.p("p/"), syscall.S_IFIFO|0o644, 0), v.Mknod("p/", fs.ModeNamedPipe|0o644, 0), syscall.ENOENT},
		{"symlink x f/", os.Symlink("x", host.p("f/")), v.Symlink("x", "f/"), syscall.EEXIST},
	} {
		if !errors.Is(c.os, c.want) {
			t.Errorf("os: %s: %v, want %v", c.what, c.os, c.want)
		}
		if !errors.Is(c.vo, c.want) {
			t.Errorf("ext4io: %s: %v, want %v", c.what, c.vo, c.want)
		}
	}
	for _, n := range []string{"n", "m", "p"} {
		if _, err := v.Lstat(n); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("ext4io: %s: %v, want it missing", n, err)
		}
	}
}

// TestAdv23TrailingSlashExchange: RENAME_EXCHANGE of a file named with a
// trailing slash fails with ENOTDIR and swaps nothing, as renameat2's.
func TestAdv23TrailingSlashExchange(t *testing.T) {
	v, _ := openOSVolume(t)
	defer v.Close()
	if err := v.WriteFile("f", []byte("f"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := v.Mkdir("d", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][2]string{{"f/", "d"}, {"d", "f/"}, {"d/", "f/"}} {
		if err := v.Rename2(c[0], c[1], ext4io.RENAME_EXCHANGE); !errors.Is(err, syscall.ENOTDIR) {
			t.Errorf("exchange %s %s: %v, want ENOTDIR", c[0], c[1], err)
		}
	}
	if err := v.Rename2("f", "d/", ext4io.RENAME_EXCHANGE); err != nil {
		t.Errorf("exchange f d/: %v", err)
	}
	if fi, err := v.Lstat("f"); err != nil || !fi.IsDir() {
		t.Errorf("after exchange f d/: f is %v, %v; want the directory", fi, err)
	}
}
