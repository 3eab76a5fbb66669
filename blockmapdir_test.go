package ext4io_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/ext4iotest"
)

// TestBlockMappedDirError: a change to a block-mapped (ext3-made)
// directory fails with ErrUnsupported and an error that names the
// directory ("/" for the root) and says why.
func TestBlockMappedDirError(t *testing.T) {
	img := filepath.Join(t.TempDir(), "ext3.img")
	ext4iotest.Mkfs(t, img, "16M", "-O", "^extent,^64bit,^flex_bg,^metadata_csum,^huge_file,^dir_nlink,^extra_isize")
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	if err != nil {
		t.Skipf("writable open of the block-mapped image: %v", err)
	}
	defer v.Close()
	for _, c := range []struct {
		op   func() error
		want string
	}{
		{func() error { _, err := v.Create("f"); return err }, `directory "/" (inode 2) is block-mapped (ext2/ext3)`},
		{func() error { return v.Mkdir("lost+found/d", 0o755) }, `directory "lost+found" (inode 11) is block-mapped`},
	} {
		err := c.op()
		if !errors.Is(err, ext4io.ErrUnsupported) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v; want ErrUnsupported with %q", err, c.want)
		}
	}
}

// TestUnsupportedFeatureErrorSaysReadOnlyWorks: a writable open refused
// for a feature names it and says that a read-only open works, which it
// does.
func TestUnsupportedFeatureErrorSaysReadOnlyWorks(t *testing.T) {
	img := filepath.Join(t.TempDir(), "quota.img")
	ext4iotest.Mkfs(t, img, "16M", "-O", "quota")
	_, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	if !errors.Is(err, ext4io.ErrUnsupported) || !strings.Contains(err.Error(), "ro_compat feature quota (a read-only open works)") {
		t.Fatalf("writable open of a quota image: %v", err)
	}
	v, err := ext4io.OpenImage(img, ext4io.Options{})
	if err != nil {
		t.Fatalf("read-only open of a quota image: %v", err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
}
