package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ext4io/ext4io/internal/e2fs"
)

func runCmd(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return out.String(), errb.String(), code
}

func TestCommands(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.MkdirAll(filepath.Join(src, "sub"), 0o755)
	data := bytes.Repeat([]byte("ext4io\n"), 5000)
	os.WriteFile(filepath.Join(src, "sub", "file"), data, 0o600)
	os.Symlink("sub/file", filepath.Join(src, "link"))
	img := filepath.Join(dir, "img")
	e2fs.Mkfs(t, img, "16M", "-b", "1024", "-L", "testlabel", "-d", src)

	out, _, code := runCmd(t, "info", img)
	if code != 0 || !strings.Contains(out, "testlabel") || !regexp.MustCompile(`Block size:\s+1024`).MatchString(out) {
		t.Fatalf("info: code %d\n%s", code, out)
	}
	out, _, code = runCmd(t, "ls", img, "/")
	if code != 0 || !strings.Contains(out, "sub") || !strings.Contains(out, "link") {
		t.Fatalf("ls: code %d\n%s", code, out)
	}
	out, _, code = runCmd(t, "cat", img, "link")
	if code != 0 || out != string(data) {
		t.Fatalf("cat: code %d, %d bytes", code, len(out))
	}
	out, _, code = runCmd(t, "stat", img, "sub/file")
	if code != 0 || !strings.Contains(out, "-rw-------") || !strings.Contains(out, "Size:") {
		t.Fatalf("stat: code %d\n%s", code, out)
	}
	out, _, code = runCmd(t, "fiemap", img, "sub/file")
	debugfsRows := e2fs.Extents(t, img, "sub/file")
	if code != 0 || !strings.Contains(out, "extents found") || len(debugfsRows) == 0 ||
		!strings.Contains(out, " "+itoa(debugfsRows[0].Physical)+"..") {
		t.Fatalf("fiemap: code %d\n%s\ndebugfs: %+v", code, out, debugfsRows)
	}

	// Bad input: one-line errors and a non-zero status.
	for _, args := range [][]string{
		{"cat", img, "missing"},
		{"cat", img, "sub"},
		{"info", filepath.Join(dir, "nope.img")},
		{"info", filepath.Join(src, "sub", "file")}, // not an ext4 image
	} {
		_, errOut, code := runCmd(t, args...)
		if code != 1 || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || errOut == "" {
			t.Errorf("%v: code %d, stderr %q", args, code, errOut)
		}
	}
	if _, _, code := runCmd(t, "bogus"); code != 2 {
		t.Errorf("unknown command: code %d", code)
	}
	if _, _, code := runCmd(t, "cat", img); code != 2 {
		t.Errorf("missing argument: code %d", code)
	}
}

func TestMkfsCommand(t *testing.T) {
	img := filepath.Join(t.TempDir(), "new.img")
	out, errOut, code := runCmd(t, "mkfs", "-b", "1024", "-O", "^metadata_csum", "-L", "made", img, "32M")
	if code != 0 {
		t.Fatalf("mkfs: %d %s %s", code, out, errOut)
	}
	e2fs.Fsck(t, img)
	info, _, _ := runCmd(t, "info", img)
	if !strings.Contains(info, "made") || strings.Contains(info, "metadata_csum") {
		t.Fatalf("info after mkfs:\n%s", info)
	}
	if _, _, code := runCmd(t, "mkfs", img, "12Q"); code != 2 {
		t.Errorf("bad size: exit %d, want 2 (a usage error)", code)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"4096": 4096, "64M": 64 << 20, "2G": 2 << 30, "1T": 1 << 40, "10MiB": 10 << 20} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "0", "1X", "99999999999P"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) accepted", in)
		}
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
