package ext4io_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestFastCommitJournal: an image Linux left with fast commits in its
// journal (incompat 0x20, copied while mounted after fsyncs, so it needs
// recovery) is refused with an error naming the feature, not a bare hex
// number; read-only with NoRecovery it opens without replay.
func TestFastCommitJournal(t *testing.T) {
	img := filepath.Join(t.TempDir(), "fc.img")
	e2fs.Mkfs(t, img, "16M", "-O", "fast_commit")
	dir := e2fs.Mount(t, img, false)
	for _, name := range []string{"a", "b"} {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		f.Write([]byte(strings.Repeat(name, 5000)))
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	snap := filepath.Join(t.TempDir(), "snap.img")
	src, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.Create(snap)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	src.Close()
	dst.Close()
	e2fs.Unmount(t, dir)

	for _, opts := range []ext4io.Options{{}, {Writable: true}} {
		_, err := ext4io.OpenImage(snap, opts)
		if err == nil {
			t.Skipf("the kernel left no fast-commit journal to refuse (writable %v)", opts.Writable)
		}
		if !errors.Is(err, ext4io.ErrUnsupported) || !strings.Contains(err.Error(), "fast commits (incompat 0x20)") {
			t.Errorf("open (writable %v): %v, want ErrUnsupported naming fast commits", opts.Writable, err)
		}
	}
	v, err := ext4io.OpenImage(snap, ext4io.Options{NoRecovery: true})
	if err != nil {
		t.Fatalf("read-only NoRecovery open: %v", err)
	}
	defer v.Close()
	if _, err := v.ReadDir("/"); err != nil {
		t.Errorf("ReadDir without replay: %v", err)
	}
}
