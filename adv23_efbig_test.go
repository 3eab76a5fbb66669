package ext4io_test

import (
	"errors"
	"syscall"
	"testing"

	"github.com/ext4io/ext4io"
)

// TestAdv23FileTooLarge: a write, truncate or fallocate past the largest
// file the block size allows fails with EFBIG, as Linux's s_maxbytes
// checks do (matching ErrInvalid still), while a negative offset or size
// stays EINVAL; the file is unchanged.
func TestAdv23FileTooLarge(t *testing.T) {
	_, v, f := openWritableWithFile(t)
	defer v.Close()
	defer f.Close()
	lim := int64(1<<32-1) * int64(v.BlockSize())
	big := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, syscall.EFBIG) || !errors.Is(err, ext4io.ErrInvalid) {
			t.Errorf("%s: %v, want EFBIG matching ErrInvalid", what, err)
		}
	}
	_, err := f.WriteAt([]byte("x"), lim)
	big("write at the limit", err)
	_, err = f.WriteAt([]byte("xy"), lim-1)
	big("write across the limit", err)
	big("truncate past the limit", f.Truncate(lim+1))
	big("fallocate across the limit", f.Fallocate(ext4io.FallocAllocate, lim-1, 2))
	big("punch across the limit", f.Fallocate(ext4io.FallocPunchHole, 0, lim+1))
	bs := int64(v.BlockSize())
	if err := f.Truncate(lim - bs); err != nil {
		t.Fatal(err)
	}
	big("insert-range past the limit", f.Fallocate(ext4io.FallocInsertRange, 0, 2*bs))
	if err := f.Truncate(8192); err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{
		"negative truncate":  f.Truncate(-1),
		"negative fallocate": f.Fallocate(ext4io.FallocAllocate, -1, 2),
	} {
		if !errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EFBIG) {
			t.Errorf("%s: %v, want EINVAL", what, err)
		}
	}
	if _, err := f.WriteAt([]byte("x"), -1); !errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EFBIG) {
		t.Errorf("negative write: %v, want EINVAL", err)
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != 8192 {
		t.Errorf("size %d, %v; want 8192", fi.Size(), err)
	}
}
