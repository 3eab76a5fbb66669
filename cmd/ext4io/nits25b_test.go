package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/ext4io/ext4io/internal/crafted"
)

// TestRecoverLeavesClean checks that after ext4io recover of an image an
// ext4io writer left mid-use (needs_recovery, not clean), the superblock
// says clean as an open for writing and Close would leave it: info and
// dumpe2fs say "clean" and e2fsck -fn finds nothing.
func TestRecoverLeavesClean(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "img")
	if _, errOut, code := runCmd(t, "mkfs", img, "16M"); code != 0 {
		t.Fatalf("mkfs: %s", errOut)
	}
	dev, err := blockdev.OpenFile(img, false)
	if err != nil {
		t.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.WriteFile("/f", []byte("journalled"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := v.Sync(); err != nil {
		t.Fatal(err)
	}
	// A copy of the image now is what a crash leaves.
	raw, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	v.Close()
	dev.Close()
	crash := filepath.Join(dir, "crash")
	if err := os.WriteFile(crash, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _, _ := runCmd(t, "info", crash); !strings.Contains(out, "not clean") {
		t.Fatalf("info of the crash image does not say not clean:\n%s", out)
	}
	if out, errOut, code := runCmd(t, "recover", crash); code != 0 || !strings.Contains(out, "replayed") {
		t.Fatalf("recover: code %d %s\n%s", code, errOut, out)
	}
	out, _, _ := runCmd(t, "info", crash)
	if strings.Contains(out, "not clean") || strings.Contains(out, "needs recovery") || !strings.Contains(out, "clean") {
		t.Errorf("info after recover:\n%s", out)
	}
	dump, err := exec.Command(ext4iotest.Tool(t, "dumpe2fs"), "-h", crash).Output()
	if err != nil || !regexp.MustCompile(`(?m)^Filesystem state: +clean$`).Match(dump) {
		t.Errorf("dumpe2fs after recover: %v\n%s", err, dump)
	}
	ext4iotest.Fsck(t, crash)
	if got, err := readBack(crash, "/f"); err != nil || got != "journalled" {
		t.Errorf("/f after recover = %q, %v", got, err)
	}
}

func readBack(img, name string) (string, error) {
	dev, err := blockdev.OpenFile(img, true)
	if err != nil {
		return "", err
	}
	v, err := ext4io.Open(dev, ext4io.Options{})
	if err != nil {
		dev.Close()
		return "", err
	}
	defer dev.Close()
	defer v.Close()
	b, err := v.ReadFile(name)
	return string(b), err
}

// TestBadNumberMessages checks a bad number gives one message naming what
// was wrong, and that numbers accepting 0 ask for a non-negative one.
func TestBadNumberMessages(t *testing.T) {
	img := filepath.Join(t.TempDir(), "n.img")
	if _, errOut, code := runCmd(t, "mkfs", img, "8M"); code != 0 {
		t.Fatalf("mkfs: %s", errOut)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"fallocate", img, "f", "abc", "xyz"}, `ext4io fallocate: OFFSET: bad size "abc": want a non-negative number`},
		{[]string{"fallocate", img, "f", "0", "xyz"}, `ext4io fallocate: LENGTH: bad size "xyz": want a non-negative number`},
		{[]string{"truncate", img, "f", "abc"}, `ext4io truncate: bad size "abc": want a non-negative number`},
		{[]string{"fstrim", "--offset", "-1", img}, `ext4io fstrim: --offset: bad size "-1": want a non-negative number`},
		{[]string{"mkfs", "-F", img, "0"}, `ext4io mkfs: bad size "0": want a positive number`},
	} {
		_, errOut, code := runCmd(t, c.args...)
		first, _, _ := strings.Cut(errOut, "\n")
		if code != 2 || !strings.HasPrefix(first, c.want) || strings.Count(first, "bad size") != 1 {
			t.Errorf("%q: exit %d, first line %q; want 2 and %q", c.args, code, first, c.want)
		}
	}
}

// TestJournalLogLoopBounded: a log whose every block is a descriptor of
// the same transaction, with no commit, loops for ever. journal listed
// MaxLen descriptors each with its 100 tags (over 100,000 lines for a
// 1,023-block log); it now lists at most one pass over the log's blocks
// and says it stopped early (ErrCorrupt, exit 1).
func TestJournalLogLoopBounded(t *testing.T) {
	img := crafted.LoopingLog(t, t.TempDir())
	out, errOut, code := runCmd(t, "journal", img)
	listed := strings.Count(out, "  block ")
	if code != 1 || listed > 1023 || listed < 1000 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "one pass") {
		t.Errorf("journal of a looping log: exit %d, %d blocks listed (want at most the log's 1023), stderr %q", code, listed, errOut)
	}
}
