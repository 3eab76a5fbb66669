package blockdev

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// OpenDirect opens a regular file or block device with O_DIRECT. The
// alignment comes from statx(STATX_DIOALIGN); on kernels or filesystems
// that do not report it, from BLKSSZGET for block devices, and for files
// by probing reads of growing aligned sizes from 512 bytes up. A file
// system that refuses O_DIRECT gives an error wrapping both ErrUnsupported
// and ErrInvalid (the kernel's EINVAL).
func OpenDirect(path string, readOnly bool) (*Direct, error) {
	f, err := openOS(path, readOnly, syscall.O_DIRECT)
	if err != nil {
		if errors.Is(err, unix.EINVAL) {
			return nil, fmt.Errorf("blockdev: open %s: the filesystem refuses O_DIRECT: %w: %w: %w", path, ErrUnsupported, ErrInvalid, err)
		}
		return nil, err
	}
	d := &Direct{}
	if err := d.init(f, path, readOnly); err != nil {
		f.Close()
		return nil, err
	}
	mem, off, err := dioAlign(f, d.blk, d.lbs, d.size)
	if err == nil {
		err = d.initDirect(mem, off)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("blockdev: open %s: %w", path, err)
	}
	return d, nil
}

func dioAlign(f *os.File, blk bool, lbs int, size int64) (mem, off int, err error) {
	var st unix.Statx_t
	err = control(f, func(fd int) error {
		return unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_DIOALIGN, &st)
	})
	if err == nil && st.Mask&unix.STATX_DIOALIGN != 0 {
		if st.Dio_offset_align == 0 {
			return 0, 0, fmt.Errorf("the filesystem does not support direct I/O on it: %w", ErrUnsupported)
		}
		return int(st.Dio_mem_align), int(st.Dio_offset_align), nil
	}
	if blk {
		return lbs, lbs, nil
	}
	// Probe: the smallest power of two the kernel accepts for an aligned
	// read at offset 0. An empty file accepts anything; 512 is then as
	// good as any answer, since nothing can be read or written.
	for a := 512; a <= 64<<10; a *= 2 {
		if int64(a) > size && size > 0 {
			break
		}
		buf := alignedBuf(a, a)
		_, err := f.ReadAt(buf, 0)
		if err == nil || !errors.Is(err, unix.EINVAL) {
			return a, a, nil
		}
	}
	return 0, 0, fmt.Errorf("no direct I/O alignment up to 64 KiB works: %w", ErrUnsupported)
}
