package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestMkfsRefusesExistingExt4: mkfs on a file that already holds ext4
// refuses, naming what it found, and leaves it untouched; -F overwrites.
// A file of other bytes is formatted without -F.
func TestMkfsRefusesExistingExt4(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "x.img")
	if out, errOut, code := runCmd(t, "mkfs", "-L", "precious", img, "16M"); code != 0 {
		t.Fatalf("mkfs: %d %s %s", code, out, errOut)
	}
	before, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	_, errOut, code := runCmd(t, "mkfs", "-L", "other", img, "16M")
	if code == 0 || !strings.Contains(errOut, "already contains an ext4 file system") ||
		!strings.Contains(errOut, `"precious"`) || !strings.Contains(errOut, "-F") {
		t.Fatalf("mkfs over ext4 without -F: code %d, %q", code, errOut)
	}
	after, _ := os.ReadFile(img)
	if string(after) != string(before) {
		t.Fatal("refused mkfs changed the image")
	}
	if out, errOut, code := runCmd(t, "mkfs", "-F", "-L", "other", img, "16M"); code != 0 {
		t.Fatalf("mkfs -F: %d %s %s", code, out, errOut)
	}
	if info, _, _ := runCmd(t, "info", img); !strings.Contains(info, "other") {
		t.Fatalf("info after mkfs -F:\n%s", info)
	}
	e2fs.Fsck(t, img)

	junk := filepath.Join(dir, "junk.img")
	os.WriteFile(junk, []byte(strings.Repeat("not a file system ", 1000)), 0o644)
	if out, errOut, code := runCmd(t, "mkfs", junk, "16M"); code != 0 {
		t.Fatalf("mkfs of a non-ext4 file: %d %s %s", code, out, errOut)
	}
}

// TestMkfsFailureLeavesNoFile: a mkfs that fails leaves no new file; a
// failing mkfs of an existing file keeps it.
func TestMkfsFailureLeavesNoFile(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "new.img")
	// 64 KiB is too small for a file system: Format fails after CreateFile,
	// and the error says how large the image must be.
	if _, errOut, code := runCmd(t, "mkfs", img, "64K"); code != 1 || !strings.Contains(errOut, "needs at least 65 blocks (266240 bytes)") {
		t.Fatalf("mkfs of 64 KiB: exit %d, %s", code, errOut)
	}
	if _, err := os.Stat(img); !os.IsNotExist(err) {
		t.Fatalf("failed mkfs left %s behind: %v", img, err)
	}
	keep := filepath.Join(dir, "keep.img")
	os.WriteFile(keep, []byte("x"), 0o644)
	if _, _, code := runCmd(t, "mkfs", keep, "64K"); code == 0 {
		t.Fatal("mkfs of 64 KiB succeeded")
	}
	if _, err := os.Stat(keep); err != nil {
		t.Fatalf("failed mkfs removed an existing file: %v", err)
	}
}

// TestMountedRefused: mkfs (even -F) and recover refuse an image Linux
// has mounted, naming the mount point, and leave it as it was.
func TestMountedRefused(t *testing.T) {
	img := filepath.Join(t.TempDir(), "m.img")
	e2fs.Mkfs(t, img, "16M")
	dir := e2fs.Mount(t, img, false)
	st, _ := os.Stat(img)
	for _, args := range [][]string{{"mkfs", "-F", img, "32M"}, {"mkfs", "-F", img, "16M"}, {"recover", img}} {
		_, errOut, code := runCmd(t, args...)
		if code == 0 || !strings.Contains(errOut, "mounted on "+dir) {
			t.Errorf("%q on a mounted image: code %d, %q", args, code, errOut)
		}
	}
	if st2, _ := os.Stat(img); st2.Size() != st.Size() {
		t.Errorf("refused mkfs resized the image: %d -> %d", st.Size(), st2.Size())
	}
	e2fs.Unmount(t, dir)
	e2fs.Fsck(t, img)
}

// TestMkfsBadOptionSaysWhatWorks: a refused block or inode size names the
// values mkfs takes, so the user need not guess.
func TestMkfsBadOptionSaysWhatWorks(t *testing.T) {
	img := filepath.Join(t.TempDir(), "o.img")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"mkfs", "-b", "3000", img, "8M"}, "block size 3000: want a power of two from 1024 to 65536"},
		{[]string{"mkfs", "-b", "1024", "-I", "2048", img, "8M"}, "inode size 2048: want a power of two from 128 to the block size (1024)"},
	} {
		if _, errOut, code := runCmd(t, c.args...); code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %q", c.args, code, errOut, c.want)
		}
	}
}
