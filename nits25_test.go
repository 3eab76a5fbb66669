//go:build linux

package ext4io_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/stretchr/testify/require"
)

// TestSymlinkTargetTooLong: a symlink target of 4,096 bytes or more is
// ENAMETOOLONG, as Linux's getname refuses it (PATH_MAX counts the NUL),
// whatever the block size; so is one that does not fit in a block with
// its NUL (ext4_symlink), checked after the name (an existing one is
// EEXIST). An empty target is an empty path: ENOENT.
func TestSymlinkTargetTooLong(t *testing.T) {
	for _, bs := range []int{1024, 8192} {
		img := formatImage(t, 16<<20, ext4io.FormatOptions{BlockSize: bs})
		v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
		require.NoError(t, err)
		require.NoError(t, v.WriteFile("f", []byte("x"), 0o644))
		limit := min(bs, 4096) // bytes a target must stay under
		err = v.Symlink(strings.Repeat("t", limit), "s")
		if !errors.Is(err, syscall.ENAMETOOLONG) || !errors.Is(err, ext4io.ErrNameTooLong) {
			t.Errorf("%d-byte blocks: Symlink to %d bytes: %s, want ENAMETOOLONG", bs, limit, short(err))
		}
		var le *os.LinkError
		require.ErrorAs(t, err, &le)
		if bs == 1024 {
			if err := v.Symlink(strings.Repeat("t", limit), "f"); !errors.Is(err, syscall.EEXIST) {
				t.Errorf("Symlink to %d bytes onto an existing name: %s, want EEXIST", limit, short(err))
			}
		}
		require.NoError(t, v.Symlink(strings.Repeat("t", limit-1), "s"))
		got, err := v.Readlink("s")
		require.NoError(t, err)
		require.Len(t, got, limit-1)
		if err := v.Symlink("", "e"); !errors.Is(err, syscall.ENOENT) {
			t.Errorf("Symlink to \"\": %s, want ENOENT", short(err))
		}
		require.NoError(t, v.Close())
	}
}

// TestLongPathsWalk: a path longer than PATH_MAX is walked, not refused:
// Volume's paths start at the root, where a Linux caller reaches a deep
// file from a working directory or a directory descriptor, and the FUSE
// server passes such paths for requests the kernel accepted. Names over
// 255 bytes stay ENAMETOOLONG.
func TestLongPathsWalk(t *testing.T) {
	v, _ := openOSVolume(t)
	defer v.Close()
	dir := ""
	for i := range 20 {
		dir += fmt.Sprintf("%03d%s/", i, strings.Repeat("d", 247))
		require.NoError(t, v.Mkdir(dir, 0o755))
	}
	require.Greater(t, len(dir), 4096)
	f := dir + "f"
	require.NoError(t, v.WriteFile(f, []byte("deep"), 0o644))
	got, err := v.ReadFile(f)
	require.NoError(t, err)
	require.Equal(t, "deep", string(got))
	require.NoError(t, v.Symlink("f", dir+"s"))
	require.NoError(t, v.Rename(f, dir+"g"))
	require.NoError(t, v.Link(dir+"g", dir+"h"))
	_, err = v.Stat(dir + "s")
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.NoError(t, v.Remove(dir+"g"))
	require.NoError(t, v.Remove(dir+"h"))
	err = v.Mkdir(dir+strings.Repeat("n", 256), 0o755)
	if !errors.Is(err, syscall.ENAMETOOLONG) {
		t.Errorf("Mkdir of a 256-byte name: %s, want ENAMETOOLONG", short(err))
	}
	require.NoError(t, v.RemoveAll("000"+strings.Repeat("d", 247)))
}

// short renders err without the long paths these tests pass.
func short(err error) string {
	if err == nil {
		return "<nil>"
	}
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		return pe.Op + ": " + pe.Err.Error()
	case errors.As(err, &le):
		return le.Op + ": " + le.Err.Error()
	}
	return err.Error()
}

// TestRenameDotEnds: rename(2) refuses ".", ".." or the root as either
// name with EBUSY once both parents are found (do_renameat2), before it
// looks either name up; RENAME_NOREPLACE makes such a new name EEXIST,
// and an empty path is ENOENT. Nothing is renamed.
func TestRenameDotEnds(t *testing.T) {
	v, _ := openOSVolume(t)
	defer v.Close()
	require.NoError(t, v.Mkdir("a", 0o755))
	require.NoError(t, v.WriteFile("f", []byte("x"), 0o644))
	for _, c := range []struct {
		old, new string
		flags    uint
		want     syscall.Errno
	}{
		{"a", ".", 0, syscall.EBUSY},
		{".", "a", 0, syscall.EBUSY},
		{"a", "..", 0, syscall.EBUSY},
		{"..", "b", 0, syscall.EBUSY},
		{"a/.", "b", 0, syscall.EBUSY},
		{"f", "a/.", 0, syscall.EBUSY},
		{"a/..", "b", 0, syscall.EBUSY},
		{"f", "a/..", 0, syscall.EBUSY},
		{"a", "a/.", 0, syscall.EBUSY},
		{"/", "b", 0, syscall.EBUSY},
		{"f", "/", 0, syscall.EBUSY},
		{"zz", ".", 0, syscall.EBUSY},      // before the lookup of zz
		{"nope/.", "b", 0, syscall.ENOENT}, // parents first
		{"f", ".", ext4io.RENAME_NOREPLACE, syscall.EEXIST},
		{".", "b", ext4io.RENAME_NOREPLACE, syscall.EBUSY},
		{"f", "a/..", ext4io.RENAME_EXCHANGE, syscall.EBUSY},
		{"..", "f", ext4io.RENAME_EXCHANGE, syscall.EBUSY},
		{"", "b", 0, syscall.ENOENT},
		{"f", "", 0, syscall.ENOENT},
	} {
		err := v.Rename2(c.old, c.new, c.flags)
		var le *os.LinkError
		if !errors.Is(err, c.want) || !errors.As(err, &le) {
			t.Errorf("Rename2(%q, %q, %d): %v, want a LinkError matching %v", c.old, c.new, c.flags, err, c.want)
		}
	}
	for _, name := range []string{"a", "f"} {
		_, err := v.Stat(name)
		require.NoError(t, err)
	}
}

// TestXattrErrnos: the xattr calls fail with the errnos setxattr(2),
// getxattr(2) and removexattr(2) give on ext4, each also matching the
// package sentinel it matched before: a name empty or over 255 bytes is
// ERANGE (ErrRange), checked before the namespace; an unknown namespace
// EOPNOTSUPP (ErrUnsupported); a value over 64 KiB E2BIG (ErrRange); a
// missing attribute ENODATA (ErrNoAttr); a known prefix with nothing
// after it EINVAL.
func TestXattrErrnos(t *testing.T) {
	v, _ := openOSVolume(t)
	defer v.Close()
	require.NoError(t, v.WriteFile("f", []byte("x"), 0o644))
	long := "user." + strings.Repeat("n", 251)
	for _, c := range []struct {
		attr  string
		value int
		want  []error
	}{
		{"", 1, []error{syscall.ERANGE, ext4io.ErrRange}},
		{long, 1, []error{syscall.ERANGE, ext4io.ErrRange}},
		{"foo." + strings.Repeat("n", 252), 1, []error{syscall.ERANGE, ext4io.ErrRange}},
		{"foo.bar", 1, []error{syscall.EOPNOTSUPP, ext4io.ErrUnsupported}},
		{"bar", 1, []error{syscall.EOPNOTSUPP, ext4io.ErrUnsupported}},
		{"system.foo", 1, []error{syscall.EOPNOTSUPP, ext4io.ErrUnsupported}},
		{"user.", 1, []error{syscall.EINVAL}},
		{"user.big", 64<<10 + 1, []error{syscall.E2BIG, ext4io.ErrRange}},
	} {
		err := v.Setxattr("f", c.attr, make([]byte, c.value), 0)
		for _, w := range c.want {
			if !errors.Is(err, w) {
				t.Errorf("Setxattr %.12q (%d bytes) of %d bytes: %v, want %v", c.attr, len(c.attr), c.value, err, w)
			}
		}
		var pe *fs.PathError
		require.ErrorAs(t, err, &pe)
		if c.value > 1 {
			continue
		}
		_, err = v.Getxattr("f", c.attr)
		if !errors.Is(err, c.want[0]) {
			t.Errorf("Getxattr %.12q: %v, want %v", c.attr, err, c.want[0])
		}
		err = v.Removexattr("f", c.attr)
		if !errors.Is(err, c.want[0]) {
			t.Errorf("Removexattr %.12q: %v, want %v", c.attr, err, c.want[0])
		}
	}
	require.NoError(t, v.Setxattr("f", long[:255], []byte("v"), 0))
	for _, err := range []error{
		func() error { _, err := v.Getxattr("f", "user.none"); return err }(),
		v.Removexattr("f", "user.none"),
		v.Setxattr("f", "user.none", []byte("v"), ext4io.XATTR_REPLACE),
	} {
		if !errors.Is(err, syscall.ENODATA) || !errors.Is(err, ext4io.ErrNoAttr) {
			t.Errorf("missing attribute: %v, want ENODATA", err)
		}
	}
}

// TestMkdirModeBits: mkdir(2) keeps only the permission and sticky bits
// of the mode it is given (vfs_mkdir); a new directory is setgid only when
// its parent is (inode_init_owner). Files and nodes made by root keep a
// setgid bit asked for (mode_strip_sgid strips it only for callers
// outside the group without CAP_FSETID), as on the host's ext4.
func TestMkdirModeBits(t *testing.T) {
	v, _ := openOSVolume(t)
	defer v.Close()
	special := fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky
	mode := func(name string) fs.FileMode {
		fi, err := v.Stat(name)
		require.NoError(t, err)
		return fi.Mode()
	}
	require.NoError(t, v.Mkdir("d", 0o755|special))
	if got, want := mode("d"), fs.ModeDir|fs.ModeSticky|0o755; got != want {
		t.Errorf("Mkdir with setuid, setgid and sticky: %v, want %v", got, want)
	}
	require.NoError(t, v.Mkdir("sg", 0o755))
	require.NoError(t, v.Chmod("sg", 0o755|fs.ModeSetgid))
	require.NoError(t, v.Mkdir("sg/d", 0o700|fs.ModeSetuid))
	if got, want := mode("sg/d"), fs.ModeDir|fs.ModeSetgid|0o700; got != want {
		t.Errorf("Mkdir in a setgid directory: %v, want %v", got, want)
	}
	root, err := v.Open("/")
	require.NoError(t, err)
	defer root.Close()
	at, err := root.MkdirAt("at", 0o755|special)
	require.NoError(t, err)
	at.Close()
	if got, want := mode("at"), fs.ModeDir|fs.ModeSticky|0o755; got != want {
		t.Errorf("MkdirAt with setuid, setgid and sticky: %v, want %v", got, want)
	}
	f, err := v.OpenFile("f", os.O_CREATE|os.O_RDWR, 0o755|special)
	require.NoError(t, err)
	f.Close()
	if got, want := mode("f"), special|0o755; got != want {
		t.Errorf("OpenFile O_CREATE: %v, want %v", got, want)
	}
	require.NoError(t, v.Mknod("p", fs.ModeNamedPipe|0o755|fs.ModeSetgid, 0))
	if got, want := mode("p"), fs.ModeNamedPipe|fs.ModeSetgid|0o755; got != want {
		t.Errorf("Mknod: %v, want %v", got, want)
	}
}

// TestTinyTimerIntervals: a WritebackAge or CommitInterval of 1 ns is
// taken as the floor the fields document (minTimerInterval), so that an
// idle volume's flusher and committer do not wake back to back: the
// process's CPU time over an idle while stays under a sixth of it.
func TestTinyTimerIntervals(t *testing.T) {
	img := formatImage(t, 32<<20, ext4io.FormatOptions{})
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true, WritebackAge: 1, CommitInterval: 1})
	require.NoError(t, err)
	require.NoError(t, v.WriteFile("f", []byte("x"), 0o644))
	cpu := func() time.Duration {
		var ru syscall.Rusage
		require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	const idle = 500 * time.Millisecond
	before := cpu()
	time.Sleep(idle)
	used := cpu() - before
	require.NoError(t, v.Close())
	t.Logf("CPU time over %v idle: %v", idle, used)
	if used > idle/6 {
		t.Errorf("idle volume with 1 ns timers used %v of CPU in %v", used, idle)
	}
}

// TestDotLastNames: a path whose last name is ".", ".." or the root is
// refused as Linux refuses it once the parent is found: EEXIST for the
// calls that create a name (filename_create), EISDIR for unlink, EINVAL,
// ENOTEMPTY or EBUSY for rmdir (do_rmdir), and os.Remove's choice
// between them; an empty path is ENOENT. The errnos were checked against
// the host's ext4 where a host path can name them.
func TestDotLastNames(t *testing.T) {
	v, _ := openOSVolume(t)
	defer v.Close()
	require.NoError(t, v.Mkdir("a", 0o755))
	require.NoError(t, v.WriteFile("f", []byte("x"), 0o644))
	calls := []struct {
		name string
		fn   func(p string) error
	}{
		{"Mkdir", func(p string) error { return v.Mkdir(p, 0o755) }},
		{"Mknod", func(p string) error { return v.Mknod(p, fs.ModeNamedPipe|0o644, 0) }},
		{"Symlink", func(p string) error { return v.Symlink("f", p) }},
		{"Link", func(p string) error { return v.Link("f", p) }},
		{"Unlink", func(p string) error { return v.Unlink(p) }},
		{"Rmdir", func(p string) error { return v.Rmdir(p) }},
		{"Remove", func(p string) error { return v.Remove(p) }},
	}
	for _, c := range []struct {
		path string
		want []syscall.Errno // in calls' order
	}{
		{".", []syscall.Errno{syscall.EEXIST, syscall.EEXIST, syscall.EEXIST, syscall.EEXIST, syscall.EISDIR, syscall.EINVAL, syscall.EINVAL}},
		{"a/.", []syscall.Errno{syscall.EEXIST, syscall.EEXIST, syscall.EEXIST, syscall.EEXIST, syscall.EISDIR, syscall.EINVAL, syscall.EINVAL}},
		{"..", []syscall.Errno{syscall.EEXIST, syscall.EEXIST, syscall.EEXIST, syscall.EEXIST, syscall.EISDIR, syscall.ENOTEMPTY, syscall.ENOTEMPTY}},
		{"a/..", []syscall.Errno{syscall.EEXIST, syscall.EEXIST, syscall.EEXIST, syscall.EEXIST, syscall.EISDIR, syscall.ENOTEMPTY, syscall.ENOTEMPTY}},
		{"/", []syscall.Errno{syscall.EEXIST, syscall.EEXIST, syscall.EEXIST, syscall.EEXIST, syscall.EISDIR, syscall.EBUSY, syscall.EBUSY}},
		{"", []syscall.Errno{syscall.ENOENT, syscall.ENOENT, syscall.ENOENT, syscall.ENOENT, syscall.ENOENT, syscall.ENOENT, syscall.ENOENT}},
		{"nope/.", []syscall.Errno{syscall.ENOENT, syscall.ENOENT, syscall.ENOENT, syscall.ENOENT, syscall.ENOENT, syscall.ENOENT, syscall.ENOENT}},
	} {
		for i, call := range calls {
			err := call.fn(c.path)
			if !errors.Is(err, c.want[i]) {
				t.Errorf("%s(%q): %v, want %v", call.name, c.path, err, c.want[i])
			}
		}
	}
	for _, name := range []string{"a", "f"} {
		_, err := v.Stat(name)
		require.NoError(t, err)
	}
}

// TestHostRenameDotBusy: the host FileSystem's rename of "." matches
// ErrBusy as the image's does, so code written against FileSystem can
// test for it either way.
func TestHostRenameDotBusy(t *testing.T) {
	v, _ := openOSVolume(t)
	defer v.Close()
	for _, fsys := range []ext4io.FileSystem{v.FileSystem(), ext4io.OSFileSystem(t.TempDir())} {
		require.NoError(t, fsys.Mkdir("a", 0o755))
		err := fsys.Rename("a", ".")
		if !errors.Is(err, ext4io.ErrBusy) || !errors.Is(err, syscall.EBUSY) {
			t.Errorf("%T: Rename(a, .): %v, want ErrBusy", fsys, err)
		}
	}
}
