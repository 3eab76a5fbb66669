package fusetest_test

import (
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"github.com/ext4io/ext4io/fusefs/fusetest"
)

// ExampleWatch shows a test that serves a mount guarding itself against a
// server that stops answering: past the deadline the connection is
// aborted, so the test fails with a goroutine and kernel-stack dump instead
// of hanging.
func ExampleWatch() {
	_ = func(t *testing.T, mountpoint string, unmount func() error) {
		w := fusetest.Watch(t, mountpoint, 2*time.Minute)
		// ... use the mount ...
		if err := unmount(); err != nil {
			t.Fatal(err)
		}
		w.Stop() // after the unmount, so that it is watched too
	}
}

// ExampleMounted checks for a FUSE mount from the mount table, without
// asking a server that may hang: a fresh directory has none. A test that
// starts a server in another process polls Mounted until it holds.
func ExampleMounted() {
	dir, err := os.MkdirTemp("", "fusetest")
	if err != nil {
		log.Fatal(err)
	}
	defer os.Remove(dir)
	fmt.Println(fusetest.Mounted(dir))
	// Output: false
}
