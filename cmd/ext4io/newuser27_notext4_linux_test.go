package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestNotExt4Everywhere: a device without ext4 gets the one line "IMAGE:
// not an ext4 file system (bad magic)" from mount and from an NBD URI too,
// as from an image file. Both said "no ext4 file system on the device:
// ext4: corrupt superblock: bad magic 0x0000 (want 0xef53): ext4: not an
// ext4 file system".
func TestNotExt4Everywhere(t *testing.T) {
	tmp := t.TempDir()
	zero := filepath.Join(tmp, "zero.img")
	if err := os.WriteFile(zero, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tmp, "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if errOut, code := mountChild(t, zero, dir); code != 1 || errOut != "ext4io mount: "+zero+": not an ext4 file system (bad magic)\n" {
		t.Errorf("mount of zeroes: exit %d, %q", code, errOut)
	}

	uri := serveNBD(t, "memory", "16M")
	for _, cmd := range []string{"ls", "info", "fstrim"} {
		if _, errOut, code := runCmd(t, cmd, uri); code != 1 || errOut != "ext4io "+cmd+": "+uri+": not an ext4 file system (bad magic)\n" {
			t.Errorf("%s of an empty NBD export: exit %d, %q", cmd, code, errOut)
		}
	}
}
