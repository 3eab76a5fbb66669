package blockdev_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/blockdevtest"
)

func TestFileConformance(t *testing.T) {
	blockdevtest.Run(t, func(t *testing.T, size int64) blockdev.Device {
		f, err := blockdev.CreateFile(filepath.Join(t.TempDir(), "img"), size)
		if err != nil {
			t.Fatal(err)
		}
		return f
	})
}

// TestFileConformanceTmpfs runs on tmpfs, which refuses ZERO_RANGE, so
// ZeroOut takes the punch-hole fallback.
func TestFileConformanceTmpfs(t *testing.T) {
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skip("no /dev/shm")
	}
	blockdevtest.Run(t, func(t *testing.T, size int64) blockdev.Device {
		dir, err := os.MkdirTemp("/dev/shm", "blockdevtest")
		if err != nil {
			t.Skip(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		f, err := blockdev.CreateFile(filepath.Join(dir, "img"), size)
		if err != nil {
			t.Fatal(err)
		}
		return f
	})
}

func TestFileConformanceWriteZeroes(t *testing.T) {
	blockdevtest.Run(t, func(t *testing.T, size int64) blockdev.Device {
		f, err := blockdev.CreateFile(filepath.Join(t.TempDir(), "img"), size)
		if err != nil {
			t.Fatal(err)
		}
		blockdev.ForceWriteZeroes(f)
		return f
	})
}

// TestFileConformanceLoop runs the suite on a loop block device, which
// exercises BLKGETSIZE64, BLKSSZGET, BLKZEROOUT and BLKDISCARD.
func TestFileConformanceLoop(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loop devices need root")
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("losetup not found")
	}
	blockdevtest.Run(t, func(t *testing.T, size int64) blockdev.Device {
		img := filepath.Join(t.TempDir(), "img")
		if err := os.WriteFile(img, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(img, size); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
		if err != nil {
			t.Skipf("cannot attach a loop device: %v: %s", err, out)
		}
		dev := strings.TrimSpace(string(out))
		t.Cleanup(func() {
			if out, err := exec.Command("losetup", "--detach", dev).CombinedOutput(); err != nil {
				t.Errorf("losetup --detach %s: %v: %s", dev, err, out)
			}
		})
		f, err := blockdev.OpenFile(dev, false)
		if err != nil {
			t.Fatal(err)
		}
		return f
	})
}

func TestFileReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "img")
	w, err := blockdev.CreateFile(path, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	p := blockdevtest.Pattern(1, 4096, 4096)
	if _, err := w.WriteAt(p, 4096); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := blockdev.OpenFile(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.WriteAt(p, 0); !errors.Is(err, blockdev.ErrReadOnly) {
		t.Errorf("WriteAt on read-only = %v, want ErrReadOnly", err)
	}
	if err := r.ZeroOut(0, 512); !errors.Is(err, blockdev.ErrReadOnly) {
		t.Errorf("ZeroOut on read-only = %v, want ErrReadOnly", err)
	}
	if err := r.Discard(0, 512); !errors.Is(err, blockdev.ErrReadOnly) {
		t.Errorf("Discard on read-only = %v, want ErrReadOnly", err)
	}
	got := make([]byte, 4096)
	if _, err := r.ReadAt(got, 4096); err != nil || string(got) != string(p) {
		t.Errorf("read-only ReadAt = %v, data equal %v", err, string(got) == string(p))
	}
}

func TestCreateFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "img")
	f, err := blockdev.CreateFile(path, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if f.Size() != 1<<30 || f.LogicalBlockSize() != 512 {
		t.Errorf("Size, LogicalBlockSize = %d, %d", f.Size(), f.LogicalBlockSize())
	}
	f.Close()
	var st os.FileInfo
	if st, err = os.Stat(path); err != nil || st.Size() != 1<<30 {
		t.Fatalf("stat: %v, %v", st, err)
	}
	// Growing is allowed, shrinking is refused.
	if f, err = blockdev.CreateFile(path, 2<<30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := blockdev.CreateFile(path, 1<<20); !errors.Is(err, blockdev.ErrInvalid) {
		t.Errorf("CreateFile smaller = %v, want ErrInvalid", err)
	}
	if _, err := blockdev.CreateFile(path, -1); !errors.Is(err, blockdev.ErrInvalid) {
		t.Errorf("CreateFile negative = %v, want ErrInvalid", err)
	}
	if _, err := blockdev.OpenFile(dir, false); !errors.Is(err, blockdev.ErrInvalid) && !errors.Is(err, blockdev.ErrIO) {
		t.Errorf("OpenFile on a directory = %v", err)
	}
	if _, err := blockdev.OpenFile(filepath.Join(dir, "missing"), false); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenFile on a missing file = %v, want ErrNotExist", err)
	}
}

// TestFileShrunkUnderneath checks a file truncated behind the device's back
// gives a short read with an error, not a hang or silent zeroes.
func TestFileShrunkUnderneath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "img")
	f, err := blockdev.CreateFile(path, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Truncate(path, 4096); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 8192)
	n, err := f.ReadAt(p, 0)
	if n != 4096 || err == nil {
		t.Errorf("ReadAt across a truncation = %d, %v; want 4096 and an error", n, err)
	}
}

// TestFileENOSPC fills a tiny tmpfs through a sparse image and checks the
// OS error reaches the caller wrapping ErrIO and ENOSPC.
func TestFileENOSPC(t *testing.T) {
	dir := mountTinyTmpfs(t)
	f, err := blockdev.CreateFile(filepath.Join(dir, "img"), 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := blockdevtest.Pattern(1, 0, 1<<20)
	var werr error
	for off := int64(0); off < f.Size() && werr == nil; off += int64(len(p)) {
		_, werr = f.WriteAt(p, off)
	}
	if !errors.Is(werr, blockdev.ErrIO) || !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("filling a 256 KiB tmpfs = %v, want ErrIO wrapping ENOSPC", werr)
	}
	if !strings.Contains(werr.Error(), " at ") {
		t.Errorf("error %q does not name the offset", werr)
	}
}

// mountTinyTmpfs mounts a 256 KiB tmpfs on a temporary directory, or skips.
func mountTinyTmpfs(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting tmpfs needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=256k"); err != nil {
		t.Skipf("cannot mount tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

func BenchmarkFileRandom4K(b *testing.B) {
	f, err := blockdev.CreateFile(filepath.Join(b.TempDir(), "img"), 64<<20)
	if err != nil {
		b.Fatal(err)
	}
	blockdevtest.BenchRandom4K(b, f)
}
