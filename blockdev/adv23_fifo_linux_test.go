package blockdev_test

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ext4io/ext4io/blockdev"
)

// TestAdv23OpenFifo: opening a named pipe as an image fails at once with
// ErrInvalid ("a named pipe, neither a regular file nor a block device")
// instead of blocking in open(2) until a writer (or reader) comes.
func TestAdv23OpenFifo(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{true, false} {
		done := make(chan error, 1)
		go func() {
			d, err := blockdev.OpenFile(p, ro)
			if err == nil {
				d.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, blockdev.ErrInvalid) {
				t.Errorf("read-only %v: %v, want ErrInvalid", ro, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("read-only %v: OpenFile of a fifo still blocked after 10s", ro)
		}
	}
}
