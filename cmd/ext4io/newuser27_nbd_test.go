package main

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestMkfsNBD: mkfs formats SIZE bytes of an NBD export, as it formats an
// image file, so that the export docs/nbd.md serves can be formatted from
// the command line. It tried to create a file named after the URI:
// "blockdev: create nbd+unix:///?socket=...: no such file or directory".
// An export that holds ext4 is refused without -F, and a SIZE larger than
// the export is refused with one line.
func TestMkfsNBD(t *testing.T) {
	img := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	uri := serveNBD(t, "file", img)
	if out, errOut, code := runCmd(t, "mkfs", uri, "128M"); code != 1 || out != "" ||
		errOut != "ext4io mkfs: "+uri+": SIZE 134217728 is larger than the export's 67108864 bytes: invalid argument\n" {
		t.Errorf("mkfs of more than the export: exit %d, %q %q", code, out, errOut)
	}
	if out, errOut, code := runCmd(t, "mkfs", "-L", "over-nbd", uri, "32M"); code != 0 || out != "formatted "+uri+": 33554432 bytes, 4096-byte blocks\n" {
		t.Fatalf("mkfs: exit %d, %q %q", code, out, errOut)
	}
	if _, errOut, code := runCmd(t, "mkfs", uri, "32M"); code != 1 || !strings.Contains(errOut, `already contains an ext4 file system (label "over-nbd"`) || !strings.Contains(errOut, "use -F to overwrite") {
		t.Errorf("mkfs over ext4 without -F: exit %d, %q", code, errOut)
	}
	old := stdin
	stdin = bytes.NewReader([]byte("over nbd\n"))
	defer func() { stdin = old }()
	if _, errOut, code := runCmd(t, "write", uri, "f"); code != 0 {
		t.Fatalf("write: exit %d: %s", code, errOut)
	}
	if out, errOut, code := runCmd(t, "info", uri); code != 0 || !strings.Contains(out, "over-nbd") || !strings.Contains(out, "Block count:      8192\n") {
		t.Errorf("info: exit %d, %q %s", code, out, errOut)
	}
	// The file behind the export holds the 32 MiB file system.
	e2fs.Fsck(t, img)
	if fi, err := os.Stat(img); err != nil || fi.Size() != 64<<20 {
		t.Errorf("the export's file: %v, %v", fi, err)
	}
}

// serveNBD serves an nbdkit plugin on a Unix socket for the rest of the
// test and returns its URI; it skips the test without nbdkit.
func serveNBD(t *testing.T, plugin ...string) string {
	t.Helper()
	bin, err := exec.LookPath("nbdkit")
	if err != nil {
		t.Skip("nbdkit not installed (apt-get install nbdkit)")
	}
	sockDir, err := os.MkdirTemp("", "nbd") // socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "s")
	srv := exec.Command(bin, append([]string{"-f", "--exit-with-parent", "-U", sock}, plugin...)...)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	// nbdkit creates the socket at bind and listens only after.
	for i := 0; ; i++ {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			break
		}
		if i == 200 {
			t.Fatal("nbdkit did not listen on its socket in 10 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "nbd+unix:///?socket=" + sock
}
