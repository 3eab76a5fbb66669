package ext4io_test

import (
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/ext4iotest"
)

// TestAdv23InlineSparseTail: mkfs.ext4 -d on an inline_data volume
// stores a file that is all hole as an inline inode whose i_size (10 MiB)
// is past the bytes it stores, which e2fsck accepts and Linux reads as
// zeroes. ext4io reads it the same way, and a write converts it keeping
// its size and contents.
func TestAdv23InlineSparseTail(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	const size = 10 << 20
	f, err := os.Create(filepath.Join(src, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	img := filepath.Join(dir, "img")
	ext4iotest.Mkfs(t, img, "16M", "-b", "1024", "-O", "inline_data", "-d", src)
	if out := ext4iotest.Debugfs(t, img, false, "stat /sparse"); !bytes.Contains([]byte(out), []byte("Size of inline data")) {
		t.Skipf("mkfs.ext4 did not store the file inline:\n%s", out)
	}
	ext4iotest.Fsck(t, img)

	v, err := ext4io.OpenImage(img, ext4io.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := v.ReadFile("sparse")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != size || !bytes.Equal(got, make([]byte, size)) {
		t.Fatalf("read %d bytes, want %d zero bytes", len(got), size)
	}
	r, err := v.Open("sparse")
	if err != nil {
		t.Fatal(err)
	}
	b := []byte{1, 2, 3, 4}
	if n, err := r.ReadAt(b, size-2); n != 2 || err != io.EOF || !bytes.Equal(b[:2], []byte{0, 0}) {
		t.Fatalf("ReadAt at the end: %d %v %v", n, err, b)
	}
	r.Close()
	v.Close()

	v, err = ext4io.OpenImage(img, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	w, err := v.OpenFile("sparse", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt([]byte("abc"), 5); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	ext4iotest.Fsck(t, img)
	want := make([]byte, size)
	copy(want[5:], "abc")
	if got := ext4iotest.Dump(t, img, "/sparse"); !bytes.Equal(got, want) {
		t.Fatalf("after the write debugfs dumps %d bytes, want %d with abc at 5", len(got), size)
	}
}

// TestAdv23SpecialFileReadAt: a fifo or device with a crafted i_size maps
// no bytes: ReadAt past offset 0 reads nothing (it sliced the empty
// inline bytes at the offset and panicked).
func TestAdv23SpecialFileReadAt(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "img")
	ext4iotest.Mkfs(t, img, "8M", "-b", "1024")
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Mknod("p", fs.ModeNamedPipe|0o644, 0); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	ext4iotest.Debugfs(t, img, true, "sif /p size 100")
	v, err = ext4io.OpenImage(img, ext4io.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	f, err := v.Open("p")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 10)
	for _, off := range []int64{0, 10, 99} {
		if n, err := f.ReadAt(b, off); n != 0 || err != io.EOF {
			t.Errorf("ReadAt at %d: %d, %v; want 0, EOF", off, n, err)
		}
	}
}
