package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ext4io/ext4io/fusefs/fusetest"
)

// TestMountPointNotDir runs ext4io mount with a mount point that is a
// regular file (the image itself, as a slip of the keyboard gives) or
// that does not exist. Each fails with one line naming the mount point,
// and nothing is left mounted: fusermount3 mounts on a regular file, and
// the server's first open of the mount then failed with the file system
// still mounted over the file, so that every later command on it got
// "transport endpoint is not connected".
func TestMountPointNotDir(t *testing.T) {
	tmp := t.TempDir()
	img := filepath.Join(tmp, "img")
	if _, errs, code := runCmd(t, "mkfs", img, "32M"); code != 0 {
		t.Fatalf("mkfs: exit %d: %s", code, errs)
	}
	file := filepath.Join(tmp, "file")
	if err := os.WriteFile(file, []byte("not a directory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ dir, want string }{
		{img, "mount " + img + ": not a directory"},
		{file, "mount " + file + ": not a directory"},
		{filepath.Join(tmp, "nodir"), "mount " + filepath.Join(tmp, "nodir") + ": no such file or directory"},
	} {
		stderr, code := mountChild(t, img, tc.dir)
		if fusetest.Mounted(tc.dir) {
			t.Errorf("mount on %s: left mounted", tc.dir)
			unmount(t, tc.dir)
		}
		if code != 1 || stderr != "ext4io mount: "+tc.want+"\n" {
			t.Errorf("mount on %s: exit %d, stderr %q; want exit 1 and the line %q", tc.dir, code, stderr, tc.want)
		}
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "not a directory\n" {
		t.Errorf("the file under the mount point reads %q, %v", b, err)
	}
	if out, errs, code := runCmd(t, "ls", img); code != 0 || out != "lost+found\n" {
		t.Errorf("ls after the failed mounts: exit %d, %q %s", code, out, errs)
	}
}

// mountChild runs ext4io mount [OPTS] IMAGE DIR in the test binary as a child
// process (TestMain), as the mount tests do, and returns its standard
// error and exit code once it exits.
func mountChild(t *testing.T, img, dir string, opts ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, os.Args[0], append(append([]string{"mount"}, opts...), img, dir)...)
	cmd.Env = append(os.Environ(), mountChildEnv+"=1")
	cmd.Stderr = &stderr
	ready, readyW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer ready.Close()
	cmd.ExtraFiles = []*os.File{readyW}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	readyW.Close()
	msg, _ := io.ReadAll(ready)
	if string(msg) == mountReady {
		// Mounted after all: unmount, so that the server exits.
		unmount(t, dir)
	}
	err = cmd.Wait()
	if ctx.Err() != nil {
		t.Fatalf("mount on %s did not exit: %s", dir, stderr.String())
	}
	if err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return stderr.String(), cmd.ProcessState.ExitCode()
}

// unmount unmounts dir, lazily if it is busy, so that the test's
// temporary directory can be removed.
func unmount(t *testing.T, dir string) {
	t.Helper()
	for _, c := range [][]string{{"fusermount3", "-u", dir}, {"umount", "-l", dir}} {
		out, err := exec.Command(c[0], c[1:]...).CombinedOutput()
		if err == nil {
			return
		}
		t.Logf("%s: %v: %s", strings.Join(c, " "), err, out)
	}
}

// TestMountFusermountRefuses: when fusermount3 refuses the mount (an
// option it does not know), ext4io mount fails with one line holding
// fusermount3's reason, in the foreground and with --background, whose
// server has its standard error on /dev/null. The foreground printed
// fusermount3's line and then "fusermount exited with code 256 "; the
// background printed only the latter.
func TestMountFusermountRefuses(t *testing.T) {
	needFuseMount(t)
	tmp := t.TempDir()
	img, dir := filepath.Join(tmp, "img"), filepath.Join(tmp, "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, errs, code := runCmd(t, "mkfs", img, "32M"); code != 0 {
		t.Fatalf("mkfs: exit %d: %s", code, errs)
	}
	want := "ext4io mount: mount " + dir + ": fusermount3: unknown option 'bogus'\n"
	stderr, code := mountChild(t, img, dir, "-o", "bogus")
	if code != 1 || stderr != want {
		t.Errorf("mount -o bogus: exit %d, %q; want exit 1 and %q", code, stderr, want)
	}
	_, stderr, code = runCmd(t, "mount", "--background", "-o", "bogus", img, dir)
	if code != 1 || stderr != want {
		t.Errorf("mount --background -o bogus: exit %d, %q; want exit 1 and %q", code, stderr, want)
	}
	if fusetest.Mounted(dir) {
		t.Error("left mounted")
		unmount(t, dir)
	}
}

// TestMountAutoUnmount: -o auto_unmount is refused with one line before
// anything is mounted. go-fuse waits for fusermount3 to exit, which with
// auto_unmount stays running: the command hung with the mount made and
// never served, and every access to it (ls DIR) hung too.
func TestMountAutoUnmount(t *testing.T) {
	tmp := t.TempDir()
	img, dir := filepath.Join(tmp, "img"), filepath.Join(tmp, "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, errs, code := runCmd(t, "mkfs", img, "32M"); code != 0 {
		t.Fatalf("mkfs: exit %d: %s", code, errs)
	}
	stderr, code := mountChild(t, img, dir, "-o", "auto_unmount")
	want := "ext4io mount: fusefs: mount option auto_unmount: not supported (the mount would never be served): unsupported operation\n"
	if code != 1 || stderr != want {
		t.Errorf("mount -o auto_unmount: exit %d, %q; want exit 1 and %q", code, stderr, want)
	}
	if fusetest.Mounted(dir) {
		t.Error("left mounted")
		unmount(t, dir)
	}
}
