package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/ext4io/ext4io"
)

// Each write command opens the image read-write, changes it and closes it
// (marking it clean), like debugfs -w. What they print comes after the
// image closed: a report of success is not followed by an error.

// openWritable opens an image for the write commands (tests replace it
// to inject device faults).
var openWritable = func(img string) (*ext4io.Volume, error) {
	return openImageOpts(img, ext4io.Options{Writable: true})
}

func withWritable(img string, fn func(v *ext4io.Volume) error) (err error) {
	v, err := openWritable(img)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := v.Close(); err == nil {
			err = cerr
		}
	}()
	return fn(v)
}

// closeFile closes f, keeping the first error in *err.
func closeFile(f *ext4io.File, err *error) {
	if cerr := f.Close(); *err == nil {
		*err = cerr
	}
}

func cmdCreate(args []string, w io.Writer) error {
	args, err := noFlags("create", args, 2)
	if err != nil {
		return err
	}
	var ino uint32
	perm := 0o666 &^ umask() // before the volume's goroutines start
	err = withWritable(args[0], func(v *ext4io.Volume) (err error) {
		f, err := v.OpenFile(args[1], os.O_RDWR|os.O_CREATE|os.O_TRUNC, perm)
		if err != nil {
			return err
		}
		defer closeFile(f, &err)
		ino = f.Ino()
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "created %s (inode %d)\n", args[1], ino)
	return nil
}

// stdin is what write copies into the file (tests replace it).
var stdin io.Reader = os.Stdin

func cmdWrite(args []string, w io.Writer) error {
	fs := newFlags("write")
	offStr := fs.String("offset", "0", "byte offset in the file to write at (K, M, G, T or P suffixes)")
	direct := fs.Bool("direct", false, "direct I/O for the whole blocks (the offset must be block-aligned); the last partial block goes through the page cache")
	args, err := parseArgs(fs, args, 2, 2)
	if err != nil {
		return err
	}
	off, err := parseSize0(*offStr)
	if err != nil {
		return fmt.Errorf("%w: --offset: %w", errUsage, err)
	}
	var n, viaDirect int64
	var tail int
	perm := 0o666 &^ umask() // before the volume's goroutines start
	err = withWritable(args[0], func(v *ext4io.Volume) (err error) {
		name := args[1]
		// Checked before the file is created, so that a misaligned
		// direct write leaves no new empty file.
		if bs := int64(v.BlockSize()); *direct && off%bs != 0 {
			return fmt.Errorf("--direct: offset %d is not aligned to the %d-byte block size: %w", off, bs, ext4io.ErrInvalid)
		}
		f, err := v.OpenFile(name, os.O_RDWR, 0)
		if errors.Is(err, ext4io.ErrNotFound) {
			f, err = v.OpenFile(name, os.O_RDWR|os.O_CREATE, perm)
		}
		if err != nil {
			return err
		}
		defer closeFile(f, &err)
		if !*direct {
			if n, err = io.Copy(io.NewOffsetWriter(f, off), stdin); err != nil {
				return err
			}
			return f.Sync()
		}
		d, err := v.OpenFile(name, os.O_RDWR|ext4io.O_DIRECT, 0)
		if err != nil {
			return err
		}
		defer closeFile(d, &err)
		k, rest, err := copyDirect(d, v.BlockSize(), off, stdin)
		if err != nil {
			return err
		}
		// The last partial block cannot go direct (as with O_DIRECT): it
		// goes through the page cache.
		if len(rest) > 0 {
			if _, err := f.WriteAt(rest, off+k); err != nil {
				return err
			}
		}
		n, viaDirect, tail = k+int64(len(rest)), k, len(rest)
		if err := d.Sync(); err != nil {
			return err
		}
		return f.Sync()
	})
	if err != nil {
		return err
	}
	if *direct {
		fmt.Fprintf(w, "wrote %d bytes at %d (%d direct, %d buffered)\n", n, off, viaDirect, tail)
	} else {
		fmt.Fprintf(w, "wrote %d bytes at %d\n", n, off)
	}
	return nil
}

// copyDirect writes r to the direct file f from off in chunks of whole
// blocks of bs bytes. It returns the bytes written and the last partial
// block's bytes, which it leaves to the caller.
func copyDirect(f *ext4io.File, bs int, off int64, r io.Reader) (int64, []byte, error) {
	chunk := max(1<<20/bs, 1) * bs
	buf := make([]byte, chunk)
	var done int64
	for {
		k, err := io.ReadFull(r, buf)
		if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
			return done, nil, err
		}
		whole := k / bs * bs
		if whole > 0 {
			if _, werr := f.WriteAt(buf[:whole], off+done); werr != nil {
				return done, nil, werr
			}
			done += int64(whole)
		}
		if err != nil { // the end of r
			return done, buf[whole:k], nil
		}
	}
}

func cmdFallocate(args []string, w io.Writer) error {
	fs := newFlags("fallocate")
	mode := fs.String("mode", "allocate", "allocate, keep-size, punch-hole, zero-range, write-zeroes, collapse-range or insert-range (as fallocate(2)'s flags)")
	args, err := parseArgs(fs, args, 4, 4)
	if err != nil {
		return err
	}
	m, err := ext4io.ParseFallocMode(*mode)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	off, err := parseSize0(args[2])
	if err != nil {
		return fmt.Errorf("%w: OFFSET: %w", errUsage, err)
	}
	length, err := parseSize0(args[3])
	if err != nil {
		return fmt.Errorf("%w: LENGTH: %w", errUsage, err)
	}
	return withWritable(args[0], func(v *ext4io.Volume) (err error) {
		f, err := v.OpenFile(args[1], os.O_RDWR, 0)
		if err != nil {
			return err
		}
		defer closeFile(f, &err)
		if err := f.Fallocate(m, off, length); err != nil {
			return err
		}
		return f.Sync()
	})
}

func cmdTruncate(args []string, w io.Writer) error {
	args, err := noFlags("truncate", args, 3)
	if err != nil {
		return err
	}
	size, err := parseSize0(args[2])
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	return withWritable(args[0], func(v *ext4io.Volume) (err error) {
		f, err := v.OpenFile(args[1], os.O_RDWR, 0)
		if err != nil {
			return err
		}
		defer closeFile(f, &err)
		if err := f.Truncate(size); err != nil {
			return err
		}
		return f.Sync()
	})
}
