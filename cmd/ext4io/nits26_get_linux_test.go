package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestGetLinkIntoUnsearchable: a further name of an inode whose first
// copy lies in a directory the image gives no search permission (mode
// 000) is still linked when get does not run as root: such a directory
// gets its mode last. Run as root, the test runs get as nobody (the test
// binary, copied where nobody can run it, serves as ext4io).
func TestGetLinkIntoUnsearchable(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.MkdirAll(filepath.Join(src, "top", "locked", "deeper"), 0o755)
	os.MkdirAll(filepath.Join(src, "top", "z"), 0o755)
	os.WriteFile(filepath.Join(src, "top", "locked", "deeper", "f"), []byte("data\n"), 0o644)
	os.Link(filepath.Join(src, "top", "locked", "deeper", "f"), filepath.Join(src, "top", "z", "g"))
	os.Chmod(filepath.Join(src, "top", "locked", "deeper"), 0o200)
	os.Chmod(filepath.Join(src, "top", "locked"), 0)
	img := filepath.Join(dir, "img")
	if _, errOut, code := runCmd(t, "mkfs", "-b", "1024", "-d", src, img, "8M"); code != 0 {
		t.Fatal(errOut)
	}
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(out, "t")
	t.Cleanup(func() {
		os.Chmod(filepath.Join(dst, "locked"), 0o755)
		os.Chmod(filepath.Join(dst, "locked", "deeper"), 0o755)
	})
	if os.Geteuid() != 0 {
		if err := cmdGet([]string{img, "/top", dst}, io.Discard); err != nil {
			t.Fatal(err)
		}
	} else {
		os.Chmod(img, 0o644)
		if err := os.Chown(out, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if b, err := asNobody(t, dir, "get", img, "/top", dst).CombinedOutput(); err != nil {
			t.Fatalf("get as nobody: %v\n%s", err, b)
		}
	}
	for p, want := range map[string]os.FileMode{"locked": 0, "locked/deeper": 0o200 &^ umask(), "z": 0o755 &^ umask()} {
		fi, err := os.Lstat(filepath.Join(dst, p))
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s has mode %v, want %v", p, got, want)
		}
	}
	fi, err := os.Lstat(filepath.Join(dst, "z", "g"))
	if err != nil || fi.Sys().(*syscall.Stat_t).Nlink != 2 {
		t.Fatalf("z/g: %v, want the second name of locked/deeper/f", err)
	}
}

// asNobody returns the command running ext4io with args as user nobody:
// the test binary, copied into dir (which, with its parent, it makes
// readable by all), serves as ext4io.
func asNobody(t *testing.T, dir string, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "ext4io")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Dir(dir), dir} {
		os.Chmod(p, 0o755)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), mountChildEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	return cmd
}

// TestMkfsDirUnsearchableOneLine: mkfs -d of a directory whose entries
// cannot be stat'ed (read but no search permission, not root) reports
// them as one line that counts them, not a line each.
func TestMkfsDirUnsearchableOneLine(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run mkfs -d as nobody")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.MkdirAll(filepath.Join(src, "d"), 0o755)
	const n = 200
	for i := range n {
		os.WriteFile(filepath.Join(src, "d", fmt.Sprintf("f%03d", i)), nil, 0o644)
	}
	os.Chmod(filepath.Join(src, "d"), 0o644) // readable, not searchable
	out := filepath.Join(dir, "out")
	os.Mkdir(out, 0o755)
	if err := os.Chown(out, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	b, err := asNobody(t, dir, "mkfs", "-d", src, filepath.Join(out, "img"), "8M").CombinedOutput()
	if err == nil {
		t.Fatalf("mkfs -d as nobody of an unsearchable directory: no error\n%s", b)
	}
	msg := string(b)
	if lines := strings.Count(msg, "\n"); lines > 5 || len(msg) > 1000 || !strings.Contains(msg, fmt.Sprintf("%d errors", n)) {
		t.Errorf("mkfs -d: %d lines, want a few lines counting the %d failures:\n%.1000s", lines, n, msg)
	}
	if !strings.Contains(msg, "permission denied") {
		t.Errorf("mkfs -d does not say why: %.1000s", msg)
	}
}
