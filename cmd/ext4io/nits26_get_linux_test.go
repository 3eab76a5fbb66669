package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
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
		os.Chmod(img, 0o644)
		if err := os.Chown(out, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "get", img, "/top", dst)
		cmd.Env = append(os.Environ(), mountChildEnv+"=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		if b, err := cmd.CombinedOutput(); err != nil {
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
