package ext4io_test

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/stretchr/testify/require"
)

// emptyPathCalls calls every path-taking method of a FileSystem with an
// empty path in each path argument, the other one naming an existing
// file "f" or a fresh name.
func emptyPathCalls(fsys ext4io.FileSystem) map[string]error {
	now := time.Now()
	calls := map[string]error{}
	call := func(name string, err error) { calls[name] = err }
	_, err := fsys.Create("")
	call("Create", err)
	_, err = fsys.Open("")
	call("Open", err)
	_, err = fsys.OpenFile("", os.O_RDONLY, 0)
	call("OpenFile", err)
	_, err = fsys.OpenFile("", os.O_RDWR|os.O_CREATE, 0o644)
	call("OpenFile O_CREATE", err)
	_, err = fsys.OpenFile("", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	call("OpenFile O_CREATE|O_EXCL", err)
	call("Mkdir", fsys.Mkdir("", 0o755))
	call("MkdirAll", fsys.MkdirAll("", 0o755))
	call("Remove", fsys.Remove(""))
	call("Rename old", fsys.Rename("", "n"))
	call("Rename new", fsys.Rename("f", ""))
	call("Rename2 old", fsys.Rename2("", "n", 0))
	call("Rename2 new", fsys.Rename2("f", "", 0))
	call("Link old", fsys.Link("", "n"))
	call("Link new", fsys.Link("f", ""))
	call("Symlink", fsys.Symlink("f", ""))
	_, err = fsys.Readlink("")
	call("Readlink", err)
	call("Mknod", fsys.Mknod("", syscall.S_IFIFO|0o644, 0))
	_, err = fsys.Stat("")
	call("Stat", err)
	_, err = fsys.Lstat("")
	call("Lstat", err)
	call("Chmod", fsys.Chmod("", 0o700))
	call("Chown", fsys.Chown("", 1, 1))
	call("Lchown", fsys.Lchown("", 1, 1))
	call("Chtimes", fsys.Chtimes("", now, now))
	call("Truncate", fsys.Truncate("", 0))
	_, err = fsys.ReadDir("")
	call("ReadDir", err)
	_, err = fsys.ReadFile("")
	call("ReadFile", err)
	call("WriteFile", fsys.WriteFile("", nil, 0o644))
	return calls
}

// checkEmptyPathErr fails unless err is ENOENT in an *fs.PathError or,
// for the two-path calls, an *os.LinkError.
func checkEmptyPathErr(t *testing.T, what string, err error) {
	t.Helper()
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case err == nil:
		t.Errorf("%s(\"\"): no error, want ENOENT", what)
	case !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, syscall.ENOENT):
		t.Errorf("%s(\"\"): %v, want ENOENT", what, err)
	case !errors.As(err, &pe) && !errors.As(err, &le):
		t.Errorf("%s(\"\"): %T %v, want an *fs.PathError or *os.LinkError", what, err, err)
	}
}

// TestEmptyPathNotExist: an empty path names nothing, as on Linux
// (os.Stat("") is ENOENT), in every path-taking call of Volume, its
// FileSystem and the host's OSFileSystem alike; it does not name the
// root. RemoveAll("") does nothing, as os.RemoveAll. The image keeps its
// root's mode and owner and passes e2fsck.
func TestEmptyPathNotExist(t *testing.T) {
	host := t.TempDir()
	require.NoError(t, os.WriteFile(host+"/f", []byte("x"), 0o644))
	hostInfo, err := os.Stat(host)
	require.NoError(t, err)
	for name, err := range emptyPathCalls(ext4io.OSFileSystem(host)) {
		if name == "Chown" || name == "Lchown" {
			continue // the host checks permission first when not root
		}
		checkEmptyPathErr(t, "OSFileSystem "+name, err)
	}
	require.NoError(t, ext4io.OSFileSystem(host).RemoveAll(""))
	fi, err := os.Stat(host)
	require.NoError(t, err)
	require.Equal(t, hostInfo.Mode(), fi.Mode(), "host directory's mode")

	v, img := openOSVolume(t)
	require.NoError(t, v.WriteFile("f", []byte("x"), 0o644))
	root, err := v.Stat("/")
	require.NoError(t, err)
	for name, err := range emptyPathCalls(v.FileSystem()) {
		checkEmptyPathErr(t, name, err)
	}
	require.NoError(t, v.RemoveAll(""))
	now := time.Now()
	checkEmptyPathErr(t, "Lchtimes", v.Lchtimes("", now, now))
	checkEmptyPathErr(t, "Unlink", v.Unlink(""))
	checkEmptyPathErr(t, "Rmdir", v.Rmdir(""))
	_, err = v.DirEntries("")
	checkEmptyPathErr(t, "DirEntries", err)
	_, err = v.Listxattr("")
	checkEmptyPathErr(t, "Listxattr", err)
	_, err = v.Llistxattr("")
	checkEmptyPathErr(t, "Llistxattr", err)
	_, err = v.Getxattr("", "user.a")
	checkEmptyPathErr(t, "Getxattr", err)
	_, err = v.Lgetxattr("", "user.a")
	checkEmptyPathErr(t, "Lgetxattr", err)
	checkEmptyPathErr(t, "Setxattr", v.Setxattr("", "user.a", []byte("v"), 0))
	checkEmptyPathErr(t, "Lsetxattr", v.Lsetxattr("", "user.a", []byte("v"), 0))
	checkEmptyPathErr(t, "Removexattr", v.Removexattr("", "user.a"))
	checkEmptyPathErr(t, "Lremovexattr", v.Lremovexattr("", "user.a"))
	d, err := v.Open("/")
	require.NoError(t, err)
	_, err = d.CreateAt("", 0o644)
	checkEmptyPathErr(t, "CreateAt", err)
	_, err = d.MkdirAt("", 0o755)
	checkEmptyPathErr(t, "MkdirAt", err)
	require.NoError(t, d.Close())

	// The paths that do name the root still do.
	for _, name := range []string{"/", ".", "/.", "//"} {
		fi, err := v.Stat(name)
		require.NoError(t, err, name)
		require.Equal(t, root.Ino, fi.Ino, name)
	}
	ents, err := v.ReadDir(".")
	require.NoError(t, err)
	require.NotEmpty(t, ents)
	after, err := v.Stat("/")
	require.NoError(t, err)
	require.Equal(t, root.Mode(), after.Mode(), "root's mode")
	require.Equal(t, root.UID, after.UID, "root's owner")
	require.NoError(t, v.Close())
	ext4iotest.Fsck(t, img)
}

// TestFSEmptyPathInvalid: the io/fs view refuses "" as io/fs's
// ValidPath does, with fs.ErrInvalid; "." is the root.
func TestFSEmptyPathInvalid(t *testing.T) {
	v, _ := openOSVolume(t)
	defer v.Close()
	fsys := v.FS()
	_, errOpen := fsys.Open("")
	_, errStat := fsys.Stat("")
	_, errLstat := fsys.Lstat("")
	_, errReadDir := fsys.ReadDir("")
	_, errReadLink := fsys.ReadLink("")
	_, errReadFile := fs.ReadFile(fsys, "")
	for _, err := range []error{errOpen, errStat, errLstat, errReadDir, errReadLink, errReadFile} {
		var pe *fs.PathError
		require.ErrorAs(t, err, &pe)
		require.ErrorIs(t, err, fs.ErrInvalid)
	}
	_, err := fsys.ReadDir(".")
	require.NoError(t, err)
}
