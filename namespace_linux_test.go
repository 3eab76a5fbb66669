package ext4io_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestNamespaceLinuxFilledDir: a directory Linux filled with tens of
// thousands of entries (an htree of Linux's making) is read completely by
// ext4io, then extended (leaf and index splits in Linux's tree), thinned
// and renamed into; e2fsck stays clean and Linux sees exactly the result.
func TestNamespaceLinuxFilledDir(t *testing.T) {
	t.Parallel()
	n := nsEnv("EXT4IO_NS_LINUX", sized(6000, 12000, 40000)) // two htree levels at 1 KiB blocks
	img := filepath.Join(t.TempDir(), "linux.img")
	e2fs.Mkfs(t, img, "64M", "-b", "1024", "-N", "40000")
	mnt := mountLoop(t, img)
	if err := os.Mkdir(filepath.Join(mnt, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		f, err := os.Create(filepath.Join(mnt, "d", fmt.Sprintf("linux-made-entry-%06d", i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	umount(t, mnt, img)
	e2fs.Fsck(t, img)

	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	ents, err := v.ReadDir("d")
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != n {
		t.Fatalf("ext4io reads %d entries, Linux made %d", len(ents), n)
	}
	want := map[string]bool{}
	for i := 0; i < n; i++ {
		want[fmt.Sprintf("linux-made-entry-%06d", i)] = true
	}
	for i := 0; i < n; i += 7 {
		name := fmt.Sprintf("linux-made-entry-%06d", i)
		if err := v.Unlink("d/" + name); err != nil {
			t.Fatal(err)
		}
		delete(want, name)
	}
	for i := 0; i < n/2; i++ {
		name := fmt.Sprintf("ext4io-made-entry-with-longer-name-%06d", i)
		f, err := v.Create("d/" + name)
		if err != nil {
			t.Fatalf("create #%d: %v", i, err)
		}
		f.Close()
		want[name] = true
	}
	for i := 1; i < n; i += 97 {
		old := fmt.Sprintf("linux-made-entry-%06d", i)
		if !want[old] {
			continue
		}
		nw := fmt.Sprintf("renamed-%06d", i)
		if err := v.Rename("d/"+old, "d/"+nw); err != nil {
			t.Fatal(err)
		}
		delete(want, old)
		want[nw] = true
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	e2fs.Fsck(t, img)
	out, _ := exec.Command(e2fs.Tool(t, "debugfs"), "-R", "htree d", img).CombinedOutput()
	_ = out
	mnt = mountLoop(t, img)
	got, err := os.ReadDir(filepath.Join(mnt, "d"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("Linux sees %d entries, want %d", len(got), len(want))
	}
	for _, e := range got {
		if !want[e.Name()] {
			t.Fatalf("Linux sees unexpected %q", e.Name())
		}
		// Lookups go through Linux's htree probe.
	}
	for name := range want {
		if _, err := os.Lstat(filepath.Join(mnt, "d", name)); err != nil {
			t.Fatalf("Linux lookup: %v", err)
		}
	}
}
