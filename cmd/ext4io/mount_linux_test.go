package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/fusefs/fusetest"
)

// needFuseMount skips t unless ext4io mount can mount here: root,
// /dev/fuse and fusermount3.
func needFuseMount(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mount: not root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("mount: no /dev/fuse")
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		t.Skip("mount: no fusermount3 (Debian package fuse3)")
	}
}

// TestMountCommand runs ext4io mount, writes through the mount, unmounts
// with fusermount3 -u and checks that the command returned after marking
// the file system clean.
func TestMountCommand(t *testing.T) {
	needFuseMount(t)
	tmp := t.TempDir()
	img, dir := filepath.Join(tmp, "img"), filepath.Join(tmp, "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"mkfs", img, "32M"}, &out, &errb); code != 0 {
		t.Fatalf("mkfs: %d %s", code, errb.String())
	}
	// The server runs in a child process (the test binary as ext4io,
	// TestMain), never in this one: a server that stopped answering would
	// otherwise block this process's own I/O on the mount for good, where
	// killing a child aborts the connection and fails the test instead.
	var merr bytes.Buffer
	cmd := exec.Command(os.Args[0], "mount", "-o", "default_permissions", img, dir)
	cmd.Env = append(os.Environ(), mountChildEnv+"=1")
	cmd.Stderr = &merr
	ready, readyW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.ExtraFiles = []*os.File{readyW}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	readyW.Close()
	watchdog := time.AfterFunc(90*time.Second, func() { cmd.Process.Kill() })
	defer watchdog.Stop()
	msg, _ := io.ReadAll(ready)
	ready.Close()
	if string(msg) != mountReady {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("mount did not start: %q %s", msg, merr.String())
	}
	wd := fusetest.Watch(t, dir, 2*time.Minute)
	defer wd.Stop()
	if err := os.WriteFile(filepath.Join(dir, "hello"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if o, err := exec.Command("fusermount3", "-u", dir).CombinedOutput(); err != nil {
		t.Fatalf("fusermount3 -u: %v %s", err, o)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("mount: %v: %s", err, merr.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("mount did not return after the unmount")
	}
	v, err := ext4io.OpenImage(img, ext4io.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if sb := v.Superblock(); sb.State&1 == 0 {
		t.Fatalf("superblock state %#x: not clean", sb.State)
	}
	f, err := v.Open("hello")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 10)
	n, _ := f.ReadAt(b, 0)
	if string(b[:n]) != "hi\n" {
		t.Fatalf("hello holds %q", b[:n])
	}
}

// TestMain lets the test binary serve as the background mount's child:
// os.Executable is the test binary when a test runs mount --background.
func TestMain(m *testing.M) {
	if os.Getenv(mountChildEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestMountBackground runs ext4io mount --background: it returns once the
// file system is mounted, the server outlives it, an unmount makes the
// server close the volume clean, and a mount that cannot start fails in
// the parent with the child's error.
func TestMountBackground(t *testing.T) {
	needFuseMount(t)
	tmp := t.TempDir()
	img, dir := filepath.Join(tmp, "img"), filepath.Join(tmp, "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"mount", "--background", img, dir}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "no such file") {
		t.Fatalf("mount --background of a missing image: exit %d, %q", code, errb.String())
	}
	if code := run([]string{"mkfs", img, "32M"}, &out, &errb); code != 0 {
		t.Fatalf("mkfs: %d %s", code, errb.String())
	}
	if code := run([]string{"mount", "--background", img, filepath.Join(tmp, "nodir")}, &out, &errb); code != 1 {
		t.Fatalf("mount --background on a missing directory: exit %d", code)
	}
	errb.Reset()
	if code := run([]string{"mount", "--background", img, dir}, &out, &errb); code != 0 {
		t.Fatalf("mount --background: exit %d: %s", code, errb.String())
	}
	mounted := func() bool { return fusetest.Mounted(dir) }
	defer func() {
		if mounted() {
			exec.Command("fusermount3", "-u", dir).Run()
		}
	}()
	// Mounted when the command returns, without waiting.
	if !mounted() {
		t.Fatal("not mounted when mount --background returned")
	}
	wd := fusetest.Watch(t, dir, 2*time.Minute)
	defer wd.Stop()
	if err := os.WriteFile(filepath.Join(dir, "hello"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if o, err := exec.Command("fusermount3", "-u", dir).CombinedOutput(); err != nil {
		t.Fatalf("fusermount3 -u: %v %s", err, o)
	}
	// The server closes the volume after the unmount: wait for the clean
	// state (it also holds the image's lock until then).
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, err := ext4io.OpenImage(img, ext4io.Options{})
		if err == nil {
			clean := v.Superblock().State&1 != 0
			f, ferr := v.Open("hello")
			var b []byte
			if ferr == nil {
				b = make([]byte, 10)
				n, _ := f.ReadAt(b, 0)
				b = b[:n]
				f.Close()
			}
			v.Close()
			if clean && string(b) == "hi\n" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the image is not clean with hello after the unmount: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
