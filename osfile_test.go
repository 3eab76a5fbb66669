package ext4io_test

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// File is an os.File look-alike: these are what io.Copy, fs.WalkDir and
// friends look for.
var (
	_ io.Writer          = (*ext4io.File)(nil)
	_ io.StringWriter    = (*ext4io.File)(nil)
	_ io.ReaderFrom      = (*ext4io.File)(nil)
	_ io.WriterTo        = (*ext4io.File)(nil)
	_ io.ReadWriteSeeker = (*ext4io.File)(nil)
	_ io.ReaderAt        = (*ext4io.File)(nil)
	_ io.WriterAt        = (*ext4io.File)(nil)
	_ fs.File            = (*ext4io.File)(nil)
	_ fs.ReadDirFile     = (*ext4io.File)(nil)
	_ ext4io.FileHandle  = (*ext4io.File)(nil)
	_ ext4io.FileHandle  = (*os.File)(nil)
)

// TestOSFile: the position shared by Read, Write and Seek; WriteAt leaving
// it; O_APPEND; read-only Files refusing writes with EBADF; Name as given.
func TestOSFile(t *testing.T) {
	v, img := openOSVolume(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(v.MkdirAll("dir/sub", 0o755))
	f, err := v.Create("dir/sub/f")
	must(err)
	if f.Name() != "dir/sub/f" {
		t.Fatalf("Name %q", f.Name())
	}
	if fi, _ := f.Stat(); fi.Name() != "f" || fi.Mode() != 0o666 {
		t.Fatalf("Stat name %q mode %v", fi.Name(), fi.Mode())
	}
	if _, err := f.WriteString("hello, "); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("world")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("H"), 0); err != nil { // the position stays at 12
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("!")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(f)
	if err != nil || string(got) != "Hello, world!" {
		t.Fatalf("read back %q, %v", got, err)
	}
	must(f.Close())

	// Create truncates, as os.Create does.
	f, err = v.Create("dir/sub/f")
	must(err)
	if fi, _ := f.Stat(); fi.Size() != 0 {
		t.Fatalf("Create of an existing file left %d bytes", fi.Size())
	}
	must(f.Close())
	must(v.WriteFile("dir/sub/f", []byte("abc"), 0o600))

	// O_APPEND.
	a, err := v.OpenFile("dir/sub/f", os.O_WRONLY|os.O_APPEND, 0)
	must(err)
	if _, err := a.Write([]byte("def")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.WriteAt([]byte("x"), 0); err == nil {
		t.Fatal("WriteAt on an O_APPEND file succeeded")
	}
	if _, err := a.Read(make([]byte, 1)); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("Read of a write-only file: %v", err)
	}
	must(a.Close())
	if b, err := v.ReadFile("dir/sub/f"); err != nil || string(b) != "abcdef" {
		t.Fatalf("ReadFile %q, %v", b, err)
	}

	// Read-only Files refuse writes as os's do.
	r, err := v.Open("dir/sub/f")
	must(err)
	_, err = r.Write([]byte("x"))
	var pe *fs.PathError
	if !errors.Is(err, syscall.EBADF) || !errors.Is(err, ext4io.ErrBadFile) || !errors.As(err, &pe) || pe.Path != "dir/sub/f" || pe.Op != "write" {
		t.Fatalf("write to a read-only file: %v", err)
	}
	if err := r.Truncate(0); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("truncate of a read-only file: %v", err)
	}
	must(r.Close())

	// Errors: the full path, one prefix, errnos.
	_, err = v.Open("dir/sub/f/x")
	if !errors.Is(err, ext4io.ErrNotDir) || !errors.Is(err, syscall.ENOTDIR) || !errors.As(err, &pe) || pe.Path != "dir/sub/f/x" {
		t.Fatalf("open through a file: %v", err)
	}
	if s := err.Error(); s != "open dir/sub/f/x: not a directory" {
		t.Fatalf("message %q", s)
	}
	_, err = v.OpenFile("dir/sub/f", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if !errors.Is(err, fs.ErrExist) || !errors.Is(err, syscall.EEXIST) || strings.Count(err.Error(), "open") != 1 {
		t.Fatalf("O_EXCL: %v", err)
	}
	if _, err := v.OpenFile("dir", os.O_RDWR, 0); !errors.Is(err, syscall.EISDIR) {
		t.Fatalf("write open of a directory: %v", err)
	}
	if err := v.Remove("dir"); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Fatalf("remove of a full directory: %v", err)
	}

	// ReadDir(n) on a directory File, and ReadDir sorted.
	for _, n := range []string{"c", "a", "b"} {
		must(v.WriteFile("dir/"+n, nil, 0o644))
	}
	d, err := v.Open("dir")
	must(err)
	var names []string
	for {
		ents, err := d.ReadDir(1)
		if err == io.EOF {
			break
		}
		must(err)
		names = append(names, ents[0].Name())
	}
	must(d.Close())
	if len(names) != 4 {
		t.Fatalf("ReadDir(1) loop: %v", names)
	}
	ents, err := v.ReadDir("dir")
	must(err)
	var sorted []string
	for _, e := range ents {
		sorted = append(sorted, e.Name())
	}
	if strings.Join(sorted, ",") != "a,b,c,sub" {
		t.Fatalf("ReadDir: %v", sorted)
	}
	must(v.RemoveAll("dir"))
	if _, err := v.Stat("dir"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after RemoveAll: %v", err)
	}
	must(v.Close())
	e2fs.Fsck(t, img)
}

// TestOSFileCopy: io.Copy into and out of buffered and direct Files, at
// aligned and unaligned positions (ReadFrom and WriteTo).
func TestOSFileCopy(t *testing.T) {
	t.Parallel()
	v, img := openOSVolume(t)
	data := make([]byte, 3<<20+12345)
	for i := range data {
		data[i] = byte(i*31 + i>>9)
	}
	for _, tc := range []struct {
		name  string
		flag  int
		start int64
	}{
		{"buffered", 0, 0},
		{"buffered-off", 0, 777},
		{"direct", ext4io.O_DIRECT, 0},
		{"direct-off", ext4io.O_DIRECT, 777},
		{"direct-block", ext4io.O_DIRECT, 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := v.OpenFile(tc.name, os.O_RDWR|os.O_CREATE|tc.flag, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.Seek(tc.start, io.SeekStart); err != nil {
				t.Fatal(err)
			}
			n, err := io.Copy(f, bytes.NewReader(data)) // ReadFrom
			if err != nil || n != int64(len(data)) {
				t.Fatalf("copy in: %d, %v", n, err)
			}
			if fi, _ := f.Stat(); fi.Size() != tc.start+int64(len(data)) {
				t.Fatalf("size %d", fi.Size())
			}
			if _, err := f.Seek(tc.start, io.SeekStart); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			n, err = io.Copy(&out, f) // WriteTo
			if err != nil || n != int64(len(data)) || !bytes.Equal(out.Bytes(), data) {
				t.Fatalf("copy out: %d, %v, equal %v", n, err, bytes.Equal(out.Bytes(), data))
			}
			if pos, _ := f.Seek(0, io.SeekCurrent); pos != tc.start+int64(len(data)) {
				t.Fatalf("position %d after WriteTo", pos)
			}
		})
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	e2fs.Fsck(t, img)
}
