package ext4io_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// genTree writes a random directory tree under root and returns the
// slash-separated paths of every file, directory and symlink in it.
// bigDir > 0 adds a directory with that many entries (htree-sized).
func genTree(t *testing.T, root string, seed uint64, bigDir int, trailingHoles bool) []string {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var paths []string
	add := func(p string) { paths = append(paths, filepath.ToSlash(p)) }
	write := func(rel string, data []byte) {
		if err := os.WriteFile(filepath.Join(root, rel), data, 0o644); err != nil {
			t.Fatal(err)
		}
		add(rel)
	}
	randBytes := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	dirs := []string{"."}
	for i := 0; i < 12; i++ {
		parent := dirs[rng.IntN(len(dirs))]
		d := filepath.Join(parent, fmt.Sprintf("dir%d", i))
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
		add(d)
		dirs = append(dirs, d)
	}
	// A deep path.
	deep := "."
	for i := 0; i < 12; i++ {
		deep = filepath.Join(deep, fmt.Sprintf("deep%02d", i))
		os.MkdirAll(filepath.Join(root, deep), 0o755)
		add(deep)
	}
	write(filepath.Join(deep, "bottom.txt"), []byte("at the bottom\n"))
	write("empty", nil)
	for i := 0; i < 25; i++ {
		d := dirs[rng.IntN(len(dirs))]
		var n int
		switch rng.IntN(4) {
		case 0:
			n = rng.IntN(60) // may become inline data
		case 1:
			n = rng.IntN(5000)
		case 2:
			n = rng.IntN(200_000)
		default:
			n = 1<<20 + rng.IntN(2<<20)
		}
		write(filepath.Join(d, fmt.Sprintf("f%d.bin", i)), randBytes(n))
	}
	// Sparse files: data islands in holes, and a hole at the end.
	for i := 0; i < 3; i++ {
		rel := fmt.Sprintf("sparse%d", i)
		f, err := os.Create(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 5; j++ {
			off := rng.Int64N(8 << 20)
			if _, err := f.WriteAt(randBytes(1+rng.IntN(20000)), off); err != nil {
				t.Fatal(err)
			}
		}
		if trailingHoles {
			if err := f.Truncate(12<<20 + int64(rng.IntN(4096))); err != nil {
				t.Fatal(err)
			}
		}
		f.Close()
		add(rel)
	}
	// Symlinks: fast (short) and slow (long target), relative and to dirs.
	os.Symlink("f0.bin", filepath.Join(root, "short-link"))
	add("short-link")
	long := strings.Repeat("long-target-component/", 5) + "x"
	os.Symlink(long, filepath.Join(root, "long-link"))
	add("long-link")
	os.Symlink(deep, filepath.Join(root, "dir-link"))
	add("dir-link")
	if bigDir > 0 {
		os.Mkdir(filepath.Join(root, "big"), 0o755)
		add("big")
		for i := 0; i < bigDir; i++ {
			rel := filepath.Join("big", fmt.Sprintf("entry-%06d-%x", i, rng.Uint32()))
			write(rel, []byte(rel))
		}
	}
	sort.Strings(paths)
	return paths
}

// compareTree checks every path of the source tree against the volume.
func compareTree(t *testing.T, v *ext4io.Volume, root string, paths []string) {
	t.Helper()
	for _, p := range paths {
		src := filepath.Join(root, p)
		st, err := os.Lstat(src)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := v.Lstat(p)
		if err != nil {
			t.Fatalf("Lstat %s: %v", p, err)
		}
		if fi.Mode().Type() != st.Mode().Type() {
			t.Fatalf("%s: type %v, source %v", p, fi.Mode().Type(), st.Mode().Type())
		}
		if fi.Mode().Perm() != st.Mode().Perm() {
			t.Fatalf("%s: perm %v, source %v", p, fi.Mode().Perm(), st.Mode().Perm())
		}
		switch {
		case st.Mode().IsRegular():
			want, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			f, err := v.Open(p)
			if err != nil {
				t.Fatalf("Open %s: %v", p, err)
			}
			got, err := io.ReadAll(f)
			if err != nil {
				t.Fatalf("read %s: %v", p, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s: %d bytes read differ from the %d-byte source", p, len(got), len(want))
			}
			// A read straddling EOF returns the tail and io.EOF.
			if len(want) > 10 {
				buf := make([]byte, 20)
				n, err := f.ReadAt(buf, int64(len(want)-10))
				if n != 10 || err != io.EOF || !bytes.Equal(buf[:10], want[len(want)-10:]) {
					t.Fatalf("%s: ReadAt across EOF: n=%d err=%v", p, n, err)
				}
			}
		case st.Mode()&fs.ModeSymlink != 0:
			want, _ := os.Readlink(src)
			got, err := v.Readlink(p)
			if err != nil || got != want {
				t.Fatalf("Readlink %s = %q, %v; want %q", p, got, err, want)
			}
		case st.IsDir():
			srcEnts, _ := os.ReadDir(src)
			ents, err := v.ReadDir(p)
			if err != nil {
				t.Fatalf("ReadDir %s: %v", p, err)
			}
			var a, b []string
			for _, e := range srcEnts {
				a = append(a, e.Name())
			}
			for _, e := range ents {
				b = append(b, e.Name())
			}
			sort.Strings(b)
			if strings.Join(a, "/") != strings.Join(b, "/") {
				t.Fatalf("ReadDir %s: %d names, source has %d", p, len(b), len(a))
			}
		}
	}
}

type variant struct {
	name   string
	args   []string
	bigDir int
	config string // mke2fs.conf contents, if any
	// noTrailingHoles: mkfs.ext4 1.47.0 -d with inline_data cuts a sparse
	// file's size at its last data block, so such files are left out.
	noTrailingHoles bool
}

var variants = []variant{
	{name: "4k", args: []string{"-b", "4096"}, bigDir: 600},
	{name: "1k", args: []string{"-b", "1024"}, bigDir: 4000},
	{name: "64k", args: []string{"-b", "65536"}},
	{name: "nocsum", args: []string{"-O", "^metadata_csum"}, bigDir: 600},
	{name: "no64bit", args: []string{"-O", "^64bit"}},
	{name: "inode128", args: []string{"-I", "128"}},
	{name: "noflexbg", args: []string{"-O", "^flex_bg"}},
	{name: "ext3", args: []string{"-t", "ext3"}, bigDir: 300},
	{name: "ext2", args: []string{"-t", "ext2"}},
	{name: "csumseed-orphanfile", args: []string{"-O", "metadata_csum_seed,orphan_file"}},
	{name: "inline", args: []string{"-O", "inline_data"}, noTrailingHoles: true},
	{name: "tea", bigDir: 600, config: "[defaults]\n\thash_alg = tea\n"},
}

func TestReadMkfsImages(t *testing.T) {
	t.Parallel()
	for i, vt := range variants {
		t.Run(vt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			src := filepath.Join(dir, "src")
			os.Mkdir(src, 0o755)
			paths := genTree(t, src, uint64(i+1), vt.bigDir, !vt.noTrailingHoles)
			img := filepath.Join(dir, "img")
			args := append([]string{"-d", src}, vt.args...)
			conf := ""
			if vt.config != "" {
				conf = filepath.Join(dir, "mke2fs.conf")
				sys, _ := os.ReadFile("/etc/mke2fs.conf")
				os.WriteFile(conf, append(sys, []byte("\n"+vt.config)...), 0o644)
			}
			size := "96M"
			if vt.name == "64k" {
				size = "256M"
			}
			e2fs.MkfsConf(t, conf, img, size, args...)
			if vt.bigDir > 0 {
				// mkfs -d writes linear directories; e2fsck -D indexes them.
				out, err := exec.Command(e2fs.Tool(t, "e2fsck"), "-fyD", img).CombinedOutput()
				if code := exitCode(err); code > 1 {
					t.Fatalf("e2fsck -fyD: %v\n%s", err, out)
				}
				if h := e2fs.Debugfs(t, img, false, "htree big"); !strings.Contains(h, "Root node dump") {
					t.Fatalf("big directory was not indexed:\n%.300s", h)
				}
				if vt.config != "" && !strings.Contains(e2fs.Debugfs(t, img, false, "htree big"), "Hash Version: 2") {
					t.Fatal("TEA hash not in use")
				}
			}
			e2fs.Fsck(t, img)
			v, err := ext4io.OpenImage(img, ext4io.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			compareTree(t, v, src, paths)
			// Lookups through the htree index find every name, and
			// names that are absent are reported as such.
			if vt.bigDir > 0 {
				ents, _ := os.ReadDir(filepath.Join(src, "big"))
				for _, e := range ents {
					if _, err := v.Lstat("big/" + e.Name()); err != nil {
						t.Fatalf("lookup big/%s: %v", e.Name(), err)
					}
					if _, err := v.Lstat("big/" + e.Name() + "x"); !errors.Is(err, fs.ErrNotExist) {
						t.Fatalf("lookup of a missing name: %v", err)
					}
				}
			}
		})
	}
}

// TestFSConformance runs testing/fstest.TestFS on the io/fs view of images
// made from random trees of small files (TestFS reads files byte by byte,
// so multi-MiB files would only make it slow).
func TestFSConformance(t *testing.T) {
	t.Parallel()
	for i, args := range [][]string{{"-b", "4096"}, {"-b", "1024", "-O", "inline_data"}, {"-t", "ext2"}} {
		t.Run(strings.Join(args, ""), func(t *testing.T) {
			dir := t.TempDir()
			src := filepath.Join(dir, "src")
			os.Mkdir(src, 0o755)
			paths := genSmallTree(t, src, uint64(100+i))
			img := filepath.Join(dir, "img")
			e2fs.Mkfs(t, img, "32M", append([]string{"-d", src}, args...)...)
			v, err := ext4io.OpenImage(img, ext4io.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			if err := fstest.TestFS(v.FS(), paths...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// genSmallTree writes a random tree of directories, small files and
// symlinks and returns its paths.
func genSmallTree(t *testing.T, root string, seed uint64) []string {
	rng := rand.New(rand.NewPCG(seed, 7))
	var paths []string
	dirs := []string{"."}
	for i := 0; i < 30; i++ {
		parent := dirs[rng.IntN(len(dirs))]
		if rng.IntN(3) == 0 {
			d := filepath.Join(parent, fmt.Sprintf("d%d", i))
			os.Mkdir(filepath.Join(root, d), 0o755)
			dirs = append(dirs, d)
			paths = append(paths, filepath.ToSlash(d))
			continue
		}
		f := filepath.Join(parent, fmt.Sprintf("f%d", i))
		b := make([]byte, rng.IntN(3000))
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		os.WriteFile(filepath.Join(root, f), b, 0o640)
		paths = append(paths, filepath.ToSlash(f))
	}
	for _, p := range paths {
		if st, err := os.Stat(filepath.Join(root, p)); err == nil && st.Mode().IsRegular() {
			os.Symlink(p, filepath.Join(root, "link"))
			paths = append(paths, "link")
			break
		}
	}
	return paths
}
