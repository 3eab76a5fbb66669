package ext4io_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/ext4io/ext4io/layout"
	"github.com/stretchr/testify/require"
)

// inlineTree is a model of a directory tree: file contents by path and
// the set of directories ("" is the root).
type inlineTree struct {
	files map[string][]byte
	dirs  map[string]bool
}

// writeInlineTree builds a host tree of small files and directories for
// mkfs.ext4 -d: most files and directories fit in their inodes.
func writeInlineTree(t *testing.T, rng *rand.Rand) (string, *inlineTree) {
	root := t.TempDir()
	m := &inlineTree{files: map[string][]byte{}, dirs: map[string]bool{"": true, "lost+found": true}}
	dirs := []string{""}
	for i := range 12 {
		parent := dirs[rng.IntN(len(dirs))]
		d := path.Join(parent, fmt.Sprintf("d%d", i))
		require.NoError(t, os.Mkdir(filepath.Join(root, d), 0o755))
		m.dirs[d] = true
		dirs = append(dirs, d)
	}
	for i := range 60 {
		d := dirs[rng.IntN(len(dirs))]
		name := path.Join(d, fmt.Sprintf("f%d", i))
		size := rng.IntN(180) // 0..60 in i_block, more in system.data
		if i%10 == 9 {
			size = 3000 + rng.IntN(9000) // not inline
		}
		data := make([]byte, size)
		for j := range data {
			data[j] = byte('a' + rng.IntN(26))
		}
		require.NoError(t, os.WriteFile(filepath.Join(root, name), data, 0o644))
		m.files[name] = data
	}
	for i := range 4 { // surely inline: empty, or one short name
		d := fmt.Sprintf("e%d", i)
		require.NoError(t, os.Mkdir(filepath.Join(root, d), 0o755))
		m.dirs[d] = true
		if i%2 == 1 {
			name := d + "/x"
			require.NoError(t, os.WriteFile(filepath.Join(root, name), []byte("short"), 0o644))
			m.files[name] = []byte("short")
		}
	}
	return root, m
}

func inlineFlag(t *testing.T, v *ext4io.Volume, name string) bool {
	t.Helper()
	fi, err := v.Lstat(name)
	require.NoError(t, err)
	return fi.Sys().(*ext4io.FileInfo).Flags&layout.InodeFlagInlineData != 0
}

// checkInlineTree compares every file and directory listing of v with m.
func checkInlineTree(t *testing.T, v *ext4io.Volume, m *inlineTree, step int) {
	t.Helper()
	for d := range m.dirs {
		ents, err := v.ReadDir(cmpDir(d))
		if err != nil {
			t.Fatalf("step %d: readdir %q: %v", step, d, err)
		}
		var got, want []string
		for _, e := range ents {
			got = append(got, path.Join(d, e.Name()))
		}
		for p := range m.files {
			if path.Dir(p) == cmpDir(d) {
				want = append(want, p)
			}
		}
		for p := range m.dirs {
			if p != "" && path.Dir(p) == cmpDir(d) {
				want = append(want, p)
			}
		}
		sort.Strings(got)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Fatalf("step %d: dir %q holds %q, model %q", step, d, got, want)
		}
	}
	for p, data := range m.files {
		got, err := v.ReadFile(p)
		if err != nil {
			t.Fatalf("step %d: read %s: %v", step, p, err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("step %d: %s: %d bytes differ from the model's %d", step, p, len(got), len(data))
		}
	}
}

func cmpDir(d string) string {
	if d == "" {
		return "."
	}
	return d
}

// TestInlineFsx runs random writes, truncates, creates, unlinks, renames,
// mkdirs, rmdirs and attribute changes through ext4io on an inline_data
// image that mkfs.ext4 -d filled with inline files and directories,
// checking contents against a model, e2fsck -fn at every reopen and at the
// end, and that Linux reads the result.
func TestInlineFsx(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		args  []string
		cache int64 // Options.PageCacheBytes
	}{
		{"4k", []string{"-O", "inline_data"}, 0},
		{"1k-bigino-nocsum", []string{"-b", "1024", "-I", "1024", "-O", "inline_data,^metadata_csum"}, 0},
		{"4k-nocache", []string{"-O", "inline_data"}, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			seed := uint64(len(c.name))
			if s := os.Getenv("EXT4IO_FSX_SEED"); s != "" {
				seed, _ = strconv.ParseUint(s, 10, 64)
			}
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 7))
			src, m := writeInlineTree(t, rng)
			img := filepath.Join(t.TempDir(), "inline.img")
			ext4iotest.Mkfs(t, img, "32M", append(c.args, "-d", src)...)
			ext4iotest.Fsck(t, img)
			v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true, PageCacheBytes: c.cache})
			require.NoError(t, err)
			defer func() { v.Close() }()
			ninl := 0
			for p := range m.files {
				if inlineFlag(t, v, p) {
					ninl++
				}
			}
			ndir := 0
			for d := range m.dirs {
				if d != "" && inlineFlag(t, v, d) {
					ndir++
				}
			}
			if ninl < 20 || ndir < 5 {
				t.Fatalf("only %d inline files and %d inline directories in the image", ninl, ndir)
			}
			t.Logf("%d of %d files and %d of %d directories inline", ninl, len(m.files), ndir, len(m.dirs)-1)
			checkInlineTree(t, v, m, -1)

			// Read-only handles opened before the conversions must follow
			// them.
			type held struct {
				name string
				f    *ext4io.File
			}
			var handles []held
			// keep: inline files never written or truncated, which must stay
			// inline through renames, attribute changes and reopens.
			keep := map[string]bool{}
			for p := range m.files {
				if len(keep) < 10 && inlineFlag(t, v, p) {
					keep[p] = true
				}
			}
			for p := range m.files {
				if len(handles) < 8 && !keep[p] && inlineFlag(t, v, p) {
					f, err := v.Open(p)
					require.NoError(t, err)
					handles = append(handles, held{p, f})
				}
			}

			keys := func(mp map[string][]byte) []string {
				ks := make([]string, 0, len(mp))
				for k := range mp {
					ks = append(ks, k)
				}
				sort.Strings(ks)
				return ks
			}
			dirList := func() []string {
				ds := make([]string, 0, len(m.dirs))
				for d := range m.dirs {
					ds = append(ds, d)
				}
				sort.Strings(ds)
				return ds
			}
			randBytes := func(n int) []byte {
				b := make([]byte, n)
				for i := range b {
					b[i] = byte(rng.Uint32())
				}
				return b
			}
			randSize := func() int64 {
				switch rng.IntN(4) {
				case 0:
					return rng.Int64N(60)
				case 1:
					return rng.Int64N(200)
				case 2:
					return rng.Int64N(5000)
				}
				return rng.Int64N(40000)
			}
			drop := func(name string) {
				handles = slices.DeleteFunc(handles, func(h held) bool {
					return h.name == name || strings.HasPrefix(h.name, name+"/")
				})
			}
			seq := 0
			const steps = 500
			for step := range steps {
				files := keys(m.files)
				dirs := dirList()
				switch op := rng.IntN(25); {
				case op < 5 && len(files) > 0: // write
					p := files[rng.IntN(len(files))]
					if keep[p] {
						continue
					}
					off, data := randSize(), randBytes(1+rng.IntN(300))
					f, err := v.OpenFile(p, os.O_RDWR, 0)
					if err != nil {
						t.Fatalf("step %d: open %s: %v", step, p, err)
					}
					if _, err := f.WriteAt(data, off); err != nil {
						t.Fatalf("step %d: write %s: %v", step, p, err)
					}
					require.NoError(t, f.Close())
					d := m.files[p]
					if end := int(off) + len(data); end > len(d) {
						d = append(d, make([]byte, end-len(d))...)
					}
					copy(d[off:], data)
					m.files[p] = d
				case op < 8 && len(files) > 0: // truncate
					p := files[rng.IntN(len(files))]
					if keep[p] {
						continue
					}
					size := randSize()
					if rng.IntN(4) == 0 {
						size = 0
					}
					if err := v.Truncate(p, size); err != nil {
						t.Fatalf("step %d: truncate %s: %v", step, p, err)
					}
					d := m.files[p]
					if int(size) <= len(d) {
						d = d[:size]
					} else {
						d = append(d, make([]byte, int(size)-len(d))...)
					}
					m.files[p] = d
				case op < 10: // create
					seq++
					p := path.Join(dirs[rng.IntN(len(dirs))], fmt.Sprintf("n%d", seq))
					data := randBytes(int(randSize()))
					if err := v.WriteFile(p, data, 0o644); err != nil {
						t.Fatalf("step %d: create %s: %v", step, p, err)
					}
					m.files[p] = data
				case op < 12 && len(files) > 0: // unlink
					p := files[rng.IntN(len(files))]
					if err := v.Remove(p); err != nil {
						t.Fatalf("step %d: remove %s: %v", step, p, err)
					}
					drop(p)
					delete(m.files, p)
					delete(keep, p)
				case op < 14 && len(files) > 0: // rename a file, maybe over another
					p := files[rng.IntN(len(files))]
					var q string
					if rng.IntN(3) == 0 {
						q = files[rng.IntN(len(files))]
					} else {
						seq++
						q = path.Join(dirs[rng.IntN(len(dirs))], fmt.Sprintf("r%d", seq))
					}
					if err := v.Rename(p, q); err != nil {
						t.Fatalf("step %d: rename %s %s: %v", step, p, q, err)
					}
					drop(p)
					drop(q)
					if p != q {
						keep[q] = keep[p]
						delete(keep, p)
						m.files[q] = m.files[p]
						delete(m.files, p)
					}
				case op < 15: // mkdir
					seq++
					d := path.Join(dirs[rng.IntN(len(dirs))], fmt.Sprintf("m%d", seq))
					if err := v.Mkdir(d, 0o755); err != nil {
						t.Fatalf("step %d: mkdir %s: %v", step, d, err)
					}
					m.dirs[d] = true
				case op < 16: // rmdir an empty directory, or fail on a full one
					d := dirs[rng.IntN(len(dirs))]
					if d == "" || d == "lost+found" {
						continue
					}
					empty := true
					for p := range m.files {
						empty = empty && !strings.HasPrefix(p, d+"/")
					}
					for p := range m.dirs {
						empty = empty && !strings.HasPrefix(p, d+"/")
					}
					err := v.Remove(d)
					switch {
					case empty && err != nil:
						t.Fatalf("step %d: rmdir %s: %v", step, d, err)
					case !empty && !errors.Is(err, ext4io.ErrNotEmpty):
						t.Fatalf("step %d: rmdir of non-empty %s: %v", step, d, err)
					case empty:
						delete(m.dirs, d)
					}
				case op < 18: // move a directory to another parent
					d := dirs[rng.IntN(len(dirs))]
					to := dirs[rng.IntN(len(dirs))]
					if d == "" || d == "lost+found" || to == d || strings.HasPrefix(to, d+"/") {
						continue
					}
					drop(d)
					seq++
					nd := path.Join(to, fmt.Sprintf("mv%d", seq))
					if err := v.Rename(d, nd); err != nil {
						t.Fatalf("step %d: rename dir %s %s: %v", step, d, nd, err)
					}
					re := func(p string) string {
						if p == d {
							return nd
						}
						if strings.HasPrefix(p, d+"/") {
							return nd + p[len(d):]
						}
						return p
					}
					nf := map[string][]byte{}
					for p, b := range m.files {
						nf[re(p)] = b
					}
					ndirs := map[string]bool{}
					for p := range m.dirs {
						ndirs[re(p)] = true
					}
					m.files, m.dirs = nf, ndirs
					nk := map[string]bool{}
					for p, k := range keep {
						if k {
							nk[re(p)] = true
						}
					}
					keep = nk
				case op < 19 && len(files) > 0: // an attribute beside system.data
					p := files[rng.IntN(len(files))]
					val := randBytes(rng.IntN(40))
					if err := v.Setxattr(p, "user.k", val, 0); err != nil {
						t.Fatalf("step %d: setxattr %s: %v", step, p, err)
					}
					got, err := v.Getxattr(p, "user.k")
					if err != nil || !bytes.Equal(got, val) {
						t.Fatalf("step %d: getxattr %s: %q, %v", step, p, got, err)
					}
				case op >= 20 && op < 22 && len(files) > 0: // O_TRUNC over an existing file
					p := files[rng.IntN(len(files))]
					if keep[p] {
						continue
					}
					data := randBytes(int(randSize()))
					if err := v.WriteFile(p, data, 0o644); err != nil {
						t.Fatalf("step %d: rewrite %s: %v", step, p, err)
					}
					m.files[p] = data
				case op == 22 && len(files) > 0: // a direct write
					p := files[rng.IntN(len(files))]
					if keep[p] {
						continue
					}
					bs := int64(v.BlockSize())
					off, data := bs*rng.Int64N(4), randBytes(int(bs)*(1+rng.IntN(2)))
					f, err := v.OpenFile(p, os.O_RDWR|ext4io.O_DIRECT, 0)
					if err != nil {
						t.Fatalf("step %d: open %s: %v", step, p, err)
					}
					if _, err := f.WriteAt(data, off); err != nil {
						t.Fatalf("step %d: direct write %s: %v", step, p, err)
					}
					require.NoError(t, f.Close())
					d := m.files[p]
					if end := int(off) + len(data); end > len(d) {
						d = append(d, make([]byte, end-len(d))...)
					}
					copy(d[off:], data)
					m.files[p] = d
				case op >= 23 && len(files) > 0: // fallocate
					p := files[rng.IntN(len(files))]
					if keep[p] {
						continue
					}
					modes := []ext4io.FallocMode{ext4io.FallocAllocate, ext4io.FallocKeepSize, ext4io.FallocPunchHole, ext4io.FallocZeroRange}
					mode := modes[rng.IntN(len(modes))]
					off, n := rng.Int64N(300), 1+rng.Int64N(6000)
					f, err := v.OpenFile(p, os.O_RDWR, 0)
					if err != nil {
						t.Fatalf("step %d: open %s: %v", step, p, err)
					}
					if err := f.Fallocate(mode, off, n); err != nil {
						t.Fatalf("step %d: fallocate %v %s [%d,+%d): %v", step, mode, p, off, n, err)
					}
					require.NoError(t, f.Close())
					d := m.files[p]
					end := off + n
					grow := mode == ext4io.FallocAllocate || mode == ext4io.FallocZeroRange
					if grow && end > int64(len(d)) {
						d = append(d, make([]byte, end-int64(len(d)))...)
					}
					if mode == ext4io.FallocPunchHole || mode == ext4io.FallocZeroRange {
						clear(d[min(off, int64(len(d))):min(end, int64(len(d)))])
					}
					m.files[p] = d
				default: // reopen, e2fsck, check everything
					require.NoError(t, v.Close())
					ext4iotest.Fsck(t, img)
					if v, err = ext4io.OpenImage(img, ext4io.Options{Writable: true, PageCacheBytes: c.cache}); err != nil {
						t.Fatal(err)
					}
					handles = nil
					checkInlineTree(t, v, m, step)
				}
				for _, h := range handles {
					want, ok := m.files[h.name]
					if !ok {
						continue
					}
					got := make([]byte, len(want)+1)
					n, err := h.f.ReadAt(got, 0)
					if n != len(want) || !bytes.Equal(got[:n], want) || (err != nil && err != io.EOF) {
						t.Fatalf("step %d: handle of %s read %d bytes (model %d): %v", step, h.name, n, len(want), err)
					}
				}
			}
			checkInlineTree(t, v, m, steps)
			for p, k := range keep {
				if k && !inlineFlag(t, v, p) {
					t.Errorf("%s was converted though its data never changed", p)
				}
			}
			require.NoError(t, v.Close())
			ext4iotest.Fsck(t, img)
			checkSystemData(t, img, m)

			mnt := ext4iotest.Mount(t, img, true)
			for p, want := range m.files {
				got, err := os.ReadFile(filepath.Join(mnt, p))
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("Linux reads %s: %d bytes (model %d): %v", p, len(got), len(want), err)
				}
			}
			n := 0
			err = filepath.WalkDir(mnt, func(p string, e fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				rel, _ := filepath.Rel(mnt, p)
				rel = filepath.ToSlash(rel)
				switch {
				case rel == ".":
				case e.IsDir() && !m.dirs[rel]:
					return fmt.Errorf("unexpected directory %s", rel)
				case !e.IsDir() && m.files[rel] == nil && !hasKey(m.files, rel):
					return fmt.Errorf("unexpected file %s", rel)
				default:
					n++
				}
				return nil
			})
			require.NoError(t, err)
			if n != len(m.files)+len(m.dirs)-1 {
				t.Fatalf("Linux sees %d names, model %d", n, len(m.files)+len(m.dirs)-1)
			}
			t.Logf("Linux reads the %d names and the files' contents", n)
		})
	}
}

func hasKey(m map[string][]byte, k string) bool { _, ok := m[k]; return ok }

// checkSystemData checks with debugfs that exactly the inodes flagged
// inline keep a system.data attribute (a conversion removes it, as
// ext4_destroy_inline_data), and that some of them were converted.
func checkSystemData(t *testing.T, img string, m *inlineTree) {
	t.Helper()
	var lines []string
	for p := range m.files {
		lines = append(lines, "stat /"+p)
	}
	for d := range m.dirs {
		if d != "" {
			lines = append(lines, "stat /"+d)
		}
	}
	out := ext4iotest.DebugfsScript(t, img, false, lines)
	secs := strings.Split(out, "debugfs: stat /")[1:]
	if len(secs) != len(lines) {
		t.Fatalf("debugfs printed %d stats for %d requests", len(secs), len(lines))
	}
	inline, extents := 0, 0
	for _, sec := range secs {
		name, _, _ := strings.Cut(sec, "\n")
		var flags uint32
		if _, fl, ok := strings.Cut(sec, "Flags: "); !ok {
			t.Fatalf("%s: no flags in debugfs stat:\n%s", name, sec)
		} else if _, err := fmt.Sscanf(fl, "0x%x", &flags); err != nil {
			t.Fatalf("%s: flags %q: %v", name, fl, err)
		}
		isInline := flags&layout.InodeFlagInlineData != 0
		if has := strings.Contains(sec, "system.data ("); has != isInline {
			t.Errorf("%s: flags %#x, system.data present %v", name, flags, has)
		}
		if isInline {
			inline++
		} else if flags&layout.InodeFlagExtents != 0 {
			extents++
		}
	}
	t.Logf("at the end: %d inline inodes, %d extent-mapped", inline, extents)
	if inline == 0 || extents == 0 {
		t.Errorf("no mix of inline (%d) and converted or new (%d) inodes left", inline, extents)
	}
}

// inlineImage makes an inline_data image holding the host tree files
// (path -> contents; a path ending in "/" is a directory) and opens it
// writable.
func inlineImage(t *testing.T, tree map[string]string, args ...string) (string, *ext4io.Volume) {
	t.Helper()
	src := t.TempDir()
	for p, data := range tree {
		full := filepath.Join(src, p)
		if strings.HasSuffix(p, "/") {
			require.NoError(t, os.MkdirAll(full, 0o755))
			continue
		}
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		if err := os.WriteFile(full, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	img := filepath.Join(t.TempDir(), "inline.img")
	ext4iotest.Mkfs(t, img, "16M", append(append([]string{"-O", "inline_data"}, args...), "-d", src)...)
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	return img, v
}

func statInfo(t *testing.T, v *ext4io.Volume, name string) *ext4io.FileInfo {
	t.Helper()
	fi, err := v.Lstat(name)
	require.NoError(t, err)
	return fi.Sys().(*ext4io.FileInfo)
}

// TestInlineConvertFile: a write converts an inline file (bytes in i_block
// and in system.data) to one extent-mapped block; a handle opened before
// sees the new bytes; an empty inline file converts to no blocks; a link
// and an attribute leave an inline file inline.
func TestInlineConvertFile(t *testing.T) {
	long := strings.Repeat("0123456789", 10) // 100 bytes: 60 in i_block, 40 in system.data
	img, v := inlineImage(t, map[string]string{"long": long, "empty": "", "other": "abc"})
	defer func() { v.Close() }()
	for _, p := range []string{"long", "empty", "other"} {
		if statInfo(t, v, p).Flags&layout.InodeFlagInlineData == 0 {
			t.Fatalf("%s is not inline in the image", p)
		}
	}
	h, err := v.Open("long")
	require.NoError(t, err)
	f, err := v.OpenFile("long", os.O_RDWR, 0)
	require.NoError(t, err)
	if _, err := f.WriteAt([]byte(strings.Repeat("XY", 150)), 99); err != nil { // outgrows the inode
		t.Fatal(err)
	}
	want := long[:99] + strings.Repeat("XY", 150)
	for _, g := range []*ext4io.File{f, h} {
		got := make([]byte, 500)
		n, _ := g.ReadAt(got, 0)
		if string(got[:n]) != want {
			t.Fatalf("read %q after the conversion, want %q", got[:n], want)
		}
	}
	f.Close()
	h.Close()
	fi := statInfo(t, v, "long")
	if fi.Flags&layout.InodeFlagInlineData != 0 || fi.Flags&layout.InodeFlagExtents == 0 || fi.Blocks != uint64(v.BlockSize()/512) {
		t.Fatalf("after a write: flags %#x, %d sectors", fi.Flags, fi.Blocks)
	}
	if err := v.Truncate("empty", 5000); err != nil { // outgrows the inode
		t.Fatal(err)
	}
	if fi := statInfo(t, v, "empty"); fi.Flags&layout.InodeFlagInlineData != 0 || fi.Blocks != 0 {
		t.Fatalf("empty file after truncate: flags %#x, %d sectors", fi.Flags, fi.Blocks)
	}
	require.NoError(t, v.Link("other", "other2"))
	if err := v.Setxattr("other2", "user.a", []byte("b"), 0); err != nil {
		t.Fatal(err)
	}
	require.NoError(t, v.Chmod("other", 0o600))
	if fi := statInfo(t, v, "other"); fi.Flags&layout.InodeFlagInlineData == 0 || fi.Nlink != 2 {
		t.Fatalf("other after link, setxattr, chmod: flags %#x, %d links", fi.Flags, fi.Nlink)
	}
	require.NoError(t, v.Close())
	ext4iotest.Fsck(t, img)
	for p, w := range map[string]string{"long": want, "empty": string(make([]byte, 5000)), "other2": "abc"} {
		got := ext4iotest.Dump(t, img, p)
		if p == "other2" {
			// debugfs 1.47 dumps an inline file as all 60 bytes of i_block.
			got = bytes.TrimRight(got, "\x00")
		}
		if string(got) != w {
			t.Errorf("debugfs dumps %s as %q, want %q", p, got, w)
		}
	}
	if out := ext4iotest.Debugfs(t, img, false, "ea_list /long"); strings.Contains(out, "system.data") {
		t.Errorf("converted file keeps system.data:\n%s", out)
	}
	if out := ext4iotest.Debugfs(t, img, false, "ea_list /other"); !strings.Contains(out, "system.data") || !strings.Contains(out, "user.a") {
		t.Errorf("inline file with an attribute:\n%s", out)
	}
	linuxAppends(t, img, "long", "other", "empty")
}

// linuxAppends mounts img read-write, appends to the files through Linux
// and checks them, unmounts and runs e2fsck: Linux keeps changing what
// ext4io converted or left inline.
func linuxAppends(t *testing.T, img string, files ...string) {
	t.Helper()
	mnt := ext4iotest.Mount(t, img, false)
	for _, p := range files {
		full := filepath.Join(mnt, p)
		before, err := os.ReadFile(full)
		require.NoError(t, err)
		f, err := os.OpenFile(full, os.O_WRONLY|os.O_APPEND, 0)
		require.NoError(t, err)
		if _, err := f.WriteString("+linux"); err != nil {
			t.Fatal(err)
		}
		require.NoError(t, f.Close())
		if got, err := os.ReadFile(full); err != nil || string(got) != string(before)+"+linux" {
			t.Fatalf("Linux appended to %s: %q, %v", p, got, err)
		}
	}
	require.NoError(t, os.Mkdir(filepath.Join(mnt, "linuxdir"), 0o755))
	ext4iotest.Unmount(t, mnt)
	ext4iotest.Fsck(t, img)
}

// TestInlineConvertDir: moving an inline directory keeps it inline with
// its parent pointer updated; adding and removing entries converts an
// inline directory to one block holding ".", ".." and its entries.
func TestInlineConvertDir(t *testing.T) {
	for _, args := range [][]string{nil, {"-b", "1024", "-O", "^metadata_csum"}} {
		t.Run(strings.Join(args, ""), func(t *testing.T) {
			img, v := inlineImage(t, map[string]string{"a/": "", "b/x": "1", "b/y": "2", "c/": ""}, args...)
			defer func() { v.Close() }()
			if statInfo(t, v, "b").Flags&layout.InodeFlagInlineData == 0 {
				t.Fatal("b is not inline in the image")
			}
			// a converts (a new entry); b moves into it and stays inline.
			require.NoError(t, v.Rename("b", "a/b"))
			bi := statInfo(t, v, "a/b")
			if bi.Flags&layout.InodeFlagInlineData == 0 {
				t.Fatalf("moved directory lost its inline data: flags %#x", bi.Flags)
			}
			if got, want := statInfo(t, v, "a/b/..").Ino, statInfo(t, v, "a").Ino; got != want {
				t.Fatalf("a/b/.. is inode %d, want %d", got, want)
			}
			require.NoError(t, v.Remove("a/b/x"))
			if err := v.WriteFile("a/b/z", []byte("3"), 0o644); err != nil {
				t.Fatal(err)
			}
			bi = statInfo(t, v, "a/b")
			if bi.Flags&layout.InodeFlagInlineData != 0 || bi.Size() != int64(v.BlockSize()) {
				t.Fatalf("b after entry changes: flags %#x, size %d", bi.Flags, bi.Size())
			}
			ents, err := v.ReadDir("a/b")
			require.NoError(t, err)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			if strings.Join(names, ",") != "y,z" {
				t.Fatalf("a/b holds %v", names)
			}
			if err := v.Remove("c"); err != nil { // an empty inline directory goes
				t.Fatal(err)
			}
			require.NoError(t, v.Close())
			ext4iotest.Fsck(t, img)
			linuxAppends(t, img, "a/b/y", "a/b/z")
		})
	}
}

// TestInlineHostileDir: an inline directory whose entry claims more room
// than the inode holds is refused, and stays as it was.
func TestInlineHostileDir(t *testing.T) {
	img, v := inlineImage(t, map[string]string{"d/x": "1"})
	v.Close()
	// i_block bytes 8..11 of an inline directory: the first entry's
	// rec_len, name_len and file type.
	ext4iotest.Debugfs(t, img, true, "sif /d block[2] 0x0101fff0")
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	defer v.Close()
	if err := v.WriteFile("d/y", []byte("2"), 0o644); !errors.Is(err, ext4io.ErrCorrupt) {
		t.Fatalf("create in a corrupt inline directory: %v", err)
	}
	if statInfo(t, v, "d").Flags&layout.InodeFlagInlineData == 0 {
		t.Fatal("corrupt inline directory was converted")
	}
}

// TestInlineCrashPoints crashes conversions at every device flush: each
// recovered image passes e2fsck -fn, and an inline file or directory is
// either still inline with its old contents or converted with its old or
// new contents (the conversion is one transaction, the write another).
func TestInlineCrashPoints(t *testing.T) {
	t.Parallel()
	old := strings.Repeat("abcdefghij", 9) // 90 bytes: i_block and system.data
	img, v := inlineImage(t, map[string]string{"long": old, "s": "short", "d/x": "1", "e/": ""})
	require.NoError(t, v.Close())
	raw, err := os.ReadFile(img)
	require.NoError(t, err)
	start := memdev.NewBlockSize(int64(len(raw)), 4096)
	if _, err := start.WriteAt(raw, 0); err != nil {
		t.Fatal(err)
	}
	newer := old[:88] + strings.Repeat("XYZ", 100) // outgrows the inode
	workload := func(dev blockdev.Device) error {
		v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
		if err != nil {
			return err
		}
		f, err := v.OpenFile("long", os.O_RDWR, 0)
		if err != nil {
			return err
		}
		if _, err := f.WriteAt([]byte(strings.Repeat("XYZ", 100)), 88); err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		if err := v.Sync(); err != nil {
			return err
		}
		s, err := v.OpenFile("s", os.O_RDWR, 0)
		if err != nil {
			return err
		}
		if _, err := s.WriteAt([]byte("S"), 0); err != nil { // in place
			return err
		}
		if err := s.Close(); err != nil {
			return err
		}
		if err := v.WriteFile("d/y", []byte("2"), 0o644); err != nil {
			return err
		}
		if err := v.Mkdir("e/sub", 0o755); err != nil {
			return err
		}
		return v.Close()
	}
	n := ext4iotest.CrashSweep(t, start, workload, func(t *testing.T, crashed *memdev.Device, _ errordev.CrashReport) {
		v, err := ext4io.Open(crashed, ext4io.Options{Replay: true})
		require.NoError(t, err)
		defer v.Close()
		got, err := v.ReadFile("long")
		require.NoError(t, err)
		inl := statInfo(t, v, "long").Flags&layout.InodeFlagInlineData != 0
		if string(got) != old && (inl || string(got) != newer) {
			t.Fatalf("long (inline %v) reads %q", inl, got)
		}
		if got, err := v.ReadFile("s"); err != nil || (string(got) != "short" && string(got) != "Short") || !inlineFlag(t, v, "s") {
			t.Fatalf("s reads %q, %v (inline %v)", got, err, inlineFlag(t, v, "s"))
		}
		for d, names := range map[string][]string{"d": {"x", "x,y"}, "e": {"", "sub"}} {
			ents, err := v.ReadDir(d)
			require.NoError(t, err)
			var ns []string
			for _, e := range ents {
				ns = append(ns, e.Name())
			}
			got := strings.Join(ns, ",")
			inl := statInfo(t, v, d).Flags&layout.InodeFlagInlineData != 0
			if got != names[0] && (inl || got != names[1]) {
				t.Fatalf("%s (inline %v) holds %q", d, inl, got)
			}
		}
		ext4iotest.FsckDev(t, crashed)
	}, ext4iotest.SweepOptions{EveryOp: true, MaxPoints: 120, CrashAt: errordev.CrashAtOptions{KeepProb: 0.5}})
	t.Logf("%d crash images checked", n)
}

// TestInlineConcurrentConvert converts inline files while other
// goroutines read them through handles opened before, open new handles
// and list the directory that converts: every read sees the old or the
// new contents (run with -race).
func TestInlineConcurrentConvert(t *testing.T) {
	tree := map[string]string{}
	for i := range 8 {
		tree[fmt.Sprintf("d/f%d", i)] = strings.Repeat(string(rune('a'+i)), 40+i)
	}
	img, v := inlineImage(t, tree)
	defer func() { v.Close() }()
	var handles []*ext4io.File
	for i := range 8 {
		h, err := v.Open(fmt.Sprintf("d/f%d", i))
		require.NoError(t, err)
		handles = append(handles, h)
	}
	done := make(chan struct{})
	errc := make(chan error, 16)
	for r := range 3 {
		go func() {
			for {
				select {
				case <-done:
					errc <- nil
					return
				default:
				}
				i := rng32(r) % 8
				name := fmt.Sprintf("d/f%d", i)
				old := tree[name]
				for _, g := range []func() (*ext4io.File, error){
					func() (*ext4io.File, error) { return handles[i], nil },
					func() (*ext4io.File, error) { return v.Open(name) },
				} {
					f, err := g()
					if err != nil {
						errc <- err
						return
					}
					b := make([]byte, 100)
					n, _ := f.ReadAt(b, 0)
					if s := string(b[:n]); s != old && s != "NEW"+old[3:] {
						errc <- fmt.Errorf("%s reads %q", name, s)
						return
					}
					if f != handles[i] {
						f.Close()
					}
				}
				if _, err := v.ReadDir("d"); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	for i := range 8 {
		name := fmt.Sprintf("d/f%d", i)
		f, err := v.OpenFile(name, os.O_RDWR, 0)
		require.NoError(t, err)
		if _, err := f.WriteAt([]byte("NEW"), 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if i == 4 {
			if err := v.WriteFile("d/g", nil, 0o644); err != nil { // d converts
				t.Fatal(err)
			}
		}
	}
	close(done)
	for range 3 {
		require.NoError(t, <-errc)
	}
	require.NoError(t, v.Close())
	ext4iotest.Fsck(t, img)
}

var rngCounter atomic.Uint64

func rng32(r int) int { return int(rngCounter.Add(uint64(r)+1) % 1024) }

// TestInlineWriteInPlace: writes and truncates that fit the inode change
// an inline file in place (handles opened before follow); new regular
// files start inline; a file that outgrows the inode converts.
func TestInlineWriteInPlace(t *testing.T) {
	img, v := inlineImage(t, map[string]string{"small": "hello"})
	defer func() { v.Close() }()
	h, err := v.Open("small")
	require.NoError(t, err)
	defer h.Close()
	expect := func(name, want string, inline bool) {
		t.Helper()
		got, err := v.ReadFile(name)
		if err != nil || string(got) != want {
			t.Fatalf("%s reads %q, %v; want %q", name, got, err, want)
		}
		if fi := statInfo(t, v, name); (fi.Flags&layout.InodeFlagInlineData != 0) != inline || (inline && fi.Blocks != 0) {
			t.Fatalf("%s: flags %#x, %d sectors; want inline %v", name, fi.Flags, fi.Blocks, inline)
		}
	}
	f, err := v.OpenFile("small", os.O_RDWR, 0)
	require.NoError(t, err)
	if _, err := f.WriteAt([]byte("J"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	expect("small", "Jello", true)
	b := make([]byte, 10)
	if n, _ := h.ReadAt(b, 0); string(b[:n]) != "Jello" {
		t.Fatalf("old handle reads %q", b[:n])
	}
	require.NoError(t, v.Truncate("small", 3))
	expect("small", "Jel", true)
	if err := v.Truncate("small", 80); err != nil { // into system.data
		t.Fatal(err)
	}
	expect("small", "Jel"+string(make([]byte, 77)), true)
	require.NoError(t, v.WriteFile("new1", []byte(strings.Repeat("n", 30)), 0o644))
	expect("new1", strings.Repeat("n", 30), true)
	require.NoError(t, v.WriteFile("new2", []byte(strings.Repeat("m", 5000)), 0o644))
	expect("new2", strings.Repeat("m", 5000), false)
	g, err := v.Create("new3")
	require.NoError(t, err)
	var want string
	converted := false
	for i := range 30 {
		chunk := strings.Repeat(string(rune('a'+i%26)), 10)
		if _, err := g.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
		want += chunk
		inl := statInfo(t, v, "new3").Flags&layout.InodeFlagInlineData != 0
		if inl && converted {
			t.Fatal("new3 inline again after its conversion")
		}
		converted = !inl
	}
	g.Close()
	if !converted {
		t.Fatal("300 bytes still inline")
	}
	expect("new3", want, false)
	require.NoError(t, v.Close())
	ext4iotest.Fsck(t, img)
	checkSystemData(t, img, &inlineTree{files: map[string][]byte{"small": nil, "new1": nil, "new2": nil, "new3": nil}, dirs: map[string]bool{}})
	linuxAppends(t, img, "small", "new1", "new2", "new3")
}
