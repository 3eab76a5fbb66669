package ext4io_test

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"syscall"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/ext4io/ext4io/iomap"
)

// TestBadArguments: negative, overflowing and empty arguments to File's
// and Volume's methods give an error (ErrInvalid, or io's and fs's own
// where os.File gives them), never a panic, and change nothing: e2fsck
// is clean after.
func TestBadArguments(t *testing.T) {
	img, v, f := openWritableWithFile(t)
	require := func(name string, err error, ok ...error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: no error", name)
			return
		}
		for _, o := range append(ok, ext4io.ErrInvalid, fs.ErrInvalid) {
			if errors.Is(err, o) {
				return
			}
		}
		t.Errorf("%s: %v, want ErrInvalid", name, err)
	}
	d, err := v.OpenFile("f", os.O_RDWR|ext4io.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	calls := []struct {
		name string
		call func() error
		ok   []error
	}{
		{"ReadAt -1", func() error { _, err := f.ReadAt(make([]byte, 8), -1); return err }, nil},
		{"WriteAt -1", func() error { _, err := f.WriteAt(make([]byte, 8), -1); return err }, nil},
		{"WriteAt MaxInt64", func() error { _, err := f.WriteAt(make([]byte, 8), math.MaxInt64-4); return err }, []error{syscall.EFBIG}},
		{"Truncate -1", func() error { return f.Truncate(-1) }, nil},
		{"Truncate MaxInt64", func() error { return f.Truncate(math.MaxInt64) }, []error{syscall.EFBIG}},
		{"Fallocate -1", func() error { return f.Fallocate(ext4io.FallocAllocate, -1, 4096) }, nil},
		{"Fallocate len 0", func() error { return f.Fallocate(ext4io.FallocAllocate, 0, 0) }, nil},
		{"Fallocate len -1", func() error { return f.Fallocate(ext4io.FallocAllocate, 0, -1) }, nil},
		{"Fallocate overflow", func() error { return f.Fallocate(ext4io.FallocAllocate, math.MaxInt64-10, 4096) }, []error{syscall.EFBIG}},
		{"Fallocate mode 99", func() error { return f.Fallocate(ext4io.FallocMode(99), 0, 4096) }, []error{ext4io.ErrUnsupported}},
		{"Seek -1", func() error { _, err := f.Seek(-1, 0); return err }, nil},
		{"Seek whence 9", func() error { _, err := f.Seek(0, 9); return err }, nil},
		{"SeekData -1", func() error { _, err := f.SeekData(-1); return err }, []error{syscall.ENXIO}}, // as iomap_seek_data
		{"WriteAtomic -1", func() error { _, err := d.WriteAtomic(make([]byte, 4096), -4096); return err }, nil},
		{"WriteAtomic unaligned", func() error { _, err := d.WriteAtomic(make([]byte, 100), 7); return err }, nil},
		{"WriteAtomic overflow", func() error { _, err := d.WriteAtomic(make([]byte, 4096), math.MaxInt64-4095); return err }, []error{syscall.EFBIG}},
		{"WriteAtomicBatch overlap", func() error {
			_, err := d.WriteAtomicBatch([]ext4io.AtomicWrite{{Off: 0, Data: make([]byte, 8192)}, {Off: 4096, Data: make([]byte, 4096)}})
			return err
		}, nil},
		{"WriteAtomicBatch negative", func() error {
			_, err := d.WriteAtomicBatch([]ext4io.AtomicWrite{{Off: -4096, Data: make([]byte, 4096)}})
			return err
		}, nil},
		{"LockIO -1", func() error { return lockErr(d.LockIO(ext4io.IomapNormal, -1, 4096)) }, nil},
		{"LockIO kind 9", func() error { return lockErr(d.LockIO(ext4io.IomapKind(9), 0, 4096)) }, nil},
		{"Fiemap -1", func() error { return f.Fiemap(-1, 4096, func(iomap.Extent) error { return nil }) }, nil},
		{"ReportOps -1", func() error { _, err := f.ReportOps().Begin(-4096, 4096, iomap.Report); return err }, nil},
		{"NormalOps -1", func() error { _, err := d.NormalOps().Begin(-4096, 4096, iomap.Direct|iomap.Write); return err }, nil},
		{"Trim -1", func() error { _, err := v.Trim(-1, 1<<20, 0); return err }, nil},
		{"Truncate name -1", func() error { return v.Truncate("f", -1) }, nil},
		{"Setxattr empty", func() error { return f.Setxattr("", []byte("x"), 0) }, []error{syscall.ERANGE}}, // as setxattr(2)
		{"Setxattr flags 99", func() error { return f.Setxattr("user.a", []byte("x"), 99) }, nil},
		{"Rename2 flags 99", func() error { return v.Rename2("f", "g", 99) }, nil},
		{"Mknod bad type", func() error { return v.Mknod("n", fs.ModeSymlink|0o644, 0) }, nil},
	}
	for _, c := range calls {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: panic %v", c.name, r)
				}
			}()
			require(c.name, c.call(), c.ok...)
		}()
	}
	_ = d.Close()
	_ = f.Close()
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	e2fs.Fsck(t, img)
}

// lockErr unlocks a lock LockIO should not have granted.
func lockErr(l *ext4io.IOLock, err error) error {
	if err == nil {
		l.Unlock(0, 0, nil)
	}
	return err
}
