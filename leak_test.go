package ext4io_test

import (
	"errors"
	"runtime"
	"testing"
	"weak"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestClosedVolumeIsCollected: once closed and unreferenced, a Volume (its
// device, caches and journal) is garbage, even if Files were left open or
// an I/O error stopped it. The namespace state used to live in a global
// table whose open Files pointed back at their Volume, so every Volume that
// ever handed out a File stayed in memory: the torture harness grew by a
// device per round until the OOM killer ended it.
func TestClosedVolumeIsCollected(t *testing.T) {
	for _, fault := range []bool{false, true} {
		name := "clean"
		if fault {
			name = "io-error"
		}
		t.Run(name, func(t *testing.T) {
			wp := closedVolume(t, fault)
			for i := 0; i < 5 && wp.Value() != nil; i++ {
				runtime.GC()
			}
			if wp.Value() != nil {
				t.Fatal("a closed, unreferenced Volume is still reachable")
			}
		})
	}
}

// closedVolume opens a volume, leaves Files open (one of them an orphan),
// optionally fails the device, closes the volume and returns a weak
// pointer to it.
func closedVolume(t *testing.T, fault bool) weak.Pointer[ext4io.Volume] {
	t.Helper()
	base := memdev.NewBlockSize(16<<20, 4096)
	if err := ext4io.Format(base, ext4io.FormatOptions{}); err != nil {
		t.Fatal(err)
	}
	toggle := errordev.NewToggle(errordev.Kinds(errordev.Always(), errordev.Write, errordev.Flush))
	var dev blockdev.Device = errordev.New(base, toggle)
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"/closed", "/open", "/orphan"} {
		f, err := v.Create(n)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte("data"), 0); err != nil {
			t.Fatal(err)
		}
		if n == "/closed" {
			f.Close()
		}
	}
	if err := v.Unlink("/orphan"); err != nil {
		t.Fatal(err)
	}
	if fault {
		toggle.Enable()
		if err := v.Sync(); !errors.Is(err, ext4io.ErrIO) {
			t.Fatalf("Sync on a failing device: %v, want ErrIO", err)
		}
	}
	if err := v.Close(); fault != (err != nil) {
		t.Fatalf("Close (fault %v): %v", fault, err)
	}
	return weak.Make(v)
}
