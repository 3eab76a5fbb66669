package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMkfsDirNewImageInsideTree: mkfs -d of a tree into a new image
// whose path lies inside the tree is refused before anything is written,
// as docs/cli.md says of "IMAGE itself inside DIR": the walk ran before
// the image existed, so the check of the image's own inode missed it,
// and the copy then met the new image and copied it into itself.
func TestMkfsDirNewImageInsideTree(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(filepath.Join(src, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "a"), []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, img := range []string{
		filepath.Join(src, "me.img"),
		filepath.Join(src, "sub", "me.img"),
		filepath.Join(src, "sub", "..", "me.img"),
	} {
		_, errOut, code := runCmd(t, "mkfs", "-b", "1024", "-d", src, img, "8M")
		if code == 0 || !strings.Contains(errOut, "the image would be created inside the source tree") {
			t.Errorf("mkfs -d %s %s: exit %d, %q; want a refusal", src, img, code, errOut)
		}
		if _, err := os.Stat(img); !os.IsNotExist(err) {
			t.Errorf("refused mkfs -d left %s: %v", img, err)
			os.Remove(img)
		}
	}
	// An image beside the tree, or in a directory the tree does not hold,
	// is fine.
	img := filepath.Join(dir, "ok.img")
	if _, errOut, code := runCmd(t, "mkfs", "-b", "1024", "-d", filepath.Join(src, "sub"), img, "8M"); code != 0 {
		t.Errorf("mkfs -d of a sibling tree: exit %d, %s", code, errOut)
	}
}
