//go:build unix

package ext4io_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/stretchr/testify/require"
)

// TestOpenFileDirectoryNoFollow: O_DIRECTORY and O_NOFOLLOW act as in
// open(2), checked against the host's os.OpenFile on the same tree:
// O_DIRECTORY on a file (or a symlink to one) is ENOTDIR, beside O_CREATE
// EINVAL; O_NOFOLLOW on a final symlink is ELOOP (EEXIST with
// O_CREATE|O_EXCL), and the symlink's target is neither opened, truncated
// nor created. Both were ignored: the file opened, the link was followed.
func TestOpenFileDirectoryNoFollow(t *testing.T) {
	v, _ := openOSVolume(t)
	defer v.Close()
	host := t.TempDir()
	vfs, hfs := v.FileSystem(), ext4io.OSFileSystem(host)
	for _, fsys := range []ext4io.FileSystem{vfs, hfs} {
		require.NoError(t, fsys.Mkdir("d", 0o755))
		require.NoError(t, fsys.WriteFile("f", []byte("data"), 0o644))
		require.NoError(t, fsys.Symlink("f", "lf"))
		require.NoError(t, fsys.Symlink("d", "ld"))
		require.NoError(t, fsys.Symlink("missing", "dangling"))
	}
	const (
		rdonly = os.O_RDONLY
		rdwr   = os.O_RDWR
		dir    = syscall.O_DIRECTORY
		nofol  = syscall.O_NOFOLLOW
		creat  = os.O_CREATE
		excl   = os.O_EXCL
		trunc  = os.O_TRUNC
	)
	cases := []struct {
		name string
		flag int
		want error // nil: opens
	}{
		{"f", rdonly | dir, syscall.ENOTDIR},
		{"lf", rdonly | dir, syscall.ENOTDIR},
		{"d", rdonly | dir, nil},
		{"ld", rdonly | dir, nil},
		{"new", rdwr | creat | dir, syscall.EINVAL},
		{"lf", rdonly | nofol, syscall.ELOOP},
		{"lf", rdwr | trunc | nofol, syscall.ELOOP},
		{"ld", rdonly | nofol, syscall.ELOOP},
		{"dangling", rdwr | creat | nofol, syscall.ELOOP},
		{"dangling", rdwr | creat | excl | nofol, syscall.EEXIST},
		{"ld", rdonly | dir | nofol, syscall.ENOTDIR},
		{"ld/", rdonly | nofol, nil},
		{"f", rdonly | nofol, nil},
		{"d", rdonly | dir | nofol, nil},
		{"new2", rdwr | creat | nofol, nil},
	}
	for _, c := range cases {
		for _, fsys := range []ext4io.FileSystem{hfs, vfs} {
			f, err := fsys.OpenFile(c.name, c.flag, 0o644)
			if err == nil {
				f.Close()
			}
			where := "ext4io"
			if fsys == hfs {
				where = "host"
			}
			if c.want == nil {
				require.NoError(t, err, "%s: OpenFile(%q, %#x)", where, c.name, c.flag)
				continue
			}
			var pe *fs.PathError
			if !errors.Is(err, c.want) || !errors.As(err, &pe) || pe.Path != c.name {
				t.Errorf("%s: OpenFile(%q, %#x) = %v; want an *fs.PathError for %q wrapping %v", where, c.name, c.flag, err, c.name, c.want)
			}
		}
	}
	got, err := v.ReadFile("f")
	require.NoError(t, err)
	require.Equal(t, "data", string(got), "O_TRUNC|O_NOFOLLOW truncated the symlink's target")
	_, err = v.Lstat("missing")
	require.ErrorIs(t, err, fs.ErrNotExist, "O_CREATE|O_NOFOLLOW created the dangling symlink's target")
	_, err = os.Lstat(filepath.Join(host, "missing"))
	require.ErrorIs(t, err, fs.ErrNotExist)
}
