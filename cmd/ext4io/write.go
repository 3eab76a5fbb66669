package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/ext4io/ext4io"
)

// Each write command opens the image read-write, changes it and closes it
// (marking it clean), like debugfs -w.

func withWritable(img string, fn func(v *ext4io.Volume) error) (err error) {
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
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

func cmdCreate(args []string, w io.Writer) error {
	if len(args) != 2 {
		return errUsage
	}
	return withWritable(args[0], func(v *ext4io.Volume) error {
		f, err := v.Create(args[1])
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "created %s (inode %d)\n", args[1], f.Ino())
		return nil
	})
}

// stdin is what write copies into the file (tests replace it).
var stdin io.Reader = os.Stdin

func cmdWrite(args []string, w io.Writer) error {
	fs := newFlags("write")
	offset := fs.Int64("offset", 0, "byte offset")
	direct := fs.Bool("direct", false, "direct I/O (the offset must be aligned)")
	if err := fs.Parse(reorder(args)); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() != 2 {
		return errUsage
	}
	if *offset < 0 {
		return fmt.Errorf("%w: negative offset %d", errUsage, *offset)
	}
	return withWritable(fs.Arg(0), func(v *ext4io.Volume) error {
		name := fs.Arg(1)
		f, err := v.OpenFile(name, os.O_RDWR, 0)
		if errors.Is(err, ext4io.ErrNotFound) {
			f, err = v.Create(name)
		}
		if err != nil {
			return err
		}
		defer f.Close()
		if !*direct {
			n, err := io.Copy(io.NewOffsetWriter(f, *offset), stdin)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "wrote %d bytes at %d\n", n, *offset)
			return nil
		}
		d, err := v.OpenFile(name, os.O_RDWR|ext4io.O_DIRECT, 0)
		if err != nil {
			return err
		}
		defer d.Close()
		n, tail, err := copyDirect(d, v.BlockSize(), *offset, stdin)
		if err != nil {
			return err
		}
		// The last partial block cannot go direct (as with O_DIRECT): it
		// goes through the page cache, written back at Close.
		if len(tail) > 0 {
			if _, err := f.WriteAt(tail, *offset+n); err != nil {
				return err
			}
		}
		fmt.Fprintf(w, "wrote %d bytes at %d (%d direct, %d buffered)\n", n+int64(len(tail)), *offset, n, len(tail))
		return nil
	})
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
	mode := fs.String("mode", "allocate", "allocate|keep-size|punch-hole|zero-range|write-zeroes|collapse-range|insert-range")
	if err := fs.Parse(reorder(args)); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() != 4 {
		return errUsage
	}
	m, err := ext4io.ParseFallocMode(*mode)
	if err != nil {
		return err
	}
	off, err1 := parseSize0(fs.Arg(2))
	length, err2 := parseSize0(fs.Arg(3))
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	return withWritable(fs.Arg(0), func(v *ext4io.Volume) error {
		f, err := v.OpenFile(fs.Arg(1), os.O_RDWR, 0)
		if err != nil {
			return err
		}
		return f.Fallocate(m, off, length)
	})
}

func cmdTruncate(args []string, w io.Writer) error {
	if len(args) != 3 {
		return errUsage
	}
	size, err := parseSize0(args[2])
	if err != nil {
		return err
	}
	return withWritable(args[0], func(v *ext4io.Volume) error {
		f, err := v.OpenFile(args[1], os.O_RDWR, 0)
		if err != nil {
			return err
		}
		return f.Truncate(size)
	})
}

// parseSize0 is parseSize that also accepts 0.
func parseSize0(s string) (int64, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n == 0 {
		return 0, nil
	}
	return parseSize(s)
}

// reorder moves flags after positional arguments to the front, so that
// "IMAGE PATH --offset 5" works as well as "--offset 5 IMAGE PATH".
func reorder(args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if len(a) > 1 && a[0] == '-' {
			flags = append(flags, a)
			if !containsEq(a) && i+1 < len(args) && !isBoolFlag(a) {
				flags = append(flags, args[i+1])
				i++
			}
			continue
		}
		pos = append(pos, a)
	}
	return append(flags, pos...)
}

func containsEq(s string) bool {
	for _, c := range s {
		if c == '=' {
			return true
		}
	}
	return false
}

func isBoolFlag(s string) bool { return s == "--direct" || s == "-direct" }
