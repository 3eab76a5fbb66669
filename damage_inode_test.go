package ext4io_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestUnusedInodeReferenced: a directory entry naming an inode that is
// unused (links count 0, mode 0: zeroed, or cleared by debugfs clri) is
// corruption, as Linux's ext4_lookup reports it ("deleted inode
// referenced", EFSCORRUPTED): it must not read as an empty regular file.
// An all-zero inode passes the checksum test (it is how unused inodes
// look), so the check must come from the inode's contents.
func TestUnusedInodeReferenced(t *testing.T) {
	for _, how := range []string{"zeroed", "clri"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			src := filepath.Join(dir, "src")
			os.MkdirAll(filepath.Join(src, "sub"), 0o755)
			os.WriteFile(filepath.Join(src, "sub", "victim"), []byte("some bytes"), 0o644)
			img := filepath.Join(dir, "img")
			e2fs.Mkfs(t, img, "8M", "-d", src, "-O", "^has_journal", "-b", "1024")
			v, err := ext4io.OpenImage(img, ext4io.Options{})
			if err != nil {
				t.Fatal(err)
			}
			fi, err := v.Lstat("sub/victim")
			if err != nil {
				t.Fatal(err)
			}
			sb := v.Superblock()
			g, idx := sb.InodeLocation(fi.Ino)
			gd, _ := v.Group(int(g))
			off := int64(gd.InodeTable)*int64(v.BlockSize()) + int64(idx)*int64(sb.InodeSizeBytes())
			isz := sb.InodeSizeBytes()
			v.Close()
			if how == "zeroed" {
				f, err := os.OpenFile(img, os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				f.WriteAt(make([]byte, isz), off)
				f.Close()
			} else {
				e2fs.Debugfs(t, img, true, fmt.Sprintf("clri <%d>", fi.Ino))
			}
			v, err = ext4io.OpenImage(img, ext4io.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			if fi, err := v.Stat("sub/victim"); !errors.Is(err, ext4io.ErrCorrupt) {
				t.Errorf("Stat of a name whose inode is unused: %v, %v; want ErrCorrupt (Linux: deleted inode referenced)", fi, err)
			}
			if _, err := v.Open("sub/victim"); !errors.Is(err, ext4io.ErrCorrupt) {
				t.Errorf("Open: %v; want ErrCorrupt", err)
			}
			if _, err := fs.ReadDir(v.FS(), "sub"); !errors.Is(err, ext4io.ErrCorrupt) {
				t.Errorf("FS.ReadDir of its directory: %v; want ErrCorrupt (entry infos read the inode)", err)
			}
		})
	}
}

// TestRootNotDirectory: a root inode that is not a directory is
// corruption (Linux refuses to mount: "root inode is not a directory"),
// not "file does not exist".
func TestRootNotDirectory(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "img")
	e2fs.Mkfs(t, img, "8M", "-O", "^has_journal")
	e2fs.Debugfs(t, img, true, "sif <2> mode 0100644")
	v, err := ext4io.OpenImage(img, ext4io.Options{})
	if err != nil {
		if !errors.Is(err, ext4io.ErrCorrupt) {
			t.Fatalf("Open: %v; want ErrCorrupt or success", err)
		}
		return
	}
	defer v.Close()
	for _, op := range []struct {
		name string
		fn   func() error
	}{
		{"FS.Stat(.)", func() error { _, err := fs.Stat(v.FS(), "."); return err }},
		{"FS.ReadDir(.)", func() error { _, err := fs.ReadDir(v.FS(), "."); return err }},
		{"Stat(lost+found)", func() error { _, err := v.Stat("lost+found"); return err }},
	} {
		if err := op.fn(); !errors.Is(err, ext4io.ErrCorrupt) {
			t.Errorf("%s with a regular-file root: %v; want ErrCorrupt", op.name, err)
		}
	}
}
