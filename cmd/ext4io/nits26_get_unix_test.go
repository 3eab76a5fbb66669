//go:build unix

package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestGetLinksStayInside: get makes further names of an inode as hard
// links to its first copy, by paths from the directory the run's top entry
// is made in, and every such path is one the run made. A name of the
// inode outside the copied tree gives nothing to link (one host file, one
// link); a symlink with two names, whose target escapes the destination,
// comes out as one symlink with two names, not as a link to its target;
// nothing outside the destination changes, whether get makes the
// destination or fills an existing directory.
func TestGetLinksStayInside(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.MkdirAll(filepath.Join(src, "top", "sub"), 0o755)
	os.MkdirAll(filepath.Join(src, "other"), 0o755)
	os.WriteFile(filepath.Join(src, "top", "f"), []byte("data\n"), 0o644)
	os.Link(filepath.Join(src, "top", "f"), filepath.Join(src, "other", "outside"))
	os.Symlink("../outside/keep", filepath.Join(src, "top", "esc"))
	img := filepath.Join(dir, "img")
	if _, errOut, code := runCmd(t, "mkfs", "-b", "1024", "-d", src, img, "8M"); code != 0 {
		t.Fatal(errOut)
	}
	// A second name for the symlink inode (mkfs -d copies symlinks one
	// name each).
	e2fs.DebugfsScript(t, img, true, []string{"ln /top/esc /top/sub/esc2", "sif /top/esc links_count 2"})
	nlink := func(p string) uint64 {
		t.Helper()
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		return uint64(fi.Sys().(*syscall.Stat_t).Nlink)
	}
	check := func(dst string, fLinks uint64) {
		t.Helper()
		if n := nlink(filepath.Join(dst, "f")); n != fLinks {
			t.Errorf("f has %d links, want %d", n, fLinks)
		}
		a, err1 := os.Lstat(filepath.Join(dst, "esc"))
		b, err2 := os.Lstat(filepath.Join(dst, "sub", "esc2"))
		if err1 != nil || err2 != nil || !os.SameFile(a, b) || a.Mode().Type() != os.ModeSymlink {
			t.Errorf("esc and sub/esc2: %v %v, not one symlink with two names", err1, err2)
		} else if n := nlink(filepath.Join(dst, "esc")); n != 2 {
			t.Errorf("esc has %d links, want 2", n)
		}
	}
	dst, err := getConfined(t, img, "/top")
	if err != nil {
		t.Fatal(err)
	}
	check(dst, 1) // f's other name is outside the copied tree
	if n := nlink(filepath.Join(filepath.Dir(dst), "outside", "keep")); n != 1 {
		t.Errorf("the host file the symlink names has %d links, want 1", n)
	}
	// Into an existing directory: the paths start there.
	into := t.TempDir()
	if err := cmdGet([]string{img, "/top", into}, io.Discard); err != nil {
		t.Fatal(err)
	}
	check(filepath.Join(into, "top"), 1)
	into = t.TempDir()
	if err := cmdGet([]string{img, "/", into}, io.Discard); err != nil {
		t.Fatal(err)
	}
	check(filepath.Join(into, "top"), 2)
	if a, b := filepath.Join(into, "top", "f"), filepath.Join(into, "other", "outside"); !sameFile(t, a, b) {
		t.Errorf("%s and %s are not one file", a, b)
	}
}

func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	fa, err1 := os.Lstat(a)
	fb, err2 := os.Lstat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}

// TestGetSkippedBounded: the special files get leaves out are listed up to
// maxWalkProblems, then counted, so an image of many device nodes does
// not make an error of as many lines.
func TestGetSkippedBounded(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.MkdirAll(filepath.Join(src, "top"), 0o755)
	img := filepath.Join(dir, "img")
	if _, errOut, code := runCmd(t, "mkfs", "-b", "1024", "-d", src, img, "8M"); code != 0 {
		t.Fatal(errOut)
	}
	const n = maxWalkProblems + 30
	script := []string{"cd /top"}
	for i := range n {
		script = append(script, fmt.Sprintf("mknod disk%03d b 8 %d", i, i))
	}
	e2fs.DebugfsScript(t, img, true, script)
	_, err := getConfined(t, img, "/top")
	if err == nil {
		t.Fatal("get of devices without -p: no error")
	}
	msg := err.Error()
	if got := strings.Count(msg, "without -p"); got != maxWalkProblems {
		t.Errorf("%d devices listed, want %d", got, maxWalkProblems)
	}
	if !strings.Contains(msg, fmt.Sprintf("%d special files not made", n)) || !strings.Contains(msg, "and 30 more") {
		t.Errorf("the error does not count the %d devices: %.2000s", n, msg)
	}
}
