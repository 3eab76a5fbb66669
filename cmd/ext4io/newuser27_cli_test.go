package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestHelpHelp: "ext4io help help", which the usage's last line invites
// ("Run 'ext4io help COMMAND'"), prints the list of commands as "ext4io
// help" does. It said: unknown command "help".
func TestHelpHelp(t *testing.T) {
	want, _, _ := runCmd(t, "help")
	out, errOut, code := runCmd(t, "help", "help")
	if code != 0 || errOut != "" || out != want {
		t.Errorf("help help: exit %d, stderr %q, stdout %q; want exit 0 and the output of help", code, errOut, out)
	}
	if !strings.Contains(out, "Run 'ext4io help COMMAND'") {
		t.Errorf("help: %q", out)
	}
}

// TestWriteDirectMisalignedNew: write --direct at an offset that is not
// block-aligned fails with one line, before it creates PATH. It failed
// after creating it, leaving a new empty file behind.
func TestWriteDirectMisalignedNew(t *testing.T) {
	img := filepath.Join(t.TempDir(), "img")
	if _, errOut, code := runCmd(t, "mkfs", img, "16M"); code != 0 {
		t.Fatal(errOut)
	}
	for _, off := range []string{"100", "512", "4097"} {
		old := stdin
		stdin = bytes.NewReader(make([]byte, 3*4096+10))
		_, errOut, code := runCmd(t, "write", "--direct", "--offset", off, img, "new")
		stdin = old
		want := "ext4io write: --direct: offset " + off + " is not aligned to the 4096-byte block size: invalid argument\n"
		if code != 1 || errOut != want {
			t.Errorf("write --direct --offset %s: exit %d, %q; want exit 1 and %q", off, code, errOut, want)
		}
		if out, _, _ := runCmd(t, "ls", img); out != "lost+found\n" {
			t.Errorf("write --direct --offset %s left: %q", off, out)
		}
	}
}

// TestWriteOffsetSuffix: write --offset takes the K, M, G, T and P
// suffixes that every other size and offset of the command line takes
// (fallocate's OFFSET, fstrim --offset, truncate's SIZE). "--offset 1K"
// was refused: invalid value "1K" for flag -offset: parse error.
func TestWriteOffsetSuffix(t *testing.T) {
	img := filepath.Join(t.TempDir(), "img")
	if _, errOut, code := runCmd(t, "mkfs", img, "16M"); code != 0 {
		t.Fatal(errOut)
	}
	old := stdin
	defer func() { stdin = old }()
	stdin = strings.NewReader("hi\n")
	if out, errOut, code := runCmd(t, "write", "--offset", "1K", img, "f"); code != 0 || out != "wrote 3 bytes at 1024\n" {
		t.Fatalf("write --offset 1K: exit %d, %q %q", code, out, errOut)
	}
	if out, _, code := runCmd(t, "stat", img, "f"); code != 0 || !strings.Contains(out, "1027") {
		t.Errorf("stat after write --offset 1K: %q", out)
	}
	stdin = strings.NewReader("hi\n")
	want := `ext4io write: --offset: bad size "-3": want a non-negative number`
	if _, errOut, code := runCmd(t, "write", "--offset", "-3", img, "f"); code != 2 || !strings.HasPrefix(errOut, want) {
		t.Errorf("write --offset -3: exit %d, %q; want exit 2 and %q", code, errOut, want)
	}
}

// TestNegativeNumberArg: a negative number as an argument (fallocate's
// LENGTH, truncate's SIZE, mkfs's SIZE) is a usage error that says it is
// negative. It read "flag provided but not defined: -1".
func TestNegativeNumberArg(t *testing.T) {
	img := filepath.Join(t.TempDir(), "img")
	if _, errOut, code := runCmd(t, "mkfs", img, "16M"); code != 0 {
		t.Fatal(errOut)
	}
	for _, tc := range []struct {
		args []string
		num  string
	}{
		{[]string{"fallocate", img, "f", "0", "-1"}, "-1"},
		{[]string{"truncate", img, "f", "-5"}, "-5"},
		{[]string{"mkfs", img + "2", "-5M"}, "-5M"},
	} {
		_, errOut, code := runCmd(t, tc.args...)
		want := "ext4io " + tc.args[0] + ": negative number " + tc.num + ": sizes, offsets and lengths are 0 or more\n"
		if code != 2 || !strings.HasPrefix(errOut, want) {
			t.Errorf("%q: exit %d, %q; want exit 2 and %q", tc.args, code, errOut, want)
		}
	}
	// A flag's negative value is still a value.
	if _, errOut, code := runCmd(t, "torture", "--atomic", "-1", "--duration", "1ms", "--max-rounds", "1", "--size", "16M", "--crash-every", "20", "--dir", t.TempDir()); code != 0 {
		t.Errorf("torture --atomic -1: exit %d: %s", code, errOut)
	}
}

// TestPutPartial: a put that runs out of space while copying says that
// the part it copied stays in the image, and where; the image stays
// e2fsck-clean. The error named only the file that failed, and a user
// did not know that a partial tree was left at DST.
func TestPutPartial(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "img")
	if _, errOut, code := runCmd(t, "mkfs", img, "16M"); code != 0 {
		t.Fatal(errOut)
	}
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("not a hole "), 4<<20/11)
	for _, name := range []string{"a", "b", "c", "d", "e"} { // 20 MiB of data
		if err := os.WriteFile(filepath.Join(src, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, errOut, code := runCmd(t, "put", img, src, "/tree")
	if code != 1 || !strings.Contains(errOut, "no space left on device") || !strings.HasSuffix(errOut, "; the part copied stays in the image at /tree\n") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("put of more than the image holds: exit %d, %q", code, errOut)
	}
	if out, _, code := runCmd(t, "ls", img, "/tree"); code != 0 || !strings.HasPrefix(out, "a\n") {
		t.Errorf("ls /tree after the failed put: exit %d, %q", code, out)
	}
	e2fs.Fsck(t, img)
	// A put refused at DST copies nothing, and says nothing of a part.
	_, errOut, code = runCmd(t, "put", img, filepath.Join(src, "a"), "/tree/a")
	if code != 1 || strings.Contains(errOut, "part copied") {
		t.Errorf("put over an existing file: exit %d, %q", code, errOut)
	}
}

// TestMkfsBadOptionsTouchNothing: options Format refuses (a block size
// that is not a power of two, an unknown feature, a long label) fail
// before IMAGE is created or grown. A new IMAGE was created and removed
// ("(x.img removed)"), and an existing small file was grown to SIZE and
// left so.
func TestMkfsBadOptionsTouchNothing(t *testing.T) {
	dir := t.TempDir()
	notes := filepath.Join(dir, "notes.img")
	if err := os.WriteFile(notes, []byte("precious notes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]string{{"-b", "3000"}, {"-O", "bogus"}, {"-L", "a label of more than 16 bytes"}, {"-I", "100"}} {
		for _, img := range []string{notes, filepath.Join(dir, "new.img")} {
			args := append(append([]string{"mkfs"}, bad...), img, "64M")
			_, errOut, code := runCmd(t, args...)
			if code != 1 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "invalid argument") || strings.Contains(errOut, "removed") {
				t.Errorf("%q: exit %d, %q; want exit 1 and one line, nothing removed", args, code, errOut)
			}
		}
	}
	if b, err := os.ReadFile(notes); err != nil || string(b) != "precious notes\n" {
		t.Errorf("notes.img after the failed mkfs: %d bytes, %v", len(b), err)
	}
	if _, err := os.Stat(filepath.Join(dir, "new.img")); !os.IsNotExist(err) {
		t.Errorf("new.img: %v", err)
	}
}
