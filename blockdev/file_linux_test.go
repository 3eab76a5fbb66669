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
	blockdevtest.Run(t, func(t *testing.T, size int64) blockdev.Device {
		f, err := blockdev.OpenFile(loopDevice(t, size), false)
		if err != nil {
			t.Fatal(err)
		}
		return f
	})
}

// TestDirectConformanceLoop runs the suite with O_DIRECT on a loop device.
func TestDirectConformanceLoop(t *testing.T) {
	blockdevtest.Run(t, func(t *testing.T, size int64) blockdev.Device {
		d, err := blockdev.OpenDirect(loopDevice(t, size), false)
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}

// loopDevice attaches a zeroed image of size bytes to a free loop device,
// detaching it at cleanup, or skips.
func loopDevice(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loop devices need root")
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("losetup not found")
	}
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
	return dev
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
