package main

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/internal/e2fs"
	"golang.org/x/sys/unix"
)

// TestMkfsDirContents: file contents of every size around a block,
// blocks of zeroes and holes, hard links and a fifo come through mkfs -d
// as they are, read back through the library (no mount needed).
func TestMkfsDirContents(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.MkdirAll(filepath.Join(src, "sub"), 0o755)
	rnd := make([]byte, 3<<20)
	rand.Read(rnd)
	files := map[string][]byte{}
	for _, n := range []int{0, 1, 1023, 1024, 1025, 4095, 4096, 4097, 1 << 20} {
		files[fmt.Sprintf("f%d", n)] = rnd[:n]
	}
	// Zero blocks between data: a hole in the image, zeroes when read.
	mixed := slices.Concat(rnd[:5000], make([]byte, 3*4096), rnd[:100])
	files["mixed"] = mixed
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(src, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sparse := filepath.Join(src, "sparse")
	f, _ := os.Create(sparse)
	f.WriteAt([]byte("middle"), 1<<30)
	f.Truncate(2 << 30)
	f.Close()
	os.Link(filepath.Join(src, "f1"), filepath.Join(src, "sub", "f1-link"))
	os.Link(filepath.Join(src, "f1"), filepath.Join(src, "f1-again"))
	if err := syscall.Mkfifo(filepath.Join(src, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "img")
	if out, errOut, code := runCmd(t, "mkfs", "-b", "1024", "-d", src, img, "32M"); code != 0 {
		t.Fatalf("mkfs -d: %d %s %s", code, out, errOut)
	}
	e2fs.Fsck(t, img)
	dev, err := blockdev.OpenFile(img, true)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	v, err := ext4io.Open(dev, ext4io.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	for name, data := range files {
		got, err := v.ReadFile(name)
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s: %d bytes read (%v), want %d equal bytes", name, len(got), err, len(data))
		}
	}
	fi, _ := v.Lstat("mixed")
	if fi.Blocks*512 > 5000+100+2*1024+1024 {
		t.Errorf("mixed: %d bytes allocated, want the zero blocks left as holes", fi.Blocks*512)
	}
	fi, err = v.Lstat("sparse")
	if err != nil || fi.Size() != 2<<30 || fi.Blocks*512 > 8192 {
		t.Fatalf("sparse: %v, size %d, %d bytes allocated", err, fi.Size(), fi.Blocks*512)
	}
	sf, _ := v.Open("sparse")
	got := make([]byte, 6)
	sf.ReadAt(got, 1<<30)
	sf.Close()
	if string(got) != "middle" {
		t.Errorf("sparse at 1 GiB: %q", got)
	}
	a, _ := v.Lstat("f1")
	for _, n := range []string{"sub/f1-link", "f1-again"} {
		b, err := v.Lstat(n)
		if err != nil || b.Ino != a.Ino || b.Nlink != 3 {
			t.Errorf("%s: %v, inode %d links %d; want inode %d with 3 links", n, err, b.Ino, b.Nlink, a.Ino)
		}
	}
	if fi, err := v.Lstat("fifo"); err != nil || fi.Mode() != fs.ModeNamedPipe|0o600 {
		t.Errorf("fifo: %v %v", fi.Mode(), err)
	}
}

// TestMkfsDirRefusedBeforeWriting: a source tree ext4 cannot hold is
// refused, every problem named, before the image is touched: a new image
// is not created, an existing one (with -F) is left byte for byte.
func TestMkfsDirRefusedBeforeWriting(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "old.img")
	e2fs.Mkfs(t, img, "8M", "-b", "1024", "-L", "precious")
	before, _ := os.ReadFile(img)
	for _, tc := range []struct {
		name  string
		build func(t *testing.T, src string)
		want  []string
	}{
		{"long symlink", func(t *testing.T, src string) {
			os.Symlink(strings.Repeat("t", 2000), filepath.Join(src, "long"))
			os.Symlink(strings.Repeat("u", 1500), filepath.Join(src, "long2"))
		}, []string{"long: symlink target of 2000 bytes (at most 1023", "long2: symlink target of 1500"}},
		{"big xattr", func(t *testing.T, src string) {
			p := filepath.Join(src, "x")
			os.WriteFile(p, nil, 0o644)
			if err := unix.Lsetxattr(p, "user.big", bytes.Repeat([]byte("v"), 3000), 0); err != nil {
				t.Skipf("user xattrs here: %v", err)
			}
		}, []string{`x: extended attribute "user.big" of 3000 bytes does not fit`}},
		{"too many inodes", func(t *testing.T, src string) {
			for i := range 2100 {
				os.WriteFile(filepath.Join(src, fmt.Sprint(i)), nil, 0o644)
			}
		}, []string{"needs 2100 inodes", "nothing written"}},
		{"image inside", func(t *testing.T, src string) {
			os.Link(img, filepath.Join(src, "me.img"))
		}, []string{"me.img: the image itself is inside the source tree"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := t.TempDir()
			tc.build(t, src)
			_, errOut, code := runCmd(t, "mkfs", "-F", "-b", "1024", "-d", src, img, "8M")
			for _, w := range tc.want {
				if code == 0 || !strings.Contains(errOut, w) {
					t.Errorf("mkfs -F -d: exit %d, %q; want %q", code, errOut, w)
				}
			}
			if after, _ := os.ReadFile(img); !bytes.Equal(after, before) {
				t.Error("refused mkfs -d changed the existing image")
			}
			if tc.name == "image inside" {
				return // a new image is not in the tree
			}
			fresh := filepath.Join(dir, "fresh.img")
			if _, _, code := runCmd(t, "mkfs", "-b", "1024", "-d", src, fresh, "8M"); code == 0 {
				t.Error("mkfs -d of a new image succeeded")
			}
			if _, err := os.Stat(fresh); !os.IsNotExist(err) {
				t.Errorf("refused mkfs -d left %s: %v", fresh, err)
			}
		})
	}
	if os.Geteuid() != 0 {
		t.Run("unreadable", func(t *testing.T) {
			src := t.TempDir()
			os.WriteFile(filepath.Join(src, "secret"), []byte("x"), 0)
			os.Mkdir(filepath.Join(src, "closed"), 0)
			defer os.Chmod(filepath.Join(src, "closed"), 0o755)
			_, errOut, code := runCmd(t, "mkfs", "-F", "-b", "1024", "-d", src, img, "8M")
			if code == 0 || !strings.Contains(errOut, "secret") || !strings.Contains(errOut, "closed") {
				t.Errorf("mkfs -d of unreadable entries: exit %d, %q", code, errOut)
			}
			if after, _ := os.ReadFile(img); !bytes.Equal(after, before) {
				t.Error("refused mkfs -d changed the existing image")
			}
		})
	}
}

// TestPutRefusesImageInTree: put of a tree that holds the image itself
// is refused, and nothing is added to the image.
func TestPutRefusesImageInTree(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "p.img")
	if _, errOut, code := runCmd(t, "mkfs", img, "8M"); code != 0 {
		t.Fatal(errOut)
	}
	os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644)
	_, errOut, code := runCmd(t, "put", img, dir, "/in")
	if code == 0 || !strings.Contains(errOut, "the image itself is inside the source tree") {
		t.Fatalf("put of a tree holding the image: exit %d, %q", code, errOut)
	}
	if out, _, _ := runCmd(t, "ls", img, "/"); strings.TrimSpace(out) != "lost+found" {
		t.Errorf("refused put left entries: %q", out)
	}
	e2fs.Fsck(t, img)
}

// TestMkfsDirNoSpaceSaysState: a tree that runs out of blocks while
// writing (which the walk cannot foresee) removes a new image, and for an
// existing one says what it now holds, which e2fsck accepts.
func TestMkfsDirNoSpaceSaysState(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.Mkdir(src, 0o755)
	big := make([]byte, 12<<20)
	rand.Read(big)
	os.WriteFile(filepath.Join(src, "big"), big, 0o644)
	fresh := filepath.Join(dir, "fresh.img")
	_, errOut, code := runCmd(t, "mkfs", "-b", "1024", "-d", src, fresh, "8M")
	if code == 0 || !strings.Contains(errOut, "fresh.img removed") {
		t.Errorf("mkfs -d out of space: exit %d, %q", code, errOut)
	}
	if _, err := os.Stat(fresh); !os.IsNotExist(err) {
		t.Errorf("failed mkfs -d left %s: %v", fresh, err)
	}
	old := filepath.Join(dir, "old.img")
	e2fs.Mkfs(t, old, "8M", "-b", "1024")
	_, errOut, code = runCmd(t, "mkfs", "-F", "-b", "1024", "-d", src, old, "8M")
	if code == 0 || !strings.Contains(errOut, "old.img now holds a new ext4 file system holding part of the tree") {
		t.Errorf("mkfs -F -d out of space: exit %d, %q", code, errOut)
	}
	e2fs.Fsck(t, old)
}

// TestMkfsDirInodeCache: mkfs -d with an inode cache of three inodes
// (it drops the inodes it no longer needs); a tree far larger than that
// comes through whole: contents, hard links whose names are made long
// after the first, and directory times set after their entries.
func TestMkfsDirInodeCache(t *testing.T) {
	old := mkfsInodeCache
	mkfsInodeCache = 3
	defer func() { mkfsInodeCache = old }()
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	files := map[string][]byte{}
	for d := range 4 {
		sub := filepath.Join(src, fmt.Sprintf("d%d", d))
		require.NoError(t, os.MkdirAll(sub, 0o750))
		for f := range 5 {
			name := fmt.Sprintf("d%d/f%d", d, f)
			data := bytes.Repeat([]byte(name), 100*f)
			require.NoError(t, os.WriteFile(filepath.Join(src, name), data, 0o640))
			files[name] = data
		}
	}
	require.NoError(t, os.Link(filepath.Join(src, "d0/f1"), filepath.Join(src, "d3/link")))
	files["d3/link"] = files["d0/f1"]
	mtime := time.Date(2001, 2, 3, 4, 5, 6, 7, time.UTC)
	for d := range 4 {
		require.NoError(t, os.Chtimes(filepath.Join(src, fmt.Sprintf("d%d", d)), mtime, mtime))
	}
	img := filepath.Join(dir, "img")
	out, errOut, code := runCmd(t, "mkfs", "-b", "1024", "-d", src, img, "32M")
	require.Zero(t, code, "mkfs -d: %s %s", out, errOut)
	e2fs.Fsck(t, img)
	dev, err := blockdev.OpenFile(img, true)
	require.NoError(t, err)
	defer dev.Close()
	v, err := ext4io.Open(dev, ext4io.Options{})
	require.NoError(t, err)
	defer v.Close()
	for name, data := range files {
		got, err := v.ReadFile(name)
		require.NoError(t, err, name)
		assert.True(t, bytes.Equal(data, got), "%s: contents", name)
	}
	a, err := v.Lstat("d0/f1")
	require.NoError(t, err)
	b, err := v.Lstat("d3/link")
	require.NoError(t, err)
	assert.Equal(t, a.Ino, b.Ino, "a hard link")
	assert.EqualValues(t, 2, b.Nlink)
	for d := range 4 {
		fi, err := v.Lstat(fmt.Sprintf("d%d", d))
		require.NoError(t, err)
		assert.True(t, fi.ModTime().Equal(mtime), "d%d mtime %v", d, fi.ModTime())
		assert.Equal(t, fs.ModeDir|0o750, fi.Mode())
	}
}
