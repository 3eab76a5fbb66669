package ext4io_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// bigXattrValue returns a file holding a value too large for the inode
// body, so debugfs and Linux put it in an external block.
func bigXattrValue(t *testing.T, n int, fill byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "value")
	if err := os.WriteFile(p, bytes.Repeat([]byte{fill}, n), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestXattrReleaseOnDelete: files whose attributes debugfs put in external
// blocks are removed by ext4io (unlink of the last name, rename over,
// unlink while open then close): every block is freed and e2fsck -fn is
// clean. Before the fix each removal leaked its block ("Block bitmap
// differences").
func TestXattrReleaseOnDelete(t *testing.T) {
	for _, bs := range []string{"1024", "4096"} {
		t.Run("bs"+bs, func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "x.img")
			e2fs.Mkfs(t, img, "16M", "-b", bs, "-I", "256")
			val := bigXattrValue(t, 700, 'v')
			var cmds []string
			for _, f := range []string{"unlinked", "renamed-over", "open-unlinked", "kept", "src", "orphan"} {
				cmds = append(cmds, "write /dev/null "+f)
				if f != "src" {
					cmds = append(cmds, "ea_set -f "+val+" /"+f+" user.big", "ea_set /"+f+" user.small s")
				}
			}
			e2fs.DebugfsScript(t, img, true, cmds)
			for _, f := range []string{"unlinked", "renamed-over", "open-unlinked", "kept", "orphan"} {
				if fileACL(t, img, "/"+f) == "0" {
					t.Fatalf("debugfs put no external xattr block on %s", f)
				}
			}
			e2fs.Fsck(t, img)
			// A crash left "orphan" unlinked on the s_last_orphan chain:
			// Open's orphan cleanup frees it.
			orphanIno := inodeOf(t, img, "/orphan")
			e2fs.DebugfsScript(t, img, true, []string{
				"sif /orphan links_count 0", "unlink /orphan", "ssv last_orphan " + orphanIno})

			v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := v.Unlink("unlinked"); err != nil {
				t.Fatal(err)
			}
			if err := v.Rename("src", "renamed-over"); err != nil {
				t.Fatal(err)
			}
			f, err := v.Open("open-unlinked")
			if err != nil {
				t.Fatal(err)
			}
			if err := v.Unlink("open-unlinked"); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			e2fs.Fsck(t, img)
		})
	}
}

// TestXattrReleaseShared: Linux shares one xattr block between files with
// identical attribute sets (h_refcount > 1). Removing one of them with
// ext4io drops one reference (e2fsck checks h_refcount against the inodes
// naming the block), removing the last frees the block.
func TestXattrReleaseShared(t *testing.T) {
	setfattr := lookTool(t, "setfattr", "attr")
	img := filepath.Join(t.TempDir(), "shared.img")
	e2fs.Mkfs(t, img, "16M", "-b", "1024", "-I", "256")
	mnt := mountLoop(t, img)
	names := []string{"a", "b", "c"}
	for _, n := range names {
		p := filepath.Join(mnt, n)
		if err := os.WriteFile(p, []byte("data of "+n), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, kv := range [][2]string{{"user.big", strings.Repeat("x", 600)}, {"user.other", "same"}} {
			if out, err := exec.Command(setfattr, "-n", kv[0], "-v", kv[1], p).CombinedOutput(); err != nil {
				t.Fatalf("setfattr: %v: %s", err, out)
			}
		}
	}
	umount(t, mnt, img)
	blk := fileACL(t, img, "/a")
	for _, n := range names[1:] {
		if got := fileACL(t, img, "/"+n); got != blk {
			t.Skipf("Linux did not share the xattr block (a: %s, %s: %s)", blk, n, got)
		}
	}
	e2fs.Fsck(t, img)
	for i, n := range names {
		v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Unlink(n); err != nil {
			t.Fatal(err)
		}
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("after removing %d of %d sharers", i+1, len(names))
		e2fs.Fsck(t, img)
	}
}

// inodeOf returns the inode number of path as debugfs reports it.
func inodeOf(t *testing.T, img, path string) string {
	t.Helper()
	out := strings.TrimSpace(e2fs.Debugfs(t, img, false, "stat "+path))
	f := strings.Fields(out)
	if len(f) < 2 || f[0] != "Inode:" {
		t.Fatalf("debugfs stat %s: %s", path, out)
	}
	return f[1]
}

// TestXattrBlockInMetadata: an i_file_acl that names a block of the inode
// table, crafted to hold a valid xattr block shared twice, is refused as
// corruption: no read returns the table's bytes and an unlink neither
// rewrites the refcount into the table nor frees the block.
func TestXattrBlockInMetadata(t *testing.T) {
	img := filepath.Join(t.TempDir(), "x.img")
	e2fs.Mkfs(t, img, "16M", "-b", "4096", "-I", "256", "-O", "^metadata_csum")
	val := bigXattrValue(t, 700, 'v')
	e2fs.DebugfsScript(t, img, true, []string{"write /dev/null f", "ea_set -f " + val + " /f user.big"})
	var src uint64
	if _, err := fmt.Sscan(fileACL(t, img, "/f"), &src); err != nil || src == 0 {
		t.Fatalf("no xattr block on /f: %v", err)
	}
	v, err := ext4io.OpenImage(img, ext4io.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gd, err := v.Group(0)
	if err != nil {
		t.Fatal(err)
	}
	v.Close()
	// The last block of group 0's inode table holds only free inodes.
	sb := v.Superblock()
	itBlocks := uint64(sb.InodesPerGroup) * uint64(sb.InodeSizeBytes()) / 4096
	target := gd.InodeTable + itBlocks - 1
	b := readBlocks(t, img, src, 1)
	binary.LittleEndian.PutUint32(b[4:], 2) // h_refcount: shared
	writeBlock(t, img, target, b)
	e2fs.Debugfs(t, img, true, fmt.Sprintf("sif /f file_acl %d", target))
	before := readBlocks(t, img, target, 1)

	v, err = ext4io.OpenImage(img, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Getxattr("f", "user.big"); !errors.Is(err, ext4io.ErrCorrupt) {
		t.Errorf("Getxattr of a block in the inode table: %v, want ErrCorrupt", err)
	}
	if err := v.Unlink("f"); !errors.Is(err, ext4io.ErrCorrupt) {
		t.Errorf("Unlink of a file whose xattr block is in the inode table: %v, want ErrCorrupt", err)
	}
	v.Close()
	if after := readBlocks(t, img, target, 1); !bytes.Equal(before, after) {
		t.Error("the inode table block changed")
	}
}
