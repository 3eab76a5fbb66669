package fusefs_test

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/fusefs"
	"github.com/ext4io/ext4io/fusefs/fusetest"
)

// needFUSE skips the test, with one line, unless it can mount FUSE file
// systems here.
func needFUSE(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("fusefs: not root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("fusefs: no /dev/fuse")
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		t.Skip("fusefs: no fusermount3 (Debian package fuse3)")
	}
}

// newImage formats a file image of size bytes in a temporary directory.
func newImage(t testing.TB, size int64) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "img")
	dev, err := blockdev.CreateFile(img, size)
	if err != nil {
		t.Fatal(err)
	}
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	return img
}

// mounted is an image served at a directory by this process.
type mounted struct {
	t   testing.TB
	v   *ext4io.Volume
	s   *fusefs.Server
	w   *fusetest.Watchdog
	dir string
	img string
}

// mountBudget is how long a test may use one mount, its unmount included,
// before the watchdog aborts the connection and fails the test.
const mountBudget = 5 * time.Minute

func mount(t testing.TB, img string, o fusefs.Options) *mounted {
	t.Helper()
	return mountFor(t, img, o, mountBudget)
}

// mountFor is mount with the watchdog's budget for the mount given.
func mountFor(t testing.TB, img string, o fusefs.Options, budget time.Duration) *mounted {
	t.Helper()
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: !o.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s, err := fusefs.Mount(v, dir, o)
	if err != nil {
		v.Close()
		t.Fatal(err)
	}
	m := &mounted{t: t, v: v, s: s, w: fusetest.Watch(t, dir, budget), dir: dir, img: img}
	t.Cleanup(func() {
		if m.s != nil {
			m.unmount()
		}
	})
	return m
}

// unmount unmounts and closes the volume.
func (m *mounted) unmount() {
	m.t.Helper()
	if err := m.s.Unmount(); err != nil {
		m.t.Errorf("unmount: %v", err)
	}
	m.s.Wait()
	m.s = nil
	m.w.Stop()
	if err := m.v.Close(); err != nil {
		m.t.Errorf("close: %v", err)
	}
}

func (m *mounted) path(p string) string { return filepath.Join(m.dir, p) }

func e2fsck(t testing.TB, img string) {
	t.Helper()
	if _, err := exec.LookPath("e2fsck"); err != nil {
		t.Log("no e2fsck: image not checked")
		return
	}
	cmd := exec.Command("e2fsck", "-fn", img)
	cmd.Env = append(os.Environ(), "E2FSCK_CONFIG=/dev/null")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("e2fsck -fn: %v\n%s", err, out)
	}
}

// tree describes every file under root: type, mode, owner, size, link
// count, contents or target, and user xattrs, one line each.
func tree(t testing.TB, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "lost+found" {
			return fs.SkipDir
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		line := fmt.Sprintf("%s mode=%o uid=%d gid=%d nlink=%d", rel, st.Mode, st.Uid, st.Gid, st.Nlink)
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" size=%d data=%x", st.Size, sha(b))
		case syscall.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			line += " -> " + target
		}
		buf := make([]byte, 4096)
		if k, err := unix.Llistxattr(p, buf); err == nil && k > 0 {
			names := strings.Split(strings.TrimRight(string(buf[:k]), "\x00"), "\x00")
			sort.Strings(names)
			for _, nm := range names {
				if !strings.HasPrefix(nm, "user.") {
					continue
				}
				vb := make([]byte, 4096)
				vk, err := unix.Lgetxattr(p, nm, vb)
				if err != nil {
					return err
				}
				line += fmt.Sprintf(" %s=%q", nm, vb[:vk])
			}
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func sha(b []byte) []byte {
	// A short digest is enough to compare trees.
	var h [8]byte
	for i, c := range b {
		h[i%8] = h[i%8]*31 + c
	}
	return h[:]
}

func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestMountWorkload mounts a fresh image, runs a small workload through
// the kernel, unmounts, runs e2fsck -fn and compares the tree Linux's
// ext4 sees on a loop mount.
func TestMountWorkload(t *testing.T) {
	needFUSE(t)
	img := newImage(t, 64<<20)
	m := mount(t, img, fusefs.Options{})

	check(t, os.WriteFile(m.path("a"), []byte("hello, ext4io\n"), 0o640))
	check(t, os.Mkdir(m.path("d"), 0o750))
	check(t, os.Mkdir(m.path("d/e"), 0o700))
	big := bytes.Repeat([]byte("0123456789abcdef"), 100000) // 1.6 MB
	check(t, os.WriteFile(m.path("d/big"), big, 0o600))
	got, err := os.ReadFile(m.path("d/big"))
	check(t, err)
	if !bytes.Equal(got, big) {
		t.Fatal("d/big reads back different")
	}
	check(t, os.Rename(m.path("a"), m.path("d/e/a")))
	check(t, os.Symlink("e/a", m.path("d/link")))
	if b, err := os.ReadFile(m.path("d/link")); err != nil || string(b) != "hello, ext4io\n" {
		t.Fatalf("read through symlink: %q %v", b, err)
	}
	check(t, os.Link(m.path("d/e/a"), m.path("hard")))
	var st unix.Stat_t
	check(t, unix.Stat(m.path("hard"), &st))
	if st.Nlink != 2 {
		t.Fatalf("hard link: nlink %d, want 2", st.Nlink)
	}
	check(t, unix.Setxattr(m.path("hard"), "user.color", []byte("blue"), 0))
	buf := make([]byte, 64)
	k, err := unix.Getxattr(m.path("d/e/a"), "user.color", buf)
	check(t, err)
	if string(buf[:k]) != "blue" {
		t.Fatalf("xattr %q, want blue", buf[:k])
	}
	if err := unix.Setxattr(m.path("hard"), "user.big", make([]byte, 8000), 0); err != unix.ENOSPC {
		t.Fatalf("xattr larger than a block: %v, want ENOSPC as ext4", err)
	}
	if _, err := unix.Getxattr(m.path("hard"), "user.color", buf[:2]); err != unix.ERANGE {
		t.Fatalf("getxattr into a short buffer: %v, want ERANGE", err)
	}
	if _, err := unix.Getxattr(m.path("hard"), "user.none", buf); err != unix.ENODATA {
		t.Fatalf("missing xattr: %v, want ENODATA", err)
	}
	check(t, os.Truncate(m.path("d/big"), 100000))
	check(t, os.WriteFile(m.path("gone"), []byte("x"), 0o644))
	check(t, os.Remove(m.path("gone")))
	check(t, os.Mkdir(m.path("empty"), 0o755))
	check(t, os.Remove(m.path("empty")))
	if err := unix.Rmdir(m.path("d")); err != unix.ENOTEMPTY {
		t.Fatalf("rmdir of a full directory: %v, want ENOTEMPTY", err)
	}
	if err := unix.Mkdir(m.path("d"), 0o755); err != unix.EEXIST {
		t.Fatalf("mkdir of an existing name: %v, want EEXIST", err)
	}
	if _, err := os.Stat(m.path("nothere")); !os.IsNotExist(err) {
		t.Fatalf("stat of a missing name: %v", err)
	}
	// chown kills setuid (as on ext4), so chmod comes second.
	check(t, os.Chown(m.path("d/big"), 1000, 100))
	check(t, unix.Chmod(m.path("d/big"), 0o4755))
	check(t, unix.Stat(m.path("d/big"), &st))
	if st.Mode&0o7777 != 0o4755 || st.Uid != 1000 || st.Gid != 100 {
		t.Fatalf("chmod/chown: mode %o uid %d gid %d", st.Mode, st.Uid, st.Gid)
	}
	ts := []unix.Timespec{{Sec: 1000000000, Nsec: 123456789}, {Sec: 1500000000, Nsec: 987654321}}
	check(t, unix.UtimesNanoAt(unix.AT_FDCWD, m.path("d/e/a"), ts, 0))
	check(t, unix.Stat(m.path("d/e/a"), &st))
	if st.Mtim != ts[1] || st.Atim != ts[0] {
		t.Fatalf("utimensat: atime %v mtime %v, want %v", st.Atim, st.Mtim, ts)
	}
	if st.Ino == 0 {
		t.Fatal("inode number 0")
	}
	want := tree(t, m.dir)
	m.unmount()
	e2fsck(t, img)

	// Linux's ext4 on a loop mount sees the same tree.
	ldir := t.TempDir()
	if out, err := exec.Command("mount", "-o", "loop,ro", "-t", "ext4", img, ldir).CombinedOutput(); err != nil {
		t.Logf("loop mount not possible here, tree not compared with Linux: %v %s", err, out)
		return
	}
	defer exec.Command("umount", ldir).Run()
	if got := tree(t, ldir); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("Linux sees\n%s\n\next4io showed\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestMountIO covers fallocate, SEEK_DATA/SEEK_HOLE, O_DIRECT, fsync and
// statfs through the kernel.
func TestMountIO(t *testing.T) {
	needFUSE(t)
	img := newImage(t, 64<<20)
	m := mount(t, img, fusefs.Options{})
	p := m.path("f")
	fd, err := unix.Open(p, unix.O_CREAT|unix.O_RDWR, 0o644)
	check(t, err)
	defer func() {
		if fd >= 0 {
			unix.Close(fd)
		}
	}()
	check(t, unix.Fallocate(fd, 0, 0, 1<<20))
	var st unix.Stat_t
	check(t, unix.Fstat(fd, &st))
	if st.Size != 1<<20 || st.Blocks < (1<<20)/512 {
		t.Fatalf("fallocate: size %d blocks %d", st.Size, st.Blocks)
	}
	data := bytes.Repeat([]byte{0xab}, 8192)
	if _, err := unix.Pwrite(fd, data, 256<<10); err != nil {
		t.Fatal(err)
	}
	check(t, unix.Fsync(fd))
	// Unwritten extents count as holes.
	if off, err := unix.Seek(fd, 0, unix.SEEK_DATA); err != nil || off != 256<<10 {
		t.Fatalf("SEEK_DATA: %d %v, want %d", off, err, 256<<10)
	}
	if off, err := unix.Seek(fd, 256<<10, unix.SEEK_HOLE); err != nil || off != 256<<10+8192 {
		t.Fatalf("SEEK_HOLE: %d %v, want %d", off, err, 256<<10+8192)
	}
	check(t, unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 256<<10, 4096))
	got := make([]byte, 8192)
	if _, err := unix.Pread(fd, got, 256<<10); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:4096], make([]byte, 4096)) || !bytes.Equal(got[4096:], data[4096:]) {
		t.Fatal("punch hole: wrong contents")
	}
	check(t, unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, 1<<20, 1<<20))
	check(t, unix.Fstat(fd, &st))
	if st.Size != 1<<20 {
		t.Fatalf("keep-size fallocate changed the size to %d", st.Size)
	}
	check(t, unix.Fdatasync(fd))
	unix.Close(fd)
	fd = -1

	// O_DIRECT: aligned I/O reaches the image through ext4io's direct path.
	dfd, err := unix.Open(p, unix.O_RDWR|unix.O_DIRECT, 0)
	check(t, err)
	buf := alignedBuf(4096)
	for i := range buf {
		buf[i] = byte(i)
	}
	if n, err := unix.Pwrite(dfd, buf, 512<<10); err != nil || n != 4096 {
		t.Fatalf("O_DIRECT write: %d %v", n, err)
	}
	rbuf := alignedBuf(4096)
	if n, err := unix.Pread(dfd, rbuf, 512<<10); err != nil || n != 4096 || !bytes.Equal(rbuf, buf) {
		t.Fatalf("O_DIRECT read: %d %v", n, err)
	}
	if _, err := unix.Pwrite(dfd, buf[:100], 3); err != unix.EINVAL {
		t.Fatalf("unaligned O_DIRECT write: %v, want EINVAL", err)
	}
	unix.Close(dfd)

	var sfs unix.Statfs_t
	check(t, unix.Statfs(m.dir, &sfs))
	// Blocks leaves out the metadata overhead, as Linux's statfs does.
	if sfs.Bsize != 4096 || sfs.Blocks >= 16384 || sfs.Blocks < 16384*9/10 || sfs.Bfree == 0 || sfs.Bfree > sfs.Blocks || sfs.Namelen != 255 || sfs.Ffree == 0 {
		t.Fatalf("statfs: %+v", sfs)
	}
	m.unmount()
	e2fsck(t, img)
}

func alignedBuf(n int) []byte {
	b := make([]byte, n+4096)
	off := 4096 - int(uintptr(unsafe.Pointer(&b[0]))&4095)
	return b[off : off+n]
}

// TestMountConcurrent runs writers, readers and directory renames at once:
// each worker owns a directory it keeps renaming while it creates, writes,
// reads back and removes files in it, so path building races renames.
func TestMountConcurrent(t *testing.T) {
	needFUSE(t)
	img := newImage(t, 128<<20)
	m := mount(t, img, fusefs.Options{})
	check(t, os.Mkdir(m.path("top"), 0o755))
	const workers = 8
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			errs <- func() error {
				name := fmt.Sprintf("w%d", w)
				dir := m.path(name)
				if err := os.Mkdir(dir, 0o755); err != nil {
					return err
				}
				for i := range 60 {
					data := bytes.Repeat([]byte{byte(w), byte(i)}, 1000*(i%7+1))
					f := filepath.Join(dir, fmt.Sprintf("f%d", i))
					if err := os.WriteFile(f, data, 0o644); err != nil {
						return err
					}
					got, err := os.ReadFile(f)
					if err != nil {
						return err
					}
					if !bytes.Equal(got, data) {
						return fmt.Errorf("%s: wrong contents", f)
					}
					if i%3 == 0 {
						if err := os.Remove(f); err != nil {
							return err
						}
					}
					// Move the directory between the root and top/.
					next := m.path(filepath.Join("top", name))
					if i%2 == 1 {
						next = m.path(name)
					}
					if err := os.Rename(dir, next); err != nil {
						return err
					}
					dir = next
				}
				return nil
			}()
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	want := tree(t, m.dir)
	m.unmount()
	e2fsck(t, img)
	m2 := mount(t, img, fusefs.Options{ReadOnly: true})
	if got := tree(t, m2.dir); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("after remount\n%s\nbefore\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
