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

// TestNBDURIs runs the image commands on an NBD URI: nbdkit's file plugin
// serves an mkfs.ext4 image over a Unix socket; write, ls, cat and mkdir
// go through the URI, and e2fsck checks the file behind it.
func TestNBDURIs(t *testing.T) {
	bin, err := exec.LookPath("nbdkit")
	if err != nil {
		t.Skip("nbdkit not installed (apt-get install nbdkit)")
	}
	img := filepath.Join(t.TempDir(), "img")
	e2fs.Mkfs(t, img, "16M", "-b", "1024")
	sockDir, err := os.MkdirTemp("", "nbd") // socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	sock := filepath.Join(sockDir, "s")
	srv := exec.Command(bin, "-f", "--exit-with-parent", "-U", sock, "file", img)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	// Wait until the socket accepts connections: nbdkit creates the
	// file at bind and listens only after, and a connection between the
	// two is refused.
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
	uri := "nbd+unix:///?socket=" + sock

	old := stdin
	stdin = bytes.NewReader([]byte("over nbd\n"))
	defer func() { stdin = old }()
	for _, args := range [][]string{{"mkdir", uri, "d"}, {"write", uri, "d/f"}} {
		if _, errOut, code := runCmd(t, args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
	}
	if out, errOut, code := runCmd(t, "cat", uri, "d/f"); code != 0 || out != "over nbd\n" {
		t.Fatalf("cat: exit %d: %q %s", code, out, errOut)
	}
	if out, _, code := runCmd(t, "ls", uri, "d"); code != 0 || !strings.Contains(out, "f") {
		t.Fatalf("ls: exit %d: %q", code, out)
	}
	e2fs.Fsck(t, img)
}
