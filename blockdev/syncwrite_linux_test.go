package blockdev_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/blockdevtest"
	"golang.org/x/sys/unix"
)

// spyPwritev2 counts pwritev2 calls with RWF_DSYNC and answers them with
// errno when it is non-zero, else with the real system call.
func spyPwritev2(t *testing.T, errno syscall.Errno) *atomic.Int64 {
	var calls atomic.Int64
	t.Cleanup(blockdev.SetPwritev2(func(fd int, iovs [][]byte, off int64, flags int) (int, error) {
		if flags&unix.RWF_DSYNC == 0 {
			t.Errorf("pwritev2 flags %#x without RWF_DSYNC", flags)
		}
		calls.Add(1)
		if errno != 0 {
			return 0, errno
		}
		return unix.Pwritev2(fd, iovs, off, flags)
	}))
	return &calls
}

func syncWriteDevices(t *testing.T) map[string]blockdev.Device {
	devs := map[string]blockdev.Device{}
	f, err := blockdev.CreateFile(filepath.Join(t.TempDir(), "img"), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	devs["file"] = f
	path := filepath.Join(directDir(t), "img")
	g, err := blockdev.CreateFile(path, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	d, err := blockdev.OpenDirect(path, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	devs["direct"] = d
	return devs
}

// TestWriteAtSyncDsync: File and Direct write with one pwritev2(RWF_DSYNC)
// per WriteAtSync, and the bytes are there.
func TestWriteAtSyncDsync(t *testing.T) {
	for name, dev := range syncWriteDevices(t) {
		t.Run(name, func(t *testing.T) {
			calls := spyPwritev2(t, 0)
			p := blockdevtest.Pattern(7, 0, 8192)
			buf := make([]byte, 8192)
			copy(buf, p) // a fresh heap buffer of 8 KiB is page-aligned
			if n, err := dev.(blockdev.SyncWriter).WriteAtSync(buf, 8192); n != len(buf) || err != nil {
				t.Fatalf("WriteAtSync = %d, %v", n, err)
			}
			if n, err := blockdev.WriteAtSync(dev, buf, 16384); n != len(buf) || err != nil {
				t.Fatalf("blockdev.WriteAtSync = %d, %v", n, err)
			}
			if got := calls.Load(); got != 2 {
				t.Fatalf("%d pwritev2(RWF_DSYNC) calls, want 2", got)
			}
			got := make([]byte, 8192)
			for _, off := range []int64{8192, 16384} {
				if _, err := dev.ReadAt(got, off); err != nil || !bytes.Equal(got, p) {
					t.Fatalf("read at %d: %v, equal %v", off, err, bytes.Equal(got, p))
				}
			}
		})
	}
}

// TestWriteAtSyncRefused: a kernel refusing RWF_DSYNC (EOPNOTSUPP,
// ENOSYS, EINVAL) gets a plain write and a flush, and is not asked again.
func TestWriteAtSyncRefused(t *testing.T) {
	for _, errno := range []syscall.Errno{unix.EOPNOTSUPP, unix.ENOSYS, unix.EINVAL} {
		for name, dev := range syncWriteDevices(t) {
			t.Run(name+"/"+errno.Error(), func(t *testing.T) {
				calls := spyPwritev2(t, errno)
				buf := make([]byte, 4096)
				copy(buf, blockdevtest.Pattern(3, 0, 4096))
				for i := range 3 {
					if n, err := blockdev.WriteAtSync(dev, buf, int64(i)*4096); n != len(buf) || err != nil {
						t.Fatalf("WriteAtSync = %d, %v", n, err)
					}
				}
				if got := calls.Load(); got != 1 {
					t.Fatalf("%d pwritev2 calls, want 1 (the refusal remembered)", got)
				}
				got := make([]byte, 4096)
				if _, err := dev.ReadAt(got, 8192); err != nil || !bytes.Equal(got, buf) {
					t.Fatalf("read back: %v, equal %v", err, bytes.Equal(got, buf))
				}
			})
		}
	}
}

// TestWriteAtSyncErrors: a real error is reported wrapping ErrIO, and the
// usual checks come first.
func TestWriteAtSyncErrors(t *testing.T) {
	devs := syncWriteDevices(t)
	f := devs["file"].(*blockdev.File)
	spyPwritev2(t, unix.EIO)
	if _, err := f.WriteAtSync(make([]byte, 4096), 0); !errors.Is(err, blockdev.ErrIO) || !errors.Is(err, unix.EIO) {
		t.Fatalf("WriteAtSync with EIO = %v, want ErrIO wrapping EIO", err)
	}
	if _, err := f.WriteAtSync(make([]byte, 4096), 1<<20-100); !errors.Is(err, blockdev.ErrInvalid) {
		t.Fatalf("WriteAtSync past the end = %v, want ErrInvalid", err)
	}
	f.Close()
	if _, err := f.WriteAtSync(make([]byte, 4096), 0); !errors.Is(err, blockdev.ErrClosed) {
		t.Fatalf("WriteAtSync after Close = %v, want ErrClosed", err)
	}
}
