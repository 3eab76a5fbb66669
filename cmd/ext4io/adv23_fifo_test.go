//go:build unix

package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAdv23FifoImage: a named pipe given as IMAGE is refused at once by
// reading and writing commands and by mkfs, instead of blocking in
// open(2) for a writer that never comes.
func TestAdv23FifoImage(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"ls", p}, {"info", p}, {"mkdir", p, "/x"}, {"mkfs", p, "8M"}} {
		done := make(chan string, 1)
		go func() {
			_, errOut, code := runCmd(t, args...)
			done <- strings.TrimSpace(errOut) + " (exit " + strconv.Itoa(code) + ")"
		}()
		select {
		case got := <-done:
			if !strings.Contains(got, "(exit 1)") || !strings.Contains(got, "named pipe") && !strings.Contains(got, "not a regular file") {
				t.Errorf("%s: %s", args[0], got)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s of a fifo still blocked after 10s", args[0])
		}
	}
}
