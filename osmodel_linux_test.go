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
	"path"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// The errors compared between ext4io and os: each is checked with
// errors.Is on both sides, so the same condition must be reported as the
// same sentinel, matching the same errno.
var osModelErrs = []struct {
	name string
	err  error
}{
	{"fs.ErrNotExist", fs.ErrNotExist}, {"fs.ErrExist", fs.ErrExist},
	{"fs.ErrPermission", fs.ErrPermission}, {"fs.ErrClosed", fs.ErrClosed},
	{"fs.ErrInvalid", fs.ErrInvalid},
	{"ErrNotDir", ext4io.ErrNotDir}, {"ErrIsDir", ext4io.ErrIsDir},
	{"ErrNotEmpty", ext4io.ErrNotEmpty}, {"ErrNameTooLong", ext4io.ErrNameTooLong},
	{"ErrNoSpace", ext4io.ErrNoSpace}, {"ErrReadOnly", ext4io.ErrReadOnly},
	{"ENOENT", syscall.ENOENT}, {"EEXIST", syscall.EEXIST}, {"EPERM", syscall.EPERM},
	{"EACCES", syscall.EACCES}, {"ENOTDIR", syscall.ENOTDIR}, {"EISDIR", syscall.EISDIR},
	{"ENOTEMPTY", syscall.ENOTEMPTY}, {"ENAMETOOLONG", syscall.ENAMETOOLONG},
	{"EINVAL", syscall.EINVAL}, {"ELOOP", syscall.ELOOP}, {"EBADF", syscall.EBADF},
	{"EMLINK", syscall.EMLINK}, {"ENOSPC", syscall.ENOSPC}, {"EROFS", syscall.EROFS},
	{"io.EOF", io.EOF},
}

// errSig renders what the model compares of an error: nil, or its type,
// (with paths) op and path, and every sentinel it matches.
func errSig(err error, paths bool) string {
	if err == nil {
		return "ok"
	}
	var b strings.Builder
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		b.WriteString("PathError")
		if paths {
			fmt.Fprintf(&b, "(%s %s)", pe.Op, pe.Path)
		}
	case errors.As(err, &le):
		b.WriteString("LinkError")
		if paths {
			fmt.Fprintf(&b, "(%s %s %s)", le.Op, le.Old, le.New)
		}
	}
	for _, e := range osModelErrs {
		if errors.Is(err, e.err) {
			b.WriteString(" " + e.name)
		}
	}
	return b.String()
}

// fiSig renders what the model compares of a FileInfo. Directory sizes
// are left out (the host's directories grow as they please).
func fiSig(fi fs.FileInfo, name bool) string {
	var nlink, rdev uint64
	var uid, gid uint32
	switch s := fi.Sys().(type) {
	case *syscall.Stat_t:
		nlink, rdev, uid, gid = uint64(s.Nlink), s.Rdev, s.Uid, s.Gid
	case *ext4io.FileInfo:
		nlink, rdev, uid, gid = uint64(s.Nlink), s.Rdev, s.UID, s.GID
	}
	size := fi.Size()
	if fi.IsDir() {
		size = -1
	}
	s := fmt.Sprintf("%v size %d nlink %d rdev %#x owner %d:%d", fi.Mode(), size, nlink, rdev, uid, gid)
	if name {
		s = fi.Name() + " " + s
	}
	return s
}

func direntsSig(ents []fs.DirEntry) string {
	var b strings.Builder
	for _, e := range ents {
		fmt.Fprintf(&b, "%s:%v ", e.Name(), e.Type())
	}
	return b.String()
}

// osModel runs the same random operations on an ext4io volume and a host
// directory through ext4io.FileSystem and compares every result.
type osModel struct {
	t     *testing.T
	rng   *rand.Rand
	seed  uint64
	fs    [2]ext4io.FileSystem // ext4io, os
	host  string               // the host directory
	files [2][4]ext4io.FileHandle
	log   []string
	ran   map[string]int
}

var osModelNames = []string{"a", "b", "c", "d"}

// osModelRoot holds every path the model makes. Symlink targets have at
// most two ".." (a link made three deep may be renamed one deep), so from
// anywhere below it they reach no higher than the top, on the image and
// on the host alike: the host would follow ".." out of its directory,
// where the image stays at its root.
const osModelRoot = "r/s/"

func (m *osModel) path() string {
	if m.rng.IntN(60) == 0 {
		return osModelRoot + strings.Repeat("n", 256) // ENAMETOOLONG
	}
	depth := 1 + m.rng.IntN(3)
	parts := make([]string, depth)
	for i := range parts {
		parts[i] = osModelNames[m.rng.IntN(len(osModelNames))]
	}
	return osModelRoot + strings.Join(parts, "/")
}

// target returns a symlink target for a link at p: names, and ".." no
// deeper than p's own directory below osModelRoot.
func (m *osModel) target(p string) string {
	depth := strings.Count(strings.TrimPrefix(p, osModelRoot), "/")
	t := m.path()
	if m.rng.IntN(8) == 0 {
		return path.Base(p) // a loop
	}
	if depth > 0 && m.rng.IntN(3) == 0 {
		t = strings.Repeat("../", 1+m.rng.IntN(depth)) + osModelNames[m.rng.IntN(len(osModelNames))]
	}
	return t
}

func (m *osModel) data() []byte {
	b := make([]byte, m.rng.IntN(6000))
	for i := range b {
		b[i] = byte(m.rng.Uint32())
	}
	return b
}

// special reports whether p (symlinks followed) is a fifo, socket or
// device on the host: opening one could block or reach a real device, and
// ext4io's special Files hold no data, so such opens are skipped.
func (m *osModel) special(p string) bool {
	fi, err := os.Stat(m.host + "/" + p)
	return err == nil && fi.Mode()&(fs.ModeNamedPipe|fs.ModeSocket|fs.ModeDevice) != 0
}

// do runs fn on both sides and fails unless the results agree.
func (m *osModel) do(op string, fn func(side int, fsys ext4io.FileSystem) string) {
	m.t.Helper()
	m.log = append(m.log, op)
	m.ran[strings.Fields(op)[0]]++
	if os.Getenv("EXT4IO_OS_DEBUG") != "" {
		m.t.Logf("op %d: %s", len(m.log), op)
	}
	a, b := fn(0, m.fs[0]), fn(1, m.fs[1])
	if a != b {
		if os.Getenv("EXT4IO_OS_DEBUG") != "" {
			out, _ := exec.Command("find", m.host, "-printf", "%P %y %l\n").Output()
			m.t.Logf("host tree:\n%s", out)
		}
		start := max(0, len(m.log)-40)
		m.t.Fatalf("seed %d, op %d: %s\n ext4io: %s\n     os: %s\nlast ops:\n  %s", m.seed, len(m.log), op, a, b, strings.Join(m.log[start:], "\n  "))
	}
}

func (m *osModel) step() {
	rng := m.rng
	p, q := m.path(), m.path()
	slot := rng.IntN(4)
	switch op := rng.IntN(100); {
	case op < 12: // open with flags
		if m.special(p) {
			return
		}
		flag := []int{os.O_RDONLY, os.O_WRONLY, os.O_RDWR}[rng.IntN(3)]
		for _, f := range []int{os.O_CREATE, os.O_EXCL, os.O_TRUNC, os.O_APPEND} {
			if rng.IntN(3) == 0 {
				flag |= f
			}
		}
		if rng.IntN(20) == 0 {
			flag |= os.O_SYNC
		}
		perm := fs.FileMode(rng.IntN(0o1000))
		m.do(fmt.Sprintf("open %s %#o %v slot %d", p, flag, perm, slot), func(s int, fsys ext4io.FileSystem) string {
			if f := m.files[s][slot]; f != nil {
				f.Close()
			}
			f, err := fsys.OpenFile(p, flag, perm)
			m.files[s][slot] = f
			if err != nil {
				return errSig(err, true)
			}
			return "opened " + f.Name()
		})
	case op < 20: // write, writeat
		data := m.data()
		at := int64(-1)
		if rng.IntN(3) == 0 {
			at = rng.Int64N(20000)
		}
		m.do(fmt.Sprintf("write slot %d at %d len %d", slot, at, len(data)), func(s int, _ ext4io.FileSystem) string {
			f := m.files[s][slot]
			if f == nil {
				return "no file"
			}
			var n int
			var err error
			if at >= 0 {
				n, err = f.WriteAt(data, at)
			} else {
				n, err = f.Write(data)
			}
			if os.Getenv("EXT4IO_OS_DEBUG") != "" && err != nil {
				m.t.Logf("side %d: %v", s, err)
			}
			return fmt.Sprintf("%d %s", n, errSig(err, false))
		})
	case op < 28: // read, readat, seek
		buf := rng.IntN(5000)
		at := int64(-1)
		if rng.IntN(3) == 0 {
			at = rng.Int64N(20000)
		}
		whence, off := rng.IntN(3), rng.Int64N(10000)-2000
		m.do(fmt.Sprintf("read slot %d at %d len %d; seek %d %d", slot, at, buf, off, whence), func(s int, _ ext4io.FileSystem) string {
			f := m.files[s][slot]
			if f == nil {
				return "no file"
			}
			b := make([]byte, buf)
			var n int
			var err error
			if at >= 0 {
				n, err = f.ReadAt(b, at)
			} else {
				n, err = f.Read(b)
			}
			if fi, err := f.Stat(); err == nil && fi.IsDir() {
				// Seek on directories is not compared: ext4io's
				// directory position is ReadDir's alone.
				return fmt.Sprintf("%d %x %s; dir", n, b[:n], errSig(err, false))
			}
			pos, serr := f.Seek(off, whence)
			return fmt.Sprintf("%d %x %s; seek %d %s", n, b[:n], errSig(err, false), pos, errSig(serr, false))
		})
	case op < 31: // ftruncate, fstat, fchmod, close
		size := rng.Int64N(20000)
		mode := fs.FileMode(rng.IntN(0o1000))
		m.do(fmt.Sprintf("ftruncate slot %d %d; chmod %v; stat; close", slot, size, mode), func(s int, _ ext4io.FileSystem) string {
			f := m.files[s][slot]
			if f == nil {
				return "no file"
			}
			terr := f.Truncate(size)
			cerr := f.Chmod(mode)
			fi, err := f.Stat()
			st := errSig(err, false)
			if err == nil {
				st = fiSig(fi, false)
			}
			f.Close()
			m.files[s][slot] = nil
			return errSig(terr, false) + "; " + errSig(cerr, false) + "; " + st
		})
	case op < 33: // io.Copy in (ReadFrom) and out (WriteTo); ReadDir(-1) of a File
		data := m.data()
		m.do(fmt.Sprintf("copy slot %d len %d", slot, len(data)), func(s int, _ ext4io.FileSystem) string {
			f := m.files[s][slot]
			if f == nil {
				return "no file"
			}
			n, err := io.Copy(f, bytes.NewReader(data))
			var out bytes.Buffer
			var k int64
			var rerr error
			if fi, err := f.Stat(); err == nil && !fi.IsDir() {
				// os's WriteTo of a directory fails with sendfile's
				// EINVAL, ext4io's with a read's EISDIR.
				k, rerr = io.Copy(&out, f)
			}
			ents, derr := f.ReadDir(-1)
			slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
			return fmt.Sprintf("in %d %s; out %d %x %s; readdir %s %s", n, errSig(err, false), k, out.Bytes(), errSig(rerr, false), direntsSig(ents), errSig(derr, false))
		})
	case op < 35: // chown, lchown
		uid, gid := rng.IntN(3)-1, rng.IntN(3)-1
		m.do(fmt.Sprintf("chown %s %d %d", p, uid, gid), func(_ int, fsys ext4io.FileSystem) string {
			return errSig(fsys.Chown(p, uid+1000, gid+1000), true) + "; " + errSig(fsys.Lchown(q, uid, gid), true)
		})
	case op < 36: // truncate by name
		if m.special(p) {
			return
		}
		size := rng.Int64N(20000)
		m.do(fmt.Sprintf("truncate %s %d", p, size), func(_ int, fsys ext4io.FileSystem) string {
			return errSig(fsys.Truncate(p, size), true)
		})
	case op < 43: // mkdir, mkdirall
		perm := fs.FileMode(rng.IntN(0o1000)) | 0o700
		if rng.IntN(2) == 0 {
			m.do(fmt.Sprintf("mkdir %s %v", p, perm), func(_ int, fsys ext4io.FileSystem) string {
				return errSig(fsys.Mkdir(p, perm), true)
			})
		} else {
			m.do(fmt.Sprintf("mkdirall %s %v", p, perm), func(_ int, fsys ext4io.FileSystem) string {
				return errSig(fsys.MkdirAll(p, perm), true)
			})
		}
	case op < 50: // remove
		m.do("remove "+p, func(_ int, fsys ext4io.FileSystem) string {
			return errSig(fsys.Remove(p), true)
		})
	case op < 53: // removeall
		if m.special(path.Dir(p)) {
			// os.RemoveAll opens the parent: a fifo's open waits for a
			// writer, a socket's fails with ENXIO.
			return
		}
		m.do("removeall "+p, func(_ int, fsys ext4io.FileSystem) string {
			err := fsys.RemoveAll(p)
			if os.Getenv("EXT4IO_OS_DEBUG") != "" && err != nil {
				m.t.Logf("%v", err)
			}
			return errSig(err, false)
		})
	case op < 62: // rename, rename2
		flags := uint(0)
		switch rng.IntN(4) {
		case 0:
			flags = ext4io.RENAME_NOREPLACE
		case 1:
			flags = ext4io.RENAME_EXCHANGE
		}
		plain := flags == 0 && rng.IntN(2) == 0
		m.do(fmt.Sprintf("rename %s %s %d %v", p, q, flags, plain), func(_ int, fsys ext4io.FileSystem) string {
			if plain {
				return errSig(fsys.Rename(p, q), true)
			}
			return errSig(fsys.Rename2(p, q, flags), true)
		})
	case op < 66: // link
		m.do(fmt.Sprintf("link %s %s", p, q), func(_ int, fsys ext4io.FileSystem) string {
			return errSig(fsys.Link(p, q), true)
		})
	case op < 71: // symlink
		t := m.target(q)
		m.do(fmt.Sprintf("symlink %s %s", t, q), func(_ int, fsys ext4io.FileSystem) string {
			return errSig(fsys.Symlink(t, q), true)
		})
	case op < 74: // mknod
		var mode fs.FileMode
		var dev uint64
		switch rng.IntN(4) {
		case 0:
			mode = fs.ModeNamedPipe
		case 1:
			mode, dev = fs.ModeDevice|fs.ModeCharDevice, ext4io.Mkdev(1, 3) // old encoding
		case 2:
			mode, dev = fs.ModeDevice, ext4io.Mkdev(259, 70000) // new encoding
		default:
			mode = fs.ModeSocket
		}
		mode |= fs.FileMode(rng.IntN(0o1000))
		m.do(fmt.Sprintf("mknod %s %v %#x", p, mode, dev), func(_ int, fsys ext4io.FileSystem) string {
			return errSig(fsys.Mknod(p, mode, dev), true)
		})
	case op < 80: // readdir
		if m.special(p) {
			return // os.ReadDir opens a fifo, and waits for a writer
		}
		m.do("readdir "+p, func(_ int, fsys ext4io.FileSystem) string {
			ents, err := fsys.ReadDir(p)
			return direntsSig(ents) + errSig(err, false)
		})
	case op < 88: // stat, lstat, readlink
		m.do("stat "+p, func(_ int, fsys ext4io.FileSystem) string {
			var out []string
			for _, st := range []func(string) (fs.FileInfo, error){fsys.Stat, fsys.Lstat} {
				fi, err := st(p)
				if err != nil {
					out = append(out, errSig(err, true))
				} else {
					out = append(out, fiSig(fi, true))
				}
			}
			tg, err := fsys.Readlink(p)
			return strings.Join(out, "; ") + "; " + tg + " " + errSig(err, true)
		})
	case op < 93: // chmod
		mode := fs.FileMode(rng.IntN(0o1000))
		if rng.IntN(4) == 0 {
			mode |= []fs.FileMode{fs.ModeSetuid, fs.ModeSetgid, fs.ModeSticky}[rng.IntN(3)]
		}
		m.do(fmt.Sprintf("chmod %s %v", p, mode), func(_ int, fsys ext4io.FileSystem) string {
			return errSig(fsys.Chmod(p, mode), true)
		})
	case op < 97: // writefile, readfile
		if m.special(p) {
			return
		}
		data := m.data()
		perm := fs.FileMode(rng.IntN(0o1000))
		m.do(fmt.Sprintf("writefile %s %v len %d", p, perm, len(data)), func(_ int, fsys ext4io.FileSystem) string {
			err := fsys.WriteFile(p, data, perm)
			got, rerr := fsys.ReadFile(p)
			return fmt.Sprintf("%s; %x %s", errSig(err, true), got, errSig(rerr, true))
		})
	default: // readfile
		if m.special(p) {
			return
		}
		m.do("readfile "+p, func(_ int, fsys ext4io.FileSystem) string {
			got, err := fsys.ReadFile(p)
			return fmt.Sprintf("%x %s", got, errSig(err, true))
		})
	}
}

// checkPositions compares the file positions of the open handles.
func (m *osModel) checkPositions() {
	m.t.Helper()
	for slot := range m.files[0] {
		a, b := m.files[0][slot], m.files[1][slot]
		if a == nil || b == nil {
			continue
		}
		if fi, err := a.Stat(); err != nil || fi.IsDir() {
			continue
		}
		pa, erra := a.Seek(0, io.SeekCurrent)
		pb, errb := b.Seek(0, io.SeekCurrent)
		if pa != pb || erra != nil || errb != nil {
			m.t.Fatalf("seed %d, after op %d: slot %d position %d / %d (%v / %v)", m.seed, len(m.log), slot, pa, pb, erra, errb)
		}
	}
}

// compareTrees walks a and b from their roots and fails where they
// differ: names, types, modes, sizes, link counts, device numbers, symlink
// targets and file contents.
func compareTrees(t *testing.T, what string, a, b ext4io.FileSystem) int {
	t.Helper()
	n := 0
	var walk func(dir string)
	walk = func(dir string) {
		ea, erra := a.ReadDir(dir)
		eb, errb := b.ReadDir(dir)
		if erra != nil || errb != nil {
			t.Fatalf("%s: readdir %q: %v / %v", what, dir, erra, errb)
		}
		if sa, sb := direntsSig(ea), direntsSig(eb); sa != sb {
			t.Fatalf("%s: directory %q:\n %s\n %s", what, dir, sa, sb)
		}
		for _, e := range ea {
			n++
			p := path.Join(dir, e.Name())
			fa, err1 := a.Lstat(p)
			fb, err2 := b.Lstat(p)
			if err1 != nil || err2 != nil {
				t.Fatalf("%s: lstat %s: %v / %v", what, p, err1, err2)
			}
			if sa, sb := fiSig(fa, true), fiSig(fb, true); sa != sb {
				t.Fatalf("%s: %s:\n %s\n %s", what, p, sa, sb)
			}
			switch {
			case fa.IsDir():
				walk(p)
			case fa.Mode()&fs.ModeSymlink != 0:
				ta, _ := a.Readlink(p)
				tb, _ := b.Readlink(p)
				if ta != tb {
					t.Fatalf("%s: %s -> %q / %q", what, p, ta, tb)
				}
			case fa.Mode().IsRegular():
				da, err1 := a.ReadFile(p)
				db, err2 := b.ReadFile(p)
				if err1 != nil || err2 != nil || !bytes.Equal(da, db) {
					t.Fatalf("%s: %s contents differ (%d / %d bytes; %v / %v)", what, p, len(da), len(db), err1, err2)
				}
			}
		}
	}
	walk(".")
	return n
}

// TestOSModel: the same random sequence of namespace and file operations
// on an image (through Volume.FileSystem) and on a host directory (through
// OSFileSystem, that is os) gives the same results and the same errors
// (by errors.Is, with the PathError's op and path); afterwards the trees
// are equal, e2fsck -fn is clean, and Linux's view of the image (mounted)
// equals the host directory too.
//
// It runs as root here, so the host never fails for permissions (EACCES),
// as ext4io, which checks no permission bits, never does either; as a
// normal user the host would refuse writes to files whose mode forbids
// them. The process umask is set to 0 for the test: ext4io applies none.
func TestOSModel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mknod of devices and mode-independent access need root")
	}
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	for _, bs := range []int{1024, 4096} {
		t.Run(fmt.Sprintf("%dk", bs/1024), func(t *testing.T) { runOSModel(t, bs) })
	}
}

// runOSModel is TestOSModel on an image of block size bs.
func runOSModel(t *testing.T, bs int) {
	ops := nsEnv("EXT4IO_OS_OPS", 2000)
	seed := nsSeed(t)
	img := formatImage(t, 64<<20, ext4io.FormatOptions{BlockSize: bs})
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	host := t.TempDir()
	if err := os.Mkdir(host+"/lost+found", 0o700); err != nil {
		t.Fatal(err)
	}
	for _, fsys := range []ext4io.FileSystem{v.FileSystem(), ext4io.OSFileSystem(host)} {
		if err := fsys.MkdirAll(osModelRoot, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m := &osModel{t: t, rng: rand.New(rand.NewPCG(seed, 11)), seed: seed, host: host,
		fs: [2]ext4io.FileSystem{v.FileSystem(), ext4io.OSFileSystem(host)}, ran: map[string]int{}}
	check := 50
	if os.Getenv("EXT4IO_OS_DEBUG") != "" {
		check = 1
	}
	for i := range ops {
		m.step()
		if (i+1)%check == 0 {
			m.checkPositions()
			compareTrees(t, fmt.Sprintf("seed %d, after op %d", seed, len(m.log)), m.fs[0], m.fs[1])
		}
	}
	for s := range m.files {
		for _, f := range m.files[s] {
			if f != nil {
				f.Close()
			}
		}
	}
	var counts []string
	for op, n := range m.ran {
		counts = append(counts, fmt.Sprintf("%s %d", op, n))
	}
	slices.Sort(counts)
	t.Logf("%d operations compared: %s", len(m.log), strings.Join(counts, ", "))
	n := compareTrees(t, "ext4io vs os", m.fs[0], m.fs[1])
	t.Logf("trees equal: %d entries", n)
	sa, err := v.Statfs()
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	e2fs.Fsck(t, img)
	ro, err := ext4io.OpenImage(img, ext4io.Options{})
	if err != nil {
		t.Fatal(err)
	}
	compareTrees(t, "read-only ext4io vs os", ro.FileSystem(), m.fs[1])
	rofs := ro.FileSystem()
	for _, err := range []error{
		rofs.WriteFile(osModelRoot+"new", nil, 0o644),
		rofs.Mkdir(osModelRoot+"new", 0o755),
		rofs.RemoveAll(osModelRoot),
		rofs.Rename(osModelRoot, "x"),
	} {
		if !errors.Is(err, syscall.EROFS) || !errors.Is(err, ext4io.ErrReadOnly) {
			t.Errorf("read-only volume: %v, want EROFS", err)
		}
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	mnt := mountLoop(t, img)
	compareTrees(t, "Linux vs os", ext4io.OSFileSystem(mnt), m.fs[1])
	sb, err := ext4io.OSFileSystem(mnt).Statfs()
	if err != nil {
		t.Fatal(err)
	}
	if sa.BlockSize != sb.BlockSize || sa.Blocks != sb.Blocks || sa.Files != sb.Files || sa.FilesFree != sb.FilesFree || sa.BlocksFree != sb.BlocksFree || sa.BlocksAvail != sb.BlocksAvail || sa.NameMax != sb.NameMax {
		t.Errorf("statfs: ext4io %+v, Linux %+v", sa, sb)
	}
}
