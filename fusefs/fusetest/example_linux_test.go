package fusetest_test

import (
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
