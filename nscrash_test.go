package ext4io_test

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// listTree returns "path type" lines for every name in the volume.
func listTree(t *testing.T, v *ext4io.Volume) string {
	t.Helper()
	var lines []string
	err := fs.WalkDir(v.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." || p == "lost+found" {
			return nil
		}
		lines = append(lines, fmt.Sprintf("%s %v", p, d.Type()))
		return nil
	})
	if err != nil {
		t.Fatalf("walking the recovered tree: %v", err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// TestNamespaceCrashPoints crashes a workload of namespace operations at
// every device flush. Each recovered image passes e2fsck -fn (no lost or
// duplicated entries, link counts right) and its tree equals the tree after
// some prefix of the operations, no shorter than the last Volume.Sync
// before the crash: operations are atomic and synced ones survive.
func TestNamespaceCrashPoints(t *testing.T) {
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
		states     []string // tree after each operation (states[0]: empty)
		lastSynced int
		v          *ext4io.Volume
	)
	type crash struct {
		img        *memdev.Device
		minState   int // the state synced before the crash
		maxState   int // the state when the crash happened
		flushIndex int
	}
	var crashes []crash
	dev := &crashAtFlush{Crashable: cdev, onFlush: func(c *errordev.Crashable, n int) {
		img, err := c.Crash(errordev.CrashOptions{Seed: uint64(n), KeepProb: 0.5, TearLast: true})
		if err != nil {
			t.Fatal(err)
		}
		crashes = append(crashes, crash{img, lastSynced, max(len(states)-1, 0), n})
	}}
	v, err = ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	states = append(states, listTree(t, v))
	rng := rand.New(rand.NewPCG(21, 22))
	dirs := []string{"."}
	var files []string
	for i := 0; i < 60; i++ {
		var err error
		switch op := rng.IntN(10); {
		case op < 2:
			d := path.Join(dirs[rng.IntN(len(dirs))], fmt.Sprintf("d%d", i))
			if err = v.Mkdir(d, 0o755); err == nil {
				dirs = append(dirs, d)
			}
		case op < 6:
			p := path.Join(dirs[rng.IntN(len(dirs))], fmt.Sprintf("f%d", i))
			var f *ext4io.File
			if f, err = v.Create(p); err == nil {
				_, err = f.WriteAt([]byte(p), 0)
				f.Close()
				files = append(files, p)
			}
		case op < 8 && len(files) > 0:
			j := rng.IntN(len(files))
			to := path.Join(dirs[rng.IntN(len(dirs))], fmt.Sprintf("r%d", i))
			if err = v.Rename(files[j], to); err == nil {
				files[j] = to
			}
		case len(files) > 0:
			j := rng.IntN(len(files))
			if err = v.Unlink(files[j]); err == nil {
				files = slices.Delete(files, j, j+1)
			}
		}
		if err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		states = append(states, listTree(t, v))
		if i%7 == 6 {
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
		got := listTree(t, rv)
		rv.Close()
		e2fs.Fsck(t, img)
		found := -1
		for s := c.maxState; s >= c.minState; s-- {
			if states[s] == got {
				found = s
				break
			}
		}
		if found < 0 {
			t.Fatalf("flush %d: recovered tree matches no state between %d (synced) and %d:\n%s", c.flushIndex, c.minState, c.maxState, got)
		}
	}
}
