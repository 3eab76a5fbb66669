package blockdev

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/ext4io/ext4io/blockdev/internal/devutil"
)

// File is a Device on a regular file or a block device, using pread and
// pwrite through the page cache. It is safe for concurrent use.
//
// On a regular file, ZeroOut uses fallocate(ZERO_RANGE), falling back to
// punching a hole and then to writing zeroes, and Discard punches a hole:
// discarded ranges read as zeroes. On a block device, ZeroOut uses BLKZEROOUT
// and Discard BLKDISCARD on the logical blocks the range covers entirely;
// after Discard a block device may read old contents or zeroes.
type File struct {
	fileCore
}

var _ Device = (*File)(nil)

// OpenFile opens a regular file or block device as a Device. The size is
// fixed at open: fstat for files, BLKGETSIZE64 for block devices.
func OpenFile(path string, readOnly bool) (*File, error) {
	f, err := openOS(path, readOnly, 0)
	if err != nil {
		return nil, err
	}
	d := &File{}
	if err := d.init(f, path, readOnly); err != nil {
		f.Close()
		return nil, err
	}
	return d, nil
}

// CreateFile creates path as a sparse image file of size bytes, or grows an
// existing smaller file to size, and opens it read-write. An existing file
// larger than size is refused with ErrInvalid rather than truncated.
func CreateFile(path string, size int64) (*File, error) {
	if size < 0 {
		return nil, fmt.Errorf("blockdev: create %s: negative size %d: %w", path, size, ErrInvalid)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, hostErr("create", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("blockdev: create %s: %w: %w", path, ErrIO, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("blockdev: create %s: not a regular file: %w", path, ErrInvalid)
	}
	if st.Size() > size {
		return nil, fmt.Errorf("blockdev: create %s: existing file has %d bytes, more than %d: %w", path, st.Size(), size, ErrInvalid)
	}
	if st.Size() < size {
		if err := f.Truncate(size); err != nil {
			return nil, fmt.Errorf("blockdev: create %s: truncate to %d: %w: %w", path, size, ErrIO, err)
		}
	}
	return OpenFile(path, false)
}

func openOS(path string, readOnly bool, extra int) (*os.File, error) {
	flag := os.O_RDWR
	if readOnly {
		flag = os.O_RDONLY
	}
	f, err := os.OpenFile(path, flag|extra|exclFlag(path, readOnly)|openNonblock, 0)
	if err != nil {
		if berr := busyErr(path, err); berr != nil {
			return nil, berr
		}
		return nil, hostErr("open", path, err)
	}
	return f, nil
}

// hostErr wraps the error of opening or creating path on the host. The
// host's answers about the name itself (missing, not a directory, too long,
// a symlink loop) or its permissions wrap only the cause, so errors.Is with
// fs.ErrNotExist or fs.ErrPermission holds; anything else wraps ErrIO too.
func hostErr(op, path string, err error) error {
	// The message names path once: keep the cause, not the PathError
	// that repeats "open path".
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	if errors.Is(err, syscall.EISDIR) {
		// A writable open of a directory: a wrong path, not an I/O error,
		// said as a read-only open's check of the file type says it.
		return fmt.Errorf("blockdev: %s %s: a directory, neither a regular file nor a block device: %w", op, path, ErrInvalid)
	}
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrExist) ||
		errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ENAMETOOLONG) || errors.Is(err, syscall.ELOOP) {
		return fmt.Errorf("blockdev: %s %s: %w", op, path, err)
	}
	return fmt.Errorf("blockdev: %s %s: %w: %w", op, path, ErrIO, err)
}

// init reads the size and logical block size of an open file.
func (c *fileCore) init(f *os.File, path string, readOnly bool) error {
	c.label = "blockdev: " + path
	c.f, c.path, c.ro, c.lbs = f, path, readOnly, 512
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("blockdev: stat %s: %w: %w", path, ErrIO, err)
	}
	switch m := st.Mode(); {
	case m.IsRegular():
		c.size = st.Size()
	case m&os.ModeDevice != 0 && m&os.ModeCharDevice == 0:
		c.blk = true
		c.size, c.lbs, err = blockDeviceGeometry(f)
		if err != nil {
			return fmt.Errorf("blockdev: %s: block device geometry: %w: %w", path, ErrIO, err)
		}
		if c.lbs <= 0 || c.lbs&(c.lbs-1) != 0 {
			return fmt.Errorf("blockdev: %s: logical block size %d is not a power of two: %w", path, c.lbs, ErrInvalid)
		}
	default:
		what := fmt.Sprintf("of type %v", m.Type())
		switch {
		case m.IsDir():
			what = "a directory"
		case m&os.ModeNamedPipe != 0:
			what = "a named pipe"
		case m&os.ModeSocket != 0:
			what = "a socket"
		case m&os.ModeCharDevice != 0:
			what = "a character device"
		}
		return fmt.Errorf("blockdev: open %s: %s, neither a regular file nor a block device: %w", path, what, ErrInvalid)
	}
	return nil
}

// ReadAt implements io.ReaderAt.
func (d *File) ReadAt(p []byte, off int64) (int, error) {
	if d.closed.Load() {
		return 0, devutil.Closed("blockdev", d.path)
	}
	n, tail := devutil.ClipRead(d.name(), off, len(p), d.size)
	if n == 0 {
		return 0, tail
	}
	got, err := d.f.ReadAt(p[:n], off)
	if err == io.EOF {
		return got, io.EOF // the file shrank underneath us
	}
	if err != nil {
		return got, d.ioErr("pread", off+int64(got), err)
	}
	return got, tail
}

// WriteAt implements io.WriterAt.
func (d *File) WriteAt(p []byte, off int64) (int, error) {
	if err := d.checkWrite("write", off, int64(len(p))); err != nil {
		return 0, err
	}
	n, err := d.f.WriteAt(p, off)
	if err != nil {
		return n, d.ioErr("pwrite", off+int64(n), err)
	}
	return n, nil
}

// Flush calls fdatasync.
func (d *File) Flush() error { return d.flush() }

var _ SyncWriter = (*File)(nil)

// WriteAtSync implements SyncWriter with pwritev2(RWF_DSYNC): the kernel
// writes p back from the page cache and flushes the device's cache. On
// kernels that refuse the flag, and outside Linux, it is WriteAt and
// Flush.
func (d *File) WriteAtSync(p []byte, off int64) (int, error) {
	return d.writeSync(p, off, d.WriteAt)
}

// ZeroOut makes [off, off+n) read as zeroes.
func (d *File) ZeroOut(off, n int64) error {
	if err := d.checkWrite("zero out", off, n); err != nil || n == 0 {
		return err
	}
	return d.zeroOut(off, n, d.f.WriteAt)
}

// Discard releases [off, off+n): a hole in a regular file (reads zeroes), a
// BLKDISCARD on a block device (reads zeroes or old data).
func (d *File) Discard(off, n int64) error {
	if err := d.checkWrite("discard", off, n); err != nil || n == 0 {
		return err
	}
	return d.discard(off, n, d.f.WriteAt)
}

// Close closes the file. A second Close returns ErrClosed.
func (d *File) Close() error { return d.close() }
