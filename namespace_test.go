//go:build unix

package ext4io_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/ext4io/ext4io/layout"
)

// mInode is the model of one inode.
type mInode struct {
	kind     byte // 'f', 'd', 'l'
	data     []byte
	target   string
	perm     uint16
	mtime    time.Time
	names    int                // links from directories (files)
	children map[string]*mInode // dirs
	parent   *mInode            // dirs
}

func (m *mInode) nlink() int {
	if m.kind != 'd' {
		return m.names
	}
	n := 2
	for _, c := range m.children {
		if c.kind == 'd' {
			n++
		}
	}
	return n
}

type nsModel struct {
	root *mInode
}

func newModel() *nsModel {
	r := &mInode{kind: 'd', perm: 0o755, children: map[string]*mInode{}}
	r.parent = r
	r.children["lost+found"] = &mInode{kind: 'd', perm: 0o700, children: map[string]*mInode{}, parent: r}
	return &nsModel{root: r}
}

func (m *nsModel) lookup(p string) *mInode {
	cur := m.root
	for _, c := range strings.Split(strings.Trim(p, "/"), "/") {
		if c == "" {
			continue
		}
		if cur.kind != 'd' {
			return nil
		}
		if cur = cur.children[c]; cur == nil {
			return nil
		}
	}
	return cur
}

func (m *nsModel) paths(filter func(*mInode) bool) []string {
	var out []string
	var walk func(dir *mInode, p string)
	walk = func(dir *mInode, p string) {
		names := make([]string, 0, len(dir.children))
		for n := range dir.children {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			c := dir.children[n]
			cp := p + "/" + n
			if filter(c) {
				out = append(out, cp)
			}
			if c.kind == 'd' {
				walk(c, cp)
			}
		}
	}
	walk(m.root, "")
	return out
}

// isUnder reports whether d is a or below it.
func isUnder(d, a *mInode) bool {
	for {
		if d == a {
			return true
		}
		if d.parent == d {
			return false
		}
		d = d.parent
	}
}

// checkVolume compares the whole volume against the model.
func checkVolume(t *testing.T, v *ext4io.Volume, m *nsModel, seed uint64) {
	t.Helper()
	var walk func(dir *mInode, p string)
	walk = func(dir *mInode, p string) {
		ents, err := v.DirEntries(p)
		if err != nil {
			t.Fatalf("seed %d: ReadDir %s: %v", seed, p, err)
		}
		if len(ents) != len(dir.children) {
			t.Fatalf("seed %d: %s has %d entries, model %d", seed, p, len(ents), len(dir.children))
		}
		seen := map[string]bool{}
		for _, e := range ents {
			if seen[e.Name] {
				t.Fatalf("seed %d: %s: duplicate entry %q", seed, p, e.Name)
			}
			seen[e.Name] = true
			c := dir.children[e.Name]
			cp := path.Join(p, e.Name)
			if c == nil {
				t.Fatalf("seed %d: unexpected entry %s", seed, cp)
			}
			fi, err := v.Lstat(cp)
			if err != nil {
				t.Fatalf("seed %d: lstat %s: %v", seed, cp, err)
			}
			if int(fi.Nlink) != c.nlink() {
				t.Fatalf("seed %d: %s nlink %d, model %d", seed, cp, fi.Nlink, c.nlink())
			}
			if fi.IMode&0o7777 != c.perm {
				t.Fatalf("seed %d: %s mode %o, model %o", seed, cp, fi.IMode&0o7777, c.perm)
			}
			switch c.kind {
			case 'd':
				if !fi.IsDir() || e.Type != layout.FtDir {
					t.Fatalf("seed %d: %s is not a directory", seed, cp)
				}
				walk(c, cp)
			case 'l':
				tg, err := v.Readlink(cp)
				if err != nil || tg != c.target || e.Type != layout.FtSymlink {
					t.Fatalf("seed %d: readlink %s = %q, %v; model %q", seed, cp, tg, err, c.target)
				}
			case 'f':
				if e.Type != layout.FtRegFile || fi.Size() != int64(len(c.data)) {
					t.Fatalf("seed %d: %s type %d size %d, model %d", seed, cp, e.Type, fi.Size(), len(c.data))
				}
				if !c.mtime.IsZero() && !fi.Mtime.Equal(c.mtime) {
					t.Fatalf("seed %d: %s mtime %v, model %v", seed, cp, fi.Mtime, c.mtime)
				}
				f, err := v.Open(cp)
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(f)
				f.Close()
				if err != nil || !bytes.Equal(got, c.data) {
					t.Fatalf("seed %d: %s (inode %d) contents differ (%v): got %d bytes, model %d; first diff at %d", seed, cp, fi.Ino, err, len(got), len(c.data), firstDiff(got, c.data))
				}
			}
		}
	}
	walk(m.root, "/")
}

func nsSeed(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("EXT4IO_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	t.Logf("seed %d (rerun with EXT4IO_SEED=%d)", seed, seed)
	return seed
}

// nsRunner applies random operations to a volume and the model.
type nsRunner struct {
	t     *testing.T
	v     *ext4io.Volume
	m     *nsModel
	rng   *rand.Rand
	seed  uint64
	nameN int
	dirs  []string // known directory paths (may be stale)
}

func (r *nsRunner) name(long bool) string {
	r.nameN++
	if long {
		return fmt.Sprintf("entry-with-a-longish-name-%08d-%x", r.nameN, r.rng.Uint32())
	}
	return fmt.Sprintf("n%d", r.nameN)
}

func (r *nsRunner) randomPath(filter func(*mInode) bool) string {
	ps := r.m.paths(filter)
	if len(ps) == 0 {
		return ""
	}
	return ps[r.rng.IntN(len(ps))]
}

func (r *nsRunner) randomDir() string {
	// Mostly known dirs, which may have moved: validate.
	for range 4 {
		if len(r.dirs) == 0 {
			break
		}
		p := r.dirs[r.rng.IntN(len(r.dirs))]
		if d := r.m.lookup(p); d != nil && d.kind == 'd' {
			return p
		}
	}
	return "/"
}

// expect checks err against the outcome the model predicts.
func (r *nsRunner) expect(op string, err error, want error) {
	r.t.Helper()
	if want == nil && err != nil || want != nil && !errors.Is(err, want) {
		r.t.Fatalf("seed %d: %s: got error %v, want %v", r.seed, op, err, want)
	}
}

func (r *nsRunner) step() {
	t, v, m, rng := r.t, r.v, r.m, r.rng
	switch op := rng.IntN(100); {
	case op < 30: // create + write
		d := r.randomDir()
		p := path.Join(d, r.name(rng.IntN(2) == 0))
		data := make([]byte, rng.IntN(3000))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		f, err := v.Create(p)
		r.expect("create "+p, err, nil)
		if len(data) > 0 {
			if _, err := f.WriteAt(data, 0); err != nil {
				t.Fatal(err)
			}
		}
		f.Close()
		m.lookup(d).children[path.Base(p)] = &mInode{kind: 'f', data: data, perm: 0o666, names: 1}
	case op < 40: // mkdir
		d := r.randomDir()
		p := path.Join(d, r.name(false))
		r.expect("mkdir "+p, v.Mkdir(p, 0o750), nil)
		pd := m.lookup(d)
		pd.children[path.Base(p)] = &mInode{kind: 'd', perm: 0o750, children: map[string]*mInode{}, parent: pd}
		r.dirs = append(r.dirs, p)
	case op < 46: // symlink
		d := r.randomDir()
		p := path.Join(d, r.name(false))
		target := strings.Repeat("tg/", 100)[:1+rng.IntN(200)]
		r.expect("symlink "+p, v.Symlink(target, p), nil)
		m.lookup(d).children[path.Base(p)] = &mInode{kind: 'l', target: target, perm: 0o777, names: 1}
	case op < 52: // link
		src := r.randomPath(func(c *mInode) bool { return c.kind == 'f' })
		if src == "" {
			return
		}
		d := r.randomDir()
		p := path.Join(d, r.name(false))
		r.expect("link "+p, v.Link(src, p), nil)
		c := m.lookup(src)
		c.names++
		m.lookup(d).children[path.Base(p)] = c
	case op < 67: // unlink
		p := r.randomPath(func(c *mInode) bool { return c.kind != 'd' })
		if p == "" {
			return
		}
		r.expect("unlink "+p, v.Unlink(p), nil)
		m.lookup(path.Dir(p)).children[path.Base(p)].names--
		delete(m.lookup(path.Dir(p)).children, path.Base(p))
	case op < 75: // rmdir
		p := r.randomPath(func(c *mInode) bool { return c.kind == 'd' })
		if p == "" || p == "/lost+found" {
			return
		}
		c := m.lookup(p)
		var want error
		if len(c.children) > 0 {
			want = ext4io.ErrNotEmpty
		}
		r.expect("rmdir "+p, v.Rmdir(p), want)
		if want == nil {
			delete(m.lookup(path.Dir(p)).children, path.Base(p))
		}
	case op < 92: // rename
		src := r.randomPath(func(c *mInode) bool { return true })
		if src == "" || src == "/lost+found" {
			return
		}
		var dst string
		if rng.IntN(3) == 0 {
			dst = r.randomPath(func(c *mInode) bool { return true })
		}
		if dst == "" || dst == "/lost+found" {
			dst = path.Join(r.randomDir(), r.name(false))
		}
		s := m.lookup(src)
		sd, dd := m.lookup(path.Dir(src)), m.lookup(path.Dir(dst))
		d := dd.children[path.Base(dst)]
		var want error
		switch {
		case d == s:
		case s.kind == 'd' && isUnder(dd, s):
			want = ext4io.ErrInvalid
		case d != nil && d.kind == 'd' && isUnder(sd, d):
			want = ext4io.ErrNotEmpty // dst is an ancestor of src
		case d != nil && s.kind == 'd' && d.kind != 'd':
			want = ext4io.ErrNotDir
		case d != nil && s.kind != 'd' && d.kind == 'd':
			want = ext4io.ErrIsDir
		case d != nil && d.kind == 'd' && len(d.children) > 0:
			want = ext4io.ErrNotEmpty
		}
		r.expect("rename "+src+" "+dst, v.Rename(src, dst), want)
		if want != nil || d == s {
			return
		}
		if d != nil {
			d.names--
		}
		delete(sd.children, path.Base(src))
		dd.children[path.Base(dst)] = s
		if s.kind == 'd' {
			s.parent = dd
			r.dirs = append(r.dirs, dst)
		}
	case op < 96: // chmod
		p := r.randomPath(func(c *mInode) bool { return c.kind != 'l' })
		if p == "" {
			return
		}
		perm := uint16(rng.IntN(0o1000))
		r.expect("chmod "+p, v.Chmod(p, os.FileMode(perm)), nil)
		m.lookup(p).perm = perm
	default: // chtimes
		p := r.randomPath(func(c *mInode) bool { return c.kind == 'f' })
		if p == "" {
			return
		}
		mt := time.Unix(int64(rng.IntN(1<<31)), int64(rng.IntN(1e9)))
		r.expect("chtimes "+p, v.Chtimes(p, mt, mt), nil)
		m.lookup(p).mtime = mt
	}
}

// TestNamespaceErrors checks each operation's refusals and that nothing
// is left behind by them.
func TestNamespaceErrors(t *testing.T) {
	img := formatImage(t, 16<<20, ext4io.FormatOptions{BlockSize: 1024})
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	is := func(err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Fatalf("got %v, want %v", err, want)
		}
	}
	must(v.Mkdir("a", 0o755))
	must(v.Mkdir("a/b", 0o755))
	f, err := v.Create("a/f")
	must(err)
	f.Close()
	is(v.Mkdir("a", 0o755), ext4io.ErrExist)
	is(v.Mkdir("nope/x", 0o755), ext4io.ErrNotFound)
	is(v.Mkdir("a/f/x", 0o755), ext4io.ErrNotDir)
	is(v.Mkdir("a/"+strings.Repeat("x", 256), 0o755), ext4io.ErrNameTooLong)
	is(v.Rmdir("a"), ext4io.ErrNotEmpty)
	is(v.Rmdir("a/f"), ext4io.ErrNotDir)
	is(v.Unlink("a/b"), ext4io.ErrIsDir)
	is(v.Unlink("a/zz"), ext4io.ErrNotFound)
	is(v.Link("a/b", "a/c"), ext4io.ErrPermission)
	is(v.Link("a/f", "a/b"), ext4io.ErrExist)
	is(v.Rename("a", "a/b/c"), ext4io.ErrInvalid)
	is(v.Rename("a/f", "a/b"), ext4io.ErrIsDir)
	is(v.Rename("a/b", "a/f"), ext4io.ErrNotDir)
	is(v.Symlink("", "a/s"), ext4io.ErrNotFound)
	is(v.Symlink(strings.Repeat("x", 1024), "a/s"), ext4io.ErrNameTooLong)
	_, err = v.Create("a/..")
	is(err, ext4io.ErrIsDir)
	must(v.Symlink(strings.Repeat("y", 59), "a/fast"))
	must(v.Symlink(strings.Repeat("z", 60), "a/slow"))
	must(v.Mkdir("a/b/c", 0o700))
	must(v.Rename("a/b/c", "c")) // cross-directory dir move: ".." and nlinks
	fi, _ := v.Stat("a/b")
	if fi.Nlink != 2 {
		t.Fatalf("a/b nlink %d after moving its subdir out", fi.Nlink)
	}
	must(v.Rename("c", "a/b")) // dir over empty dir
	if _, err := v.Stat("a/b"); err != nil {
		t.Fatal(err)
	}
	must(v.Close())
	e2fs.Fsck(t, img)
	out := e2fs.Debugfs(t, img, false, "stat a/fast")
	if strings.Contains(out, "EXTENTS") || !strings.Contains(out, "Fast link dest") {
		t.Fatalf("fast symlink as debugfs sees it:\n%s", out)
	}
	// Read-only volumes refuse.
	ro, err := ext4io.OpenImage(img, ext4io.Options{})
	must(err)
	defer ro.Close()
	is(ro.Mkdir("x", 0o755), ext4io.ErrReadOnly)
	is(ro.Unlink("a/f"), ext4io.ErrReadOnly)
	is(ro.Rename("a/f", "g"), ext4io.ErrReadOnly)
}

// nsEnv reads an integer knob from the environment.
func nsEnv(name string, def int) int {
	if s := os.Getenv(name); s != "" {
		fmt.Sscan(s, &def)
	}
	return def
}

// TestNamespaceModel applies thousands of random namespace operations to
// an image and an in-memory model, comparing them at checkpoints
// (reopening the image, with e2fsck -fn clean each time). One directory
// grows to thousands of long names so that its htree gets two levels and
// leaf and index-node splits happen, and then loses and regains entries.
func TestNamespaceModel(t *testing.T) {
	t.Parallel()
	// 600 operations and 6000 names by default (enough for a two-level
	// htree), 20000 and 60000 with EXT4IO_LONG.
	ops := nsEnv("EXT4IO_NS_OPS", sized(300, 600, 20000))
	big := nsEnv("EXT4IO_NS_BIG", sized(1500, 6000, 60000))
	seed := nsSeed(t)
	img := formatImage(t, 128<<20, ext4io.FormatOptions{BlockSize: 1024, InodeRatio: 2048})
	open := func() *ext4io.Volume {
		v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	r := &nsRunner{t: t, v: open(), m: newModel(), rng: rand.New(rand.NewPCG(seed, 7)), seed: seed}
	t.Cleanup(func() {
		if t.Failed() && os.Getenv("EXT4IO_KEEP") != "" {
			b, _ := os.ReadFile(img)
			os.WriteFile(os.Getenv("EXT4IO_KEEP"), b, 0o644)
		}
	})
	start := time.Now()
	checkpoint := func() {
		t.Helper()
		if err := r.v.Close(); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		e2fs.Fsck(t, img)
		t1 := time.Now()
		r.v = open()
		checkVolume(t, r.v, r.m, seed)
		t.Logf("checkpoint at %v: e2fsck %v, compare %v", t0.Sub(start).Round(time.Millisecond), t1.Sub(t0).Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
	}
	// The big directory.
	if err := r.v.Mkdir("big", 0o755); err != nil {
		t.Fatal(err)
	}
	bd := &mInode{kind: 'd', perm: 0o755, children: map[string]*mInode{}, parent: r.m.root}
	r.m.root.children["big"] = bd
	var bigNames []string
	for i := 0; i < big; i++ {
		n := r.name(true)
		f, err := r.v.Create("big/" + n)
		if err != nil {
			t.Fatalf("seed %d: create big/%s (#%d): %v", seed, n, i, err)
		}
		f.Close()
		bd.children[n] = &mInode{kind: 'f', perm: 0o666, names: 1}
		bigNames = append(bigNames, n)
	}
	t.Logf("%d creates in one directory: %v", big, time.Since(start).Round(time.Millisecond))
	checkpoint()
	if out := e2fs.Debugfs(t, img, false, "htree big"); big >= 4000 && !strings.Contains(out, "Indirect levels: 1") {
		t.Errorf("big directory of %d entries has no second index level:\n%.600s", big, out)
	}
	// Remove a third, then add more: inserts into half-empty leaves.
	for i, n := range bigNames {
		if i%3 == 0 {
			if err := r.v.Unlink("big/" + n); err != nil {
				t.Fatal(err)
			}
			delete(bd.children, n)
		}
	}
	r.dirs = append(r.dirs, "/big")
	for i := 0; i < ops; i++ {
		r.step()
		if (i+1)%(ops/3+1) == 0 {
			checkpoint()
		}
	}
	checkpoint()
	if err := r.v.Close(); err != nil {
		t.Fatal(err)
	}
	e2fs.Fsck(t, img)
	t.Logf("done at %v; comparing with Linux", time.Since(start).Round(time.Millisecond))
	linuxMatches(t, img, r.m)
}

// linuxMatches mounts img (when possible) and compares Linux's view of
// the tree with the model.
func linuxMatches(t *testing.T, img string, m *nsModel) {
	t.Helper()
	mnt := mountLoop(t, img)
	var walk func(dir *mInode, p string)
	walk = func(dir *mInode, p string) {
		ents, err := os.ReadDir(filepath.Join(mnt, p))
		if err != nil {
			t.Fatal(err)
		}
		want := len(dir.children)
		if p == "" {
			want = len(dir.children) // lost+found is in the model
		}
		if len(ents) != want {
			t.Fatalf("linux: %s has %d entries, model %d", p, len(ents), want)
		}
		for _, e := range ents {
			c := dir.children[e.Name()]
			cp := filepath.Join(p, e.Name())
			if c == nil {
				t.Fatalf("linux: unexpected %s", cp)
			}
			fi, err := os.Lstat(filepath.Join(mnt, cp))
			if err != nil {
				t.Fatal(err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			if int(st.Nlink) != c.nlink() || uint16(st.Mode&0o7777) != c.perm {
				t.Fatalf("linux: %s nlink %d mode %o, model %d %o", cp, st.Nlink, st.Mode&0o7777, c.nlink(), c.perm)
			}
			switch c.kind {
			case 'd':
				walk(c, cp)
			case 'l':
				if tg, err := os.Readlink(filepath.Join(mnt, cp)); err != nil || tg != c.target {
					t.Fatalf("linux: readlink %s = %q %v, model %q", cp, tg, err, c.target)
				}
			case 'f':
				got, err := os.ReadFile(filepath.Join(mnt, cp))
				if err != nil || !bytes.Equal(got, c.data) {
					t.Fatalf("linux: %s contents differ (%v)", cp, err)
				}
				if !c.mtime.IsZero() && !fi.ModTime().Equal(c.mtime) {
					t.Fatalf("linux: %s mtime %v, model %v", cp, fi.ModTime(), c.mtime)
				}
			}
		}
	}
	walk(m.root, "")
}
