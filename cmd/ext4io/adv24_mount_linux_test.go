package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/fusefs/fusetest"
)

// TestMountSignalsUnmount: each of SIGINT, SIGTERM and SIGHUP (the
// terminal of a foreground mount closing) makes ext4io mount unmount,
// close the volume and exit 0, leaving the image clean with what was
// written through the mount, as libfuse's handlers make fuse2fs do.
// SIGHUP killed the server instead: the mount point was left "Transport
// endpoint is not connected", the image not clean (needs_recovery) and a
// file written and closed through the mount was lost.
func TestMountSignalsUnmount(t *testing.T) {
	needFuseMount(t)
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) { mountSignal(t, sig, false, false) })
	}
	// A signal as soon as the mount is ready: the handler was installed
	// only after the server reported ready, so such a signal killed it.
	for i := range 10 {
		t.Run(fmt.Sprint("at once ", i), func(t *testing.T) { mountSignal(t, syscall.SIGINT, false, true) })
	}
	// Under nohup SIGHUP stays ignored: the mount outlives it, and
	// SIGTERM then unmounts it.
	if _, err := exec.LookPath("nohup"); err == nil {
		t.Run("nohup", func(t *testing.T) { mountSignal(t, syscall.SIGTERM, true, false) })
	}
}

func mountSignal(t *testing.T, sig syscall.Signal, nohup, atOnce bool) {
	tmp := t.TempDir()
	img, dir := filepath.Join(tmp, "img"), filepath.Join(tmp, "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"mkfs", img, "32M"}, &out, &errb); code != 0 {
		t.Fatalf("mkfs: %d %s", code, errb.String())
	}
	// The server runs in a child (TestMain), as in TestMountCommand.
	var merr bytes.Buffer
	cmd := exec.Command(os.Args[0], "mount", img, dir)
	if nohup {
		cmd = exec.Command("nohup", os.Args[0], "mount", img, dir)
	}
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
	defer func() {
		if fusetest.Mounted(dir) {
			exec.Command("fusermount3", "-u", "-z", dir).Run()
		}
	}()
	msg, _ := io.ReadAll(ready)
	ready.Close()
	if string(msg) != mountReady {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("mount did not start: %q %s", msg, merr.String())
	}
	if atOnce {
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("mount after %v at once: %v: %s", sig, err, merr.String())
		}
		return
	}
	wd := fusetest.Watch(t, dir, 2*time.Minute)
	defer wd.Stop()
	if err := os.WriteFile(filepath.Join(dir, "hello"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if nohup {
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		if !fusetest.Mounted(dir) {
			t.Fatal("SIGHUP unmounted a mount started under nohup")
		}
	}
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("mount after %v: %v: %s", sig, err, merr.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("mount did not return after %v", sig)
	}
	if fusetest.Mounted(dir) {
		t.Fatalf("still mounted after %v", sig)
	}
	v, err := ext4io.OpenImage(img, ext4io.Options{NoRecovery: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if sb := v.Superblock(); sb.State&1 == 0 {
		t.Fatalf("superblock state %#x after %v: not clean", sb.State, sig)
	}
	b, err := v.ReadFile("hello")
	if err != nil || string(b) != "hi\n" {
		t.Fatalf("hello after %v: %q, %v", sig, b, err)
	}
}
