package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestAdv23ControlCharsInNames: names from an image holding an escape
// sequence, a newline or invalid UTF-8 are printed escaped by ls, ls -l
// and in error lines, so that an image cannot drive the terminal or fake
// lines of output; so are attribute names in getfattr's listing and the
// label in info's.
func TestAdv23ControlCharsInNames(t *testing.T) {
	img := filepath.Join(t.TempDir(), "img")
	e2fs.Mkfs(t, img, "8M", "-b", "1024", "-L", "v\x1b[2J")
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	bad := "a\x1b[2J\nfake\xff"
	if err := v.Mkdir(bad, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := v.Symlink("t\x1b]0;x\x07", "l"); err != nil {
		t.Fatal(err)
	}
	if err := v.WriteFile("f", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := v.Setxattr("f", "user.a\x1b[2Jb", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	clean := func(what, s string) {
		t.Helper()
		if strings.ContainsAny(s, "\x1b\x07") || strings.Contains(s, "\xff") || strings.Contains(s, "\nfake") {
			t.Errorf("%s: raw control characters in %q", what, s)
		}
	}
	out, errOut, code := runCmd(t, "ls", img, "/")
	clean("ls", out+errOut)
	if code != 0 || !strings.Contains(out, `a\x1b[2J\nfake\xff`) {
		t.Errorf("ls: %d %q %q", code, out, errOut)
	}
	out, errOut, _ = runCmd(t, "ls", "-l", img, "/")
	clean("ls -l", out+errOut)
	if !strings.Contains(out, `l -> t\x1b]0;x\a`) {
		t.Errorf("ls -l: %q", out)
	}
	out, errOut, _ = runCmd(t, "getfattr", img, "/f")
	clean("getfattr", out+errOut)
	if !strings.Contains(out, `user.a\x1b[2Jb="v"`) {
		t.Errorf("getfattr: %q %q", out, errOut)
	}
	out, errOut, _ = runCmd(t, "info", img)
	clean("info", out+errOut)
	if !strings.Contains(out, `v\x1b[2J`) {
		t.Errorf("info: %q %q", out, errOut)
	}
	_, errOut, code = runCmd(t, "cat", img, "/"+bad)
	clean("cat error", errOut)
	if code != 1 || strings.Count(errOut, "\n") != 1 {
		t.Errorf("cat of a directory: %d %q", code, errOut)
	}
}

// TestAdv23XattrNoFollow: getfattr -h and setfattr -h act on a symlink
// itself, as documented (they printed the help instead, -h being taken
// for a help request); -h alone still asks for help.
func TestAdv23XattrNoFollow(t *testing.T) {
	img := filepath.Join(t.TempDir(), "img")
	e2fs.Mkfs(t, img, "8M", "-b", "1024")
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.WriteFile("f", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := v.Symlink("f", "l"); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runCmd(t, "setfattr", "-h", img, "/l", "trusted.t", "link"); code != 0 || out != "" {
		t.Fatalf("setfattr -h: %d %q %q", code, out, errOut)
	}
	if out, errOut, code := runCmd(t, "setfattr", img, "/l", "user.u", "target"); code != 0 {
		t.Fatalf("setfattr: %d %q %q", code, out, errOut)
	}
	out, errOut, code := runCmd(t, "getfattr", "-h", img, "/l")
	if code != 0 || !strings.Contains(out, `trusted.t="link"`) || strings.Contains(out, "user.u") {
		t.Errorf("getfattr -h /l: %d %q %q", code, out, errOut)
	}
	out, _, _ = runCmd(t, "getfattr", img, "/l")
	if !strings.Contains(out, `user.u="target"`) || strings.Contains(out, "trusted.t") {
		t.Errorf("getfattr /l: %q", out)
	}
	// -h may follow the arguments, as the other commands' flags may;
	// after "--" it is a name.
	out, errOut, code = runCmd(t, "getfattr", img, "/l", "-h")
	if code != 0 || !strings.Contains(out, `trusted.t="link"`) || strings.Contains(out, "user.u") {
		t.Errorf("getfattr /l -h: %d %q %q", code, out, errOut)
	}
	if out, errOut, code := runCmd(t, "setfattr", img, "/l", "trusted.t2", "link2", "-h"); code != 0 || out != "" {
		t.Fatalf("setfattr ... -h: %d %q %q", code, out, errOut)
	}
	if out, _, _ = runCmd(t, "getfattr", "-h", img, "/l", "trusted.t2"); !strings.Contains(out, `trusted.t2="link2"`) {
		t.Errorf("getfattr -h /l trusted.t2 after setfattr ... -h: %q", out)
	}
	if _, errOut, code = runCmd(t, "getfattr", img, "/l", "--", "-h"); code != 1 || !strings.Contains(errOut, `attribute "-h"`) {
		t.Errorf("getfattr /l -- -h: %d %q", code, errOut)
	}
	if out, _, code := runCmd(t, "getfattr", "-h"); code != 0 || !strings.HasPrefix(out, "usage: ext4io getfattr") {
		t.Errorf("getfattr -h alone: %d %q", code, out)
	}
}
