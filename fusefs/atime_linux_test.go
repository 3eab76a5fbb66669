package fusefs_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/fusefs"
)

// TestMountRelatime: a read that reaches the server updates atime when it
// is not after mtime (relatime), leaving mtime and ctime; the next read
// does not update it again.
func TestMountRelatime(t *testing.T) {
	needFUSE(t)
	img := newImage(t, 32<<20)
	m := mount(t, img, fusefs.Options{})
	p := filepath.Join(m.dir, "f")
	check(t, os.WriteFile(p, []byte("data"), 0o644))
	old := time.Unix(1e9, 0)
	check(t, os.Chtimes(p, old, old.Add(10*time.Second)))
	m.unmount()
	before := lstatImage(t, img, "/f")

	// A fresh mount: the kernel has nothing cached, the read reaches us.
	read := func() {
		m := mount(t, img, fusefs.Options{})
		if b, err := os.ReadFile(filepath.Join(m.dir, "f")); err != nil || string(b) != "data" {
			t.Fatalf("read %q %v", b, err)
		}
		m.unmount()
	}
	start := time.Now().Add(-time.Second)
	read()
	after := lstatImage(t, img, "/f")
	if after.Atime.Before(start) {
		t.Fatalf("atime %v: not updated by a read (atime before mtime)", after.Atime)
	}
	if !after.Mtime.Equal(before.Mtime) || !after.Ctime.Equal(before.Ctime) {
		t.Fatalf("a read changed mtime %v→%v or ctime %v→%v", before.Mtime, after.Mtime, before.Ctime, after.Ctime)
	}
	read()
	if again := lstatImage(t, img, "/f"); !again.Atime.Equal(after.Atime) {
		t.Fatalf("atime %v→%v: a second read updated it (relatime)", after.Atime, again.Atime)
	}
	e2fsck(t, img)
}

func lstatImage(t *testing.T, img, name string) *ext4io.FileInfo {
	t.Helper()
	v, err := ext4io.OpenImage(img, ext4io.Options{})
	check(t, err)
	defer v.Close()
	fi, err := v.Lstat(name)
	check(t, err)
	return fi
}
