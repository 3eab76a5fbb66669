//go:build linux || freebsd

package main

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// allocatedBytes returns the bytes the host file system allocated to path.
func allocatedBytes(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

var trimmedRe = regexp.MustCompile(`^(.*): [0-9.]+ [KMGTPE]?i?B \(([0-9]+) bytes\) trimmed\n$`)

// fstrimV runs ext4io fstrim -v on image and returns the bytes it reports.
func fstrimV(t *testing.T, image string) int64 {
	t.Helper()
	out, errOut, code := runCmd(t, "fstrim", "-v", image)
	m := trimmedRe.FindStringSubmatch(out)
	if code != 0 || m == nil || m[1] != image {
		t.Fatalf("fstrim -v %s: exit %d: %q %s", image, code, out, errOut)
	}
	n, _ := strconv.ParseInt(m[2], 10, 64)
	return n
}

// TestFstrimFile: fstrim -v on an image file after rm punches the freed
// blocks out of the file and says how many bytes it discarded, as
// fstrim -v does.
func TestFstrimFile(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "img")
	e2fs.Mkfs(t, img, "64M")
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, bytes.Repeat([]byte("fstrim! "), 3<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	testTrimRm(t, img, img, src)
	e2fs.Fsck(t, img)
}

// testTrimRm puts src (24 MiB) on image, removes it and runs fstrim:
// file (the image file behind image, which may be an NBD URI) must shrink
// by about src's size.
func testTrimRm(t *testing.T, image, file, src string) {
	t.Helper()
	if _, errOut, code := runCmd(t, "put", image, src, "big"); code != 0 {
		t.Fatalf("put: exit %d: %s", code, errOut)
	}
	fstrimV(t, image) // from here on, only the file's blocks are allocated
	before := allocatedBytes(t, file)
	if _, errOut, code := runCmd(t, "rm", image, "big"); code != 0 {
		t.Fatalf("rm: exit %d: %s", code, errOut)
	}
	n := fstrimV(t, image)
	after := allocatedBytes(t, file)
	t.Logf("%s: %d bytes allocated with the file, %d after rm + fstrim (%d bytes trimmed)", file, before, after, n)
	const big = 24 << 20
	if n < big {
		t.Errorf("fstrim reports %d bytes after removing %d", n, big)
	}
	if after > before-big*9/10 {
		t.Errorf("%s: %d bytes allocated after rm + fstrim; %d before", file, after, before)
	}
}

// TestFstrimNBD serves an image with nbdkit's file plugin and with
// qemu-nbd (--discard=unmap) and shows the image file shrinking: after
// rm + fstrim through the NBD URI, and with online discard
// (Options.Discard) after an unlink alone.
func TestFstrimNBD(t *testing.T) {
	for _, srv := range []struct {
		bin  string
		args func(sock, img string) []string
	}{
		{"nbdkit", func(sock, img string) []string {
			return []string{"-f", "--exit-with-parent", "-U", sock, "file", img}
		}},
		{"qemu-nbd", func(sock, img string) []string {
			return []string{"-k", sock, "-f", "raw", "-t", "--discard=unmap", img}
		}},
	} {
		t.Run(srv.bin, func(t *testing.T) {
			bin, err := exec.LookPath(srv.bin)
			if err != nil {
				t.Skipf("%s not installed", srv.bin)
			}
			dir := t.TempDir()
			img := filepath.Join(dir, "img")
			e2fs.Mkfs(t, img, "64M")
			src := filepath.Join(dir, "src")
			if err := os.WriteFile(src, bytes.Repeat([]byte("over nbd"), 3<<20), 0o644); err != nil {
				t.Fatal(err)
			}
			sockDir, err := os.MkdirTemp("", "nbd") // socket paths are limited to 108 bytes
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(sockDir)
			sock := filepath.Join(sockDir, "s")
			cmd := exec.Command(bin, srv.args(sock, img)...)
			var log bytes.Buffer
			cmd.Stderr = &log
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				cmd.Process.Kill()
				cmd.Wait()
				if t.Failed() {
					t.Logf("%s stderr:\n%s", srv.bin, log.String())
				}
			}()
			for i := 0; ; i++ {
				if c, err := net.Dial("unix", sock); err == nil {
					c.Close()
					break
				}
				if i == 200 {
					t.Fatalf("%s did not listen on %s in 10 s", srv.bin, sock)
				}
				time.Sleep(50 * time.Millisecond)
			}
			uri := "nbd+unix:///?socket=" + sock
			testTrimRm(t, uri, img, src)

			// Online discard: the unlink alone gives the blocks back.
			data, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			v, err := ext4io.OpenImage(uri, ext4io.Options{Writable: true, Discard: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := v.WriteFile("big2", data, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := v.Sync(); err != nil {
				t.Fatal(err)
			}
			before := allocatedBytes(t, img)
			if err := v.Unlink("big2"); err != nil {
				t.Fatal(err)
			}
			if err := v.Sync(); err != nil {
				t.Fatal(err)
			}
			after := allocatedBytes(t, img)
			st := v.DiscardStats()
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			t.Logf("online discard: %d bytes allocated with the file, %d after unlink + sync; %+v", before, after, st)
			if after > before-int64(len(data))*9/10 || st.Failures != 0 {
				t.Errorf("online discard over %s: %d bytes allocated after unlink; %d before; %+v", srv.bin, after, before, st)
			}
			cmd.Process.Kill()
			cmd.Wait()
			e2fs.Fsck(t, img)
		})
	}
}

// TestHumanBytes: fstrim -v's sizes, as util-linux prints them.
func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 512: "512 B", 1024: "1 KiB", 1536: "1.5 KiB",
		57367552: "54.7 MiB", 1 << 30: "1 GiB", 3 << 40: "3 TiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q; want %q", n, got, want)
		}
	}
}
