package fusefs_test

import (
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/ext4io/ext4io/fusefs"
)

// TestAdv23MountFileTooLarge: a truncate or fallocate past the largest
// file size fails with EFBIG, as on a Linux ext4 mount, not EINVAL.
func TestAdv23MountFileTooLarge(t *testing.T) {
	needFUSE(t)
	m := mount(t, newImage(t, 16<<20), fusefs.Options{})
	lim := int64(1<<32-1) * int64(m.v.BlockSize())
	f, err := os.Create(m.path("f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(lim + 1); !errors.Is(err, syscall.EFBIG) {
		t.Errorf("truncate past the limit: %v, want EFBIG", err)
	}
	if err := syscall.Fallocate(int(f.Fd()), 0, lim-1, 2); !errors.Is(err, syscall.EFBIG) {
		t.Errorf("fallocate across the limit: %v, want EFBIG", err)
	}
	if err := f.Truncate(lim); err != nil {
		t.Errorf("truncate to the limit: %v", err)
	}
}
