package blockdev_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/blockdevtest"
)

// directDir returns a directory on a filesystem that accepts O_DIRECT:
// t.TempDir(), else a temporary directory in the package directory (on
// the real disk when /tmp is tmpfs). It skips the test if neither works.
func directDir(t testing.TB) string {
	t.Helper()
	try := func(dir string) bool {
		path := filepath.Join(dir, "probe")
		f, err := blockdev.CreateFile(path, 64<<10)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		defer os.Remove(path)
		d, err := blockdev.OpenDirect(path, false)
		if err != nil {
			if !errors.Is(err, blockdev.ErrUnsupported) {
				t.Fatalf("OpenDirect: %v (want success or ErrUnsupported)", err)
			}
			return false
		}
		d.Close()
		return true
	}
	if dir := t.TempDir(); try(dir) {
		return dir
	}
	dir, err := os.MkdirTemp(".", ".directtest-")
	if err != nil {
		t.Skipf("O_DIRECT unsupported in the temp dir and cannot make one here: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if !try(dir) {
		t.Skip("O_DIRECT unsupported in the temp dir and the package dir")
	}
	return dir
}

func TestDirectConformance(t *testing.T) {
	blockdevtest.Run(t, func(t *testing.T, size int64) blockdev.Device {
		path := filepath.Join(directDir(t), "img")
		f, err := blockdev.CreateFile(path, size)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		d, err := blockdev.OpenDirect(path, false)
		if err != nil {
			t.Fatal(err)
		}
		mem, off := d.Alignment()
		if mem <= 0 || off <= 0 || off&(off-1) != 0 {
			t.Fatalf("Alignment() = %d, %d", mem, off)
		}
		return d
	})
}

func TestDirectRefusals(t *testing.T) {
	dir := directDir(t)
	path := filepath.Join(dir, "odd")
	if err := os.WriteFile(path, make([]byte, 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := blockdev.OpenDirect(path, false); !errors.Is(err, blockdev.ErrInvalid) {
		t.Errorf("OpenDirect on a 1000-byte file = %v, want ErrInvalid", err)
	}
	// tmpfs either supports O_DIRECT (recent kernels) or is refused cleanly.
	if _, err := os.Stat("/dev/shm"); err == nil {
		shm, err := os.MkdirTemp("/dev/shm", "directtest")
		if err == nil {
			defer os.RemoveAll(shm)
			p := filepath.Join(shm, "img")
			if err := os.WriteFile(p, make([]byte, 8192), 0o644); err != nil {
				t.Fatal(err)
			}
			d, err := blockdev.OpenDirect(p, false)
			if err != nil && !errors.Is(err, blockdev.ErrUnsupported) {
				t.Errorf("OpenDirect on tmpfs = %v, want success or ErrUnsupported", err)
			}
			if err == nil {
				d.Close()
			}
		}
	}
}

func BenchmarkDirectRandom4K(b *testing.B) {
	path := filepath.Join(directDir(b), "img")
	f, err := blockdev.CreateFile(path, 64<<20)
	if err != nil {
		b.Fatal(err)
	}
	f.Close()
	d, err := blockdev.OpenDirect(path, false)
	if err != nil {
		b.Fatal(err)
	}
	blockdevtest.BenchRandom4K(b, d)
}
