//go:build linux

package ext4io_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestXattrCrashPoints crashes a workload of attribute changes (in-inode,
// block, shared blocks, copies on write, unlinks) at every device flush.
// Each recovered image passes e2fsck -fn (refcounts, bitmaps, hashes) and
// its attributes equal those after some prefix of the operations, no
// shorter than the last Volume.Sync: each change is one transaction.
func TestXattrCrashPoints(t *testing.T) {
	t.Parallel()
	base := memdev.NewBlockSize(32<<20, 4096)
	if err := ext4io.Format(base, ext4io.FormatOptions{BlockSize: 1024}); err != nil {
		t.Fatal(err)
	}
	cdev, err := errordev.NewCrashable(base)
	if err != nil {
		t.Fatal(err)
	}
	var (
		states     []string
		lastSynced int
	)
	type crash struct {
		img                *memdev.Device
		minState, maxState int
		flushIndex         int
	}
	var crashes []crash
	dev := &crashAtFlush{Crashable: cdev, onFlush: func(c *errordev.Crashable, n int) {
		img, err := c.Crash(errordev.CrashOptions{Seed: uint64(n), KeepProb: 0.5, TearLast: true})
		if err != nil {
			t.Fatal(err)
		}
		crashes = append(crashes, crash{img, lastSynced, max(len(states)-1, 0), n})
	}}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	dump := func(v *ext4io.Volume) string {
		ents, err := v.ReadDir(".")
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			if e.Name() != "lost+found" {
				names = append(names, e.Name())
			}
		}
		return ext4ioXattrs(t, v, names).String()
	}
	states = append(states, dump(v))
	rng := rand.New(rand.NewPCG(31, 32))
	for i := 0; i < 80; i++ {
		var err error
		switch op := rng.IntN(10); {
		case op < 2 || len(files) == 0:
			name := fmt.Sprintf("f%d", i)
			var f *ext4io.File
			if f, err = v.Create(name); err == nil {
				f.Close()
				files = append(files, name)
			}
		case op < 7:
			val := bytes.Repeat([]byte{byte('a' + rng.IntN(2))}, []int{1, 40, 300}[rng.IntN(3)])
			err = v.Setxattr(files[rng.IntN(len(files))], fmt.Sprintf("user.k%d", rng.IntN(3)), val, 0)
		case op < 9:
			err = v.Removexattr(files[rng.IntN(len(files))], fmt.Sprintf("user.k%d", rng.IntN(3)))
			if err != nil {
				err = nil // usually ErrNoAttr; nothing changed
			}
		default:
			j := rng.IntN(len(files))
			if err = v.Unlink(files[j]); err == nil {
				files = slices.Delete(files, j, j+1)
			}
		}
		if err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		states = append(states, dump(v))
		if i%9 == 8 {
			if err := v.Sync(); err != nil {
				t.Fatal(err)
			}
			lastSynced = len(states) - 1
		}
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d operations, %d crash points", len(states)-1, len(crashes))
	for i, c := range crashes {
		if testing.Short() && i%3 != 0 {
			continue
		}
		img := filepath.Join(t.TempDir(), fmt.Sprintf("crash%d.img", i))
		saveDev(t, c.img, img)
		rv, err := ext4io.OpenImage(img, ext4io.Options{Replay: true})
		if err != nil {
			t.Fatalf("flush %d: recovery: %v", c.flushIndex, err)
		}
		got := dump(rv)
		rv.Close()
		e2fs.Fsck(t, img)
		found := false
		for s := c.maxState; s >= c.minState && !found; s-- {
			found = states[s] == got
		}
		if !found {
			t.Fatalf("flush %d: recovered attributes match no state between %d (synced) and %d:\n%s", c.flushIndex, c.minState, c.maxState, got)
		}
	}
}
