package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMkfsDirInterrupted: SIGTERM (or SIGINT, SIGHUP) while mkfs -d
// copies a tree into a new image stops the copy, removes the new image
// and exits 1 saying so, as any failure of the copy does (docs/cli.md).
// The signal killed the process instead, leaving a new image file with
// part of the tree in a file system marked not clean.
func TestMkfsDirInterrupted(t *testing.T) {
	dir := t.TempDir()
	// The tree in RAM when it can be (quick to make), one 128 MiB file
	// of non-zero data: its copy into the image takes a while, and the
	// copy checks for an interrupt every MiB.
	src, err := os.MkdirTemp("/dev/shm", "adv24-src")
	if err != nil {
		src = filepath.Join(dir, "src")
		err = os.Mkdir(src, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(src)
	if err := os.WriteFile(filepath.Join(src, "big"), bytes.Repeat([]byte{0xab}, 128<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "img")
	var errb bytes.Buffer
	cmd := exec.Command(os.Args[0], "mkfs", "-d", src, img, "1G") // the test binary as ext4io (TestMain)
	cmd.Env = append(os.Environ(), mountChildEnv+"=1")
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(img); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("mkfs -d did not create %s: %s", img, errb.String())
		}
		time.Sleep(time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if err == nil {
		t.Skip("mkfs -d finished before the signal arrived")
	}
	if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(errb.String(), "interrupted") || !strings.Contains(errb.String(), "removed") {
		t.Fatalf("mkfs -d after SIGTERM: %v (exit %d), %q; want exit 1 saying it was interrupted and the image removed", err, code, errb.String())
	}
	if _, err := os.Stat(img); !os.IsNotExist(err) {
		t.Fatalf("the interrupted mkfs -d left %s: %v", img, err)
	}
}
