package blockdev_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ext4io/ext4io/blockdev"
)

// TestInvalidateLoop: a loop device's page cache does not see writes to
// its backing file (as a shared disk's does not see another host's);
// after Invalidate the next read does.
func TestInvalidateLoop(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loop devices need root")
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("losetup not found")
	}
	img := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Skipf("cannot attach a loop device: %v: %s", err, out)
	}
	loop := strings.TrimSpace(string(out))
	defer exec.Command("losetup", "--detach", loop).Run()

	dev, err := blockdev.OpenFile(loop, true)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	const off = 8192 + 1024 // a 1 KiB block inside a page: the whole page must go
	buf := make([]byte, 1024)
	if _, err := dev.ReadAt(buf, off); err != nil { // now cached
		t.Fatal(err)
	}
	fresh := bytes.Repeat([]byte{0xA5}, 1024)
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(fresh, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := dev.ReadAt(buf, off); err != nil {
		t.Fatal(err)
	}
	t.Logf("before Invalidate the loop device reads the new bytes: %v", bytes.Equal(buf, fresh))
	if err := dev.Invalidate(off, 1024); err != nil {
		t.Fatal(err)
	}
	if _, err := dev.ReadAt(buf, off); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, fresh) {
		t.Fatal("after Invalidate the loop device still reads its cached block")
	}
	dev.Close()
	if err := dev.Invalidate(0, 4096); !errors.Is(err, blockdev.ErrClosed) {
		t.Fatalf("Invalidate after Close: %v", err)
	}
}
