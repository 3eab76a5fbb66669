//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestAdv23GetInlineSparse: a file that is all hole, stored inline by
// mkfs.ext4 -d on an inline_data volume (i_size 1 GiB, no bytes stored),
// comes out as a sparse file of that size, not as 1 GiB of written
// zeroes (or, at a crafted i_size of terabytes, a run that fills the
// host's disk).
func TestAdv23GetInlineSparse(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(src, "f"), 1<<30); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "img")
	e2fs.Mkfs(t, img, "16M", "-b", "1024", "-O", "inline_data", "-d", src)
	if out := e2fs.Debugfs(t, img, false, "stat /f"); !strings.Contains(out, "Size of inline data") {
		t.Skipf("mkfs.ext4 did not store the file inline:\n%s", out)
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
		t.Errorf("%d bytes allocated on the host for a file that is all hole", used)
	}
}
