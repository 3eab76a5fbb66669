//go:build unix

package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// snapshot lists everything under dir except skip's subtree: path, mode,
// size and mtime of each entry (but dir's own mtime).
func snapshot(t *testing.T, dir, skip string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == skip {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		mtime := fi.ModTime().UnixNano()
		if p == dir {
			mtime = 0 // making skip changes it
		}
		fmt.Fprintf(&b, "%s %v %d %d\n", p, fi.Mode(), fi.Size(), mtime)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// getConfined runs get IMAGE SRC into a destination inside a fresh
// directory (holding a few bystanders) and fails t if anything outside
// the destination changed. It returns the destination and get's error.
func getConfined(t *testing.T, img, src string, flags ...string) (string, error) {
	t.Helper()
	parent := t.TempDir()
	os.Mkdir(filepath.Join(parent, "outside"), 0o755)
	os.WriteFile(filepath.Join(parent, "outside", "keep"), []byte("keep"), 0o644)
	os.Chmod(parent, 0o750)
	dst := filepath.Join(parent, "dest")
	before := snapshot(t, parent, dst)
	err := cmdGet(append(flags, img, src, dst), io.Discard)
	if after := snapshot(t, parent, dst); after != before {
		t.Errorf("get %s %s changed things outside %s:\nbefore:\n%safter:\n%s", img, src, dst, before, after)
	}
	return dst, err
}

// TestGetBadNames crafts directory entries whose names are not one path
// element and checks that get refuses them as corruption and writes
// nothing outside its destination, with and without metadata_csum.
func TestGetBadNames(t *testing.T) {
	for _, csum := range []string{"metadata_csum", "^metadata_csum"} {
		for _, tc := range []struct{ placeholder, name string }{
			{"EVILxxx", "../evil"},
			{"OUTSIDExxxxxxxxxxxx", "../outside/keep/../"},
			{"ZZZ", "../"},
			{"AxB", "a/b"},
			{"AxB", "a\x00b"},
		} {
			t.Run(csum+"/"+tc.name, func(t *testing.T) {
				dir := t.TempDir()
				src := filepath.Join(dir, "src")
				os.MkdirAll(filepath.Join(src, "top"), 0o755)
				os.WriteFile(filepath.Join(src, "top", tc.placeholder), []byte("evil\n"), 0o644)
				img := filepath.Join(dir, "img")
				e2fs.Mkfs(t, img, "8M", "-b", "1024", "-O", csum, "-d", src)
				renameEntry(t, img, "/top", tc.placeholder, tc.name)
				_, err := getConfined(t, img, "/top")
				if !errors.Is(err, ext4io.ErrCorrupt) {
					t.Fatalf("get: %v, want an error wrapping ErrCorrupt", err)
				}
			})
		}
	}
}

// TestGetDotDotDirectory: an entry named "../" (naming the image root,
// mode 0777) must neither fill nor chmod the destination's parent, and
// getting the image root into an existing directory must leave that
// directory's mode and times. (Entries named "." and ".." the library's
// ReadDir leaves out.)
func TestGetDotDotDirectory(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.MkdirAll(filepath.Join(src, "top", "ZZZ"), 0o755)
	img := filepath.Join(dir, "img")
	e2fs.Mkfs(t, img, "8M", "-b", "1024", "-d", src)
	e2fs.Debugfs(t, img, true, "sif / mode 040777")
	clean := filepath.Join(dir, "clean")
	if b, err := os.ReadFile(img); err != nil || os.WriteFile(clean, b, 0o644) != nil {
		t.Fatal(err)
	}
	renameEntry(t, img, "/top", "ZZZ", "../")
	if _, err := getConfined(t, img, "/top"); !errors.Is(err, ext4io.ErrCorrupt) {
		t.Fatalf("get: %v, want an error wrapping ErrCorrupt", err)
	}

	// The root into an existing directory: its contents, not its mode.
	into := filepath.Join(t.TempDir(), "into")
	os.Mkdir(into, 0o700)
	before, _ := os.Stat(into)
	if _, errOut, code := runCmd(t, "get", clean, "/", into); code != 0 {
		t.Fatalf("get / into: exit %d: %s", code, errOut)
	}
	after, _ := os.Stat(into)
	if after.Mode() != before.Mode() || !after.ModTime().After(before.ModTime().Add(-1)) || after.ModTime().Year() < 2000 {
		t.Errorf("get / into changed %s: %v %v -> %v %v", into, before.Mode(), before.ModTime(), after.Mode(), after.ModTime())
	}
	if _, err := os.Stat(filepath.Join(into, "top")); err != nil {
		t.Errorf("get / into: %v", err)
	}
}

// TestGetSymlinkThenEntry: a symlink s -> ../outside, then an entry named
// "s/f" must not write through the symlink it created.
func TestGetSymlinkThenEntry(t *testing.T) {
	for _, csum := range []string{"metadata_csum", "^metadata_csum"} {
		t.Run(csum, func(t *testing.T) {
			dir := t.TempDir()
			img := filepath.Join(dir, "img")
			host := filepath.Join(dir, "payload")
			os.WriteFile(host, []byte("pwned\n"), 0o644)
			e2fs.Mkfs(t, img, "8M", "-b", "1024", "-O", csum)
			e2fs.DebugfsScript(t, img, true, []string{
				"symlink s ../outside", "mkdir outside", "cd outside", "write " + host + " f", "cd /", "write " + host + " s_f",
			})
			renameEntry(t, img, "/", "s_f", "s/f")
			dst, err := getConfined(t, img, "/")
			if !errors.Is(err, ext4io.ErrCorrupt) {
				t.Fatalf("get: %v, want an error wrapping ErrCorrupt", err)
			}
			// The library refuses the directory block holding "s/f" where
			// it decodes it, so get may stop before making s at all; if
			// it made s, s is the symlink and nothing went through it.
			if l, err := os.Readlink(filepath.Join(dst, "s")); err == nil && l != "../outside" {
				t.Errorf("symlink s: %q", l)
			} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("symlink s: %v", err)
			}
		})
	}
}

// TestGetDirectoryCycle: a hard link from a directory to its parent is a
// cycle get must refuse, and nesting beyond maxGetDepth is refused too.
func TestGetDirectoryCycle(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "img")
	e2fs.Mkfs(t, img, "8M", "-b", "1024")
	e2fs.DebugfsScript(t, img, true, []string{"mkdir a", "cd a", "mkdir b", "cd b", "link /a loop"})
	_, err := getConfined(t, img, "/a")
	if !errors.Is(err, ext4io.ErrCorrupt) {
		t.Fatalf("get: %v, want an error wrapping ErrCorrupt", err)
	}

	img2 := filepath.Join(dir, "deep")
	e2fs.Mkfs(t, img2, "8M", "-b", "1024")
	var script []string
	for range 12 {
		script = append(script, "mkdir d", "cd d")
	}
	e2fs.DebugfsScript(t, img2, true, script)
	old := maxGetDepth
	maxGetDepth = 10
	defer func() { maxGetDepth = old }()
	if _, err := getConfined(t, img2, "/d"); err == nil || !strings.Contains(err.Error(), "deeper than 10") {
		t.Fatalf("get of 12 nested directories with a bound of 10: %v", err)
	}
}

// TestGetModes: without -p, setuid, setgid and sticky are dropped and the
// umask applies (like tar as a user); with -p they are kept as stored.
func TestGetModes(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.MkdirAll(filepath.Join(src, "top", "open"), 0o755)
	os.Mkdir(filepath.Join(src, "top", "tmp"), 0o755)
	os.WriteFile(filepath.Join(src, "top", "suid"), []byte("#!/bin/sh\n"), 0o755)
	for name, m := range map[string]fs.FileMode{"open": 0o777, "tmp": 0o777 | fs.ModeSticky, "suid": 0o755 | fs.ModeSetuid | fs.ModeSetgid} {
		if err := os.Chmod(filepath.Join(src, "top", name), m); err != nil {
			t.Fatal(err)
		}
	}
	img := filepath.Join(dir, "img")
	e2fs.Mkfs(t, img, "8M", "-b", "1024", "-d", src)

	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	for _, tc := range []struct {
		flags []string
		want  map[string]fs.FileMode
	}{
		{nil, map[string]fs.FileMode{"open": fs.ModeDir | 0o755, "tmp": fs.ModeDir | 0o755, "suid": 0o755}},
		{[]string{"-p"}, map[string]fs.FileMode{"open": fs.ModeDir | 0o777, "tmp": fs.ModeDir | fs.ModeSticky | 0o777,
			"suid": fs.ModeSetuid | fs.ModeSetgid | 0o755}},
	} {
		dst, err := getConfined(t, img, "/top", tc.flags...)
		if err != nil {
			t.Fatalf("get %v: %v", tc.flags, err)
		}
		for name, want := range tc.want {
			fi, err := os.Lstat(filepath.Join(dst, name))
			if err != nil || fi.Mode() != want {
				t.Errorf("get %v: %s: mode %v, %v; want %v", tc.flags, name, fi.Mode(), err, want)
			}
		}
	}
}

// TestGetSparse: a 1 GiB file with one written block in a 16 MiB image
// comes out as a 1 GiB file with holes, not 1 GiB of zeroes on the host.
func TestGetSparse(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "img")
	e2fs.Mkfs(t, img, "16M", "-b", "4096")
	old := stdin
	defer func() { stdin = old }()
	stdin = strings.NewReader("hello")
	if _, errOut, code := runCmd(t, "write", img, "f", "--offset", "536870912"); code != 0 {
		t.Fatal(errOut)
	}
	stdin = strings.NewReader("head")
	if _, errOut, code := runCmd(t, "write", img, "f"); code != 0 {
		t.Fatal(errOut)
	}
	if _, errOut, code := runCmd(t, "truncate", img, "f", "1G"); code != 0 {
		t.Fatal(errOut)
	}
	dst, err := getConfined(t, img, "/f")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dst)
	if err != nil || fi.Size() != 1<<30 {
		t.Fatalf("size %d, %v", fi.Size(), err)
	}
	if used := fi.Sys().(*syscall.Stat_t).Blocks * 512; used > 1<<20 {
		t.Errorf("%d bytes allocated on the host for a file with two written blocks", used)
	}
	f, _ := os.Open(dst)
	defer f.Close()
	got := make([]byte, 8)
	f.ReadAt(got, 0)
	if !bytes.Equal(got, []byte("head\x00\x00\x00\x00")) {
		t.Errorf("at 0: %q", got)
	}
	f.ReadAt(got, 536870912-1)
	if !bytes.Equal(got, []byte("\x00hello\x00\x00")) {
		t.Errorf("at 512 MiB: %q", got)
	}
}
