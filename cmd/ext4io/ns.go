package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/ext4io/ext4io"
)

// Namespace commands:
//
//	ext4io put IMAGE SRC DST     copy a host file (or directory tree) into the image
//	ext4io get IMAGE SRC DST     copy a file (or directory tree) out of the image
//	ext4io mkdir IMAGE PATH      make a directory
//	ext4io rm IMAGE PATH         remove a file, symlink or empty directory
//	ext4io mv IMAGE OLD NEW      rename
func init() {
	commands["put"] = command{"put IMAGE SRC DST   (host file or directory tree into the image)", cmdPut}
	commands["get"] = command{"get IMAGE SRC DST   (image file or directory tree to the host)", cmdGet}
	commands["mkdir"] = command{"mkdir IMAGE PATH", cmdMkdir}
	commands["rm"] = command{"rm IMAGE PATH   (file, symlink or empty directory)", cmdRm}
	commands["mv"] = command{"mv IMAGE OLD NEW", cmdMv}
}

func cmdMkdir(args []string, w io.Writer) error {
	if len(args) != 2 {
		return errUsage
	}
	return withWritable(args[0], func(v *ext4io.Volume) error { return v.Mkdir(args[1], 0o755) })
}

func cmdRm(args []string, w io.Writer) error {
	if len(args) != 2 {
		return errUsage
	}
	return withWritable(args[0], func(v *ext4io.Volume) error {
		fi, err := v.Lstat(args[1])
		if err != nil {
			return err
		}
		if fi.IsDir() {
			return v.Rmdir(args[1])
		}
		return v.Unlink(args[1])
	})
}

func cmdMv(args []string, w io.Writer) error {
	if len(args) != 3 {
		return errUsage
	}
	return withWritable(args[0], func(v *ext4io.Volume) error { return v.Rename(args[1], args[2]) })
}

func cmdPut(args []string, w io.Writer) error {
	if len(args) != 3 {
		return errUsage
	}
	src, dst := args[1], args[2]
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	return withWritable(args[0], func(v *ext4io.Volume) error {
		// Into an existing directory: keep the source's base name.
		if di, err := v.Stat(dst); err == nil && di.IsDir() {
			dst = path.Join(dst, filepath.Base(src))
		}
		if fi.IsDir() {
			if err := v.Mkdir(dst, fi.Mode().Perm()); err != nil {
				return err
			}
			if err := importTreeAt(v, src, dst); err != nil {
				return err
			}
			return copyAttrs(v, dst, fi)
		}
		return importOne(v, src, dst, fi)
	})
}

// importTree copies the host directory tree src into the root of v:
// regular files, directories and symlinks with their permission bits,
// owners (when readable) and modification times, like mkfs.ext4 -d.
// Other file types are skipped with an error naming them.
func importTree(v *ext4io.Volume, src string) error {
	if err := importTreeAt(v, src, "/"); err != nil {
		return err
	}
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	return copyAttrs(v, "/", fi)
}

func importTreeAt(v *ext4io.Volume, src, dst string) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	var dirs []fs.FileInfo
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			return err
		}
		s, d := filepath.Join(src, e.Name()), path.Join(dst, e.Name())
		if fi.IsDir() {
			if err := v.Mkdir(d, fi.Mode().Perm()); err != nil {
				return err
			}
			if err := importTreeAt(v, s, d); err != nil {
				return err
			}
			dirs = append(dirs, fi)
			continue
		}
		if err := importOne(v, s, d, fi); err != nil {
			return err
		}
	}
	// Directory times last: filling them changed their mtimes.
	for _, fi := range dirs {
		if err := copyAttrs(v, path.Join(dst, fi.Name()), fi); err != nil {
			return err
		}
	}
	return nil
}

// importOne copies one non-directory.
func importOne(v *ext4io.Volume, src, dst string, fi fs.FileInfo) error {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		if err := v.Symlink(target, dst); err != nil {
			return err
		}
		return copyAttrs(v, dst, fi)
	case fi.Mode().IsRegular():
		in, err := os.Open(src)
		if err != nil {
			return err
		}
		defer in.Close()
		f, err := v.Create(dst)
		if err != nil {
			return err
		}
		defer f.Close()
		buf := make([]byte, 1<<20)
		var off int64
		for {
			n, rerr := in.Read(buf)
			if n > 0 {
				if _, err := f.WriteAt(buf[:n], off); err != nil {
					return err
				}
				off += int64(n)
			}
			if rerr == io.EOF {
				break
			}
			if rerr != nil {
				return rerr
			}
		}
		return copyAttrs(v, dst, fi)
	default:
		return fmt.Errorf("%s: file type %v not supported: %w", src, fi.Mode().Type(), ext4io.ErrUnsupported)
	}
}

// copyAttrs sets mode, owner and times of dst from the host's fi.
func copyAttrs(v *ext4io.Volume, dst string, fi fs.FileInfo) error {
	atime := fi.ModTime()
	if at, uid, gid, ok := hostStat(fi); ok {
		atime = at
		if err := v.Lchown(dst, uid, gid); err != nil {
			return err
		}
	}
	if fi.Mode()&fs.ModeSymlink == 0 {
		if err := v.Chmod(dst, fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
			return err
		}
	}
	return v.Lchtimes(dst, atime, fi.ModTime())
}

func cmdGet(args []string, w io.Writer) error {
	if len(args) != 3 {
		return errUsage
	}
	v, err := openImage(args[0])
	if err != nil {
		return err
	}
	defer v.Close()
	src, dst := args[1], args[2]
	if di, err := os.Stat(dst); err == nil && di.IsDir() {
		dst = filepath.Join(dst, path.Base("/"+src))
	}
	return exportTree(v, src, dst)
}

// exportTree copies src (file, symlink or directory tree) out of v.
func exportTree(v *ext4io.Volume, src, dst string) error {
	fi, err := v.Lstat(src)
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		t, err := v.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(t, dst)
	case fi.IsDir():
		if err := os.Mkdir(dst, fi.Mode().Perm()|0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		ents, err := v.ReadDir(src)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if err := exportTree(v, path.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
				return err
			}
		}
		if err := os.Chmod(dst, fi.Mode().Perm()); err != nil {
			return err
		}
		return os.Chtimes(dst, fi.Atime, fi.Mtime)
	case fi.Mode().IsRegular():
		f, err := v.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fi.Mode().Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, f); err != nil {
			out.Close()
			return err
		}
		if err := out.Close(); err != nil {
			return err
		}
		return os.Chtimes(dst, fi.Atime, fi.Mtime)
	default:
		return fmt.Errorf("%s: file type %v not supported: %w", src, fi.Mode().Type(), ext4io.ErrUnsupported)
	}
}
