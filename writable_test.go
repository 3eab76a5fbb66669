package ext4io_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/ext4io/ext4io/layout"
)

// TestWritableMountState: while a writable volume is open the superblock
// says "not clean" (journal or not: Options.Writable's doc), needs_recovery
// is set and the mount count went up; Close marks it clean with
// exact free counts, and e2fsck finds nothing to fix — on images made by
// ext4io.Format and by mkfs.ext4 (with resize_inode).
func TestWritableMountState(t *testing.T) {
	imgs := map[string]string{
		"format":   formatImage(t, 64<<20, ext4io.FormatOptions{}),
		"format1k": formatImage(t, 32<<20, ext4io.FormatOptions{BlockSize: 1024, Features: "^metadata_csum"}),
	}
	mk := filepath.Join(t.TempDir(), "mkfs.img")
	e2fs.Mkfs(t, mk, "64M", "-b", "1024")
	imgs["mkfs"] = mk
	for name, img := range imgs {
		t.Run(name, func(t *testing.T) {
			count := header(t, img, "Mount count")
			v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
			if err != nil {
				t.Fatal(err)
			}
			if st := header(t, img, "Filesystem state"); st != "not clean" {
				t.Errorf("state while open: %q", st)
			}
			if c := header(t, img, "Mount count"); c == count {
				t.Errorf("mount count stayed %s", c)
			}
			feats := " " + header(t, img, "Filesystem features") + " "
			if !strings.Contains(feats, " has_journal ") {
				t.Fatalf("no journal: %s", feats)
			}
			if !strings.Contains(feats, " needs_recovery ") {
				t.Errorf("features while open lack needs_recovery: %s", feats)
			}
			// Allocate and free blocks and inodes: the counts must come
			// back exact.
			a := v.Allocator()
			free := a.FreeBlocks()
			var runs [][2]uint64
			for i := 0; i < 50; i++ {
				s, n, err := a.Alloc(uint64(i*997), 1, uint64(1+i%40))
				if err != nil {
					t.Fatal(err)
				}
				runs = append(runs, [2]uint64{s, n})
			}
			ino, err := a.AllocInode(layout.RootIno, false)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range runs {
				if err := a.Free(r[0], r[1]); err != nil {
					t.Fatal(err)
				}
			}
			if err := a.FreeInode(ino, false); err != nil {
				t.Fatal(err)
			}
			if a.FreeBlocks() != free {
				t.Fatalf("free blocks %d after alloc+free, was %d", a.FreeBlocks(), free)
			}
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			if st := header(t, img, "Filesystem state"); st != "clean" {
				t.Errorf("state after Close: %q", st)
			}
			if feats := header(t, img, "Filesystem features"); strings.Contains(feats, "needs_recovery") {
				t.Errorf("features after Close: %s", feats)
			}
			e2fs.Fsck(t, img)
		})
	}
}

func TestWritableRefusals(t *testing.T) {
	// (inline_data is writable since inline.go; ea_inode is not.)
	img := filepath.Join(t.TempDir(), "eainode.img")
	e2fs.Mkfs(t, img, "16M", "-O", "ea_inode")
	_, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	if !errors.Is(err, ext4io.ErrUnsupported) || !strings.Contains(err.Error(), "ea_inode") {
		t.Fatalf("writable open of ea_inode image: %v", err)
	}
	// A read-only file cannot be opened writable.
	ro := formatImage(t, 16<<20, ext4io.FormatOptions{})
	os.Chmod(ro, 0o444)
	dev, err := blockdev.OpenFile(ro, true)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if _, err := ext4io.Open(dev, ext4io.Options{Writable: true}); err == nil {
		t.Fatal("writable open on a read-only device succeeded")
	}
}
