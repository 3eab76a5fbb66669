package main

import (
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"

	"github.com/ext4io/ext4io"
)

func cmdMkdir(args []string, w io.Writer) error {
	args, err := noFlags("mkdir", args, 2)
	if err != nil {
		return err
	}
	return withWritable(args[0], func(v *ext4io.Volume) error { return v.Mkdir(args[1], 0o755) })
}

func cmdRm(args []string, w io.Writer) error {
	args, err := noFlags("rm", args, 2)
	if err != nil {
		return err
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
	args, err := noFlags("mv", args, 3)
	if err != nil {
		return err
	}
	return withWritable(args[0], func(v *ext4io.Volume) error { return v.Rename(args[1], args[2]) })
}

func cmdPut(args []string, w io.Writer) error {
	args, err := noFlags("put", args, 3)
	if err != nil {
		return err
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
			return copyAttrs(v, src, dst, fi)
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
	return copyAttrs(v, src, "/", fi)
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
		if err := copyAttrs(v, filepath.Join(src, fi.Name()), path.Join(dst, fi.Name()), fi); err != nil {
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
		return copyAttrs(v, src, dst, fi)
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
		return copyAttrs(v, src, dst, fi)
	default:
		return fmt.Errorf("%s: file type %v not supported: %w", src, fi.Mode().Type(), ext4io.ErrUnsupported)
	}
}

// copyAttrs sets the extended attributes, mode, owner and times of dst
// from the host's src (fi). Attributes come first: an ACL sets mode bits,
// which the host's mode then confirms.
func copyAttrs(v *ext4io.Volume, src, dst string, fi fs.FileInfo) error {
	attrs, err := hostXattrs(src)
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(attrs)) {
		if err := v.Lsetxattr(dst, name, attrs[name], 0); err != nil {
			return fmt.Errorf("%s: %w", src, err)
		}
	}
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
