package ext4io_test

import (
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestTimedCommit checks that a create nobody syncs reaches the journal on
// the commit timer: a power cut a few intervals later keeps the file. With
// CommitInterval negative (no timer) the same crash loses it, which shows
// the crash model sees the difference.
func TestTimedCommit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		interval time.Duration
		survives bool
	}{
		{"timer", 20 * time.Millisecond, true},
		{"no-timer", -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := memdev.NewBlockSize(32<<20, 4096)
			if err := ext4io.Format(base, ext4io.FormatOptions{}); err != nil {
				t.Fatal(err)
			}
			cdev, err := errordev.NewCrashable(base)
			if err != nil {
				t.Fatal(err)
			}
			v, err := ext4io.Open(cdev, ext4io.Options{Writable: true, CommitInterval: tc.interval})
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			f, err := v.Create("unsynced")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte("data"), 0); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			// Poll crash images until the file shows up (at most 200
			// intervals), or, without a timer, for a fixed while.
			deadline := time.Now().Add(4 * time.Second)
			if !tc.survives {
				deadline = time.Now().Add(300 * time.Millisecond)
			}
			found := false
			for !found && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
				img, err := cdev.Crash(errordev.CrashOptions{})
				if err != nil {
					t.Fatal(err)
				}
				rv, err := ext4io.Open(img, ext4io.Options{})
				if err != nil {
					t.Fatalf("crash image: %v", err)
				}
				_, err = rv.Stat("unsynced")
				found = err == nil
				rv.Close()
			}
			if found != tc.survives {
				t.Fatalf("file in the crash image: %v, want %v", found, tc.survives)
			}
		})
	}
}
