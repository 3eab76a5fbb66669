package main

import (
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"

	"github.com/ext4io/ext4io"
)

func cmdMkdir(args []string, w io.Writer) error {
	args, err := noFlags("mkdir", args, 2)
	if err != nil {
		return err
	}
	perm := 0o777 &^ umask() // before the volume's goroutines start
	return withWritable(args[0], func(v *ext4io.Volume) error { return v.Mkdir(args[1], perm) })
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
	if _, err := os.Lstat(src); err != nil {
		return err
	}
	return withWritable(args[0], func(v *ext4io.Volume) error {
		sb := v.Superblock()
		lim := srcLimits{blockSize: v.BlockSize(), inodeSize: int(sb.InodeSize)}
		if fi, err := os.Stat(args[0]); err == nil {
			lim.skip, _, _, lim.hasSkip = hostID(fi)
		}
		t, err := walkSource(src, lim, true)
		if err != nil {
			return err
		}
		// Into an existing directory: keep the source's base name.
		if di, err := v.Stat(dst); err == nil && di.IsDir() {
			dst = path.Join(dst, filepath.Base(src))
		}
		_, serr := v.Lstat(dst)
		existed := serr == nil
		im := newImporter(v)
		im.noXattrs = !t.xattrs
		ctx, stop := interruptible()
		defer stop()
		im.ctx = ctx
		err = im.one(t.root, dst, nil, nil)
		if _, serr := v.Lstat(dst); err != nil && !existed && serr == nil {
			// Out of space or interrupted while copying: what was copied
			// stays, consistent, and the user needs to know where.
			return fmt.Errorf("%w; the part copied stays in the image at %s", err, dst)
		}
		return err
	})
}
