//go:build linux

package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io/blockdev"
)

// TestBenchPageBatchNoHoles runs overwrite-2, atomic-64 and doublewrite-64
// on a temporary sparse image (atomic-64 after a workload that leaves a
// written file, which it would otherwise reuse without a format): with
// warmFree's fill and the format through
// zeroWrites no phase writes into a hole of the image (Measure.ImageGrowth
// is 0 on both sides), while with the holes kept atomic-64's moved pages
// land in them, which the same counter shows. On disk (the test's temp
// dir, whose host filesystem zeroes with zero-range) and, where it
// exists, in /dev/shm (tmpfs, where the file backend's ZeroOut punches:
// the format's zeroed journal would be holes without zeroWrites).
func TestBenchPageBatchNoHoles(t *testing.T) {
	dirs := map[string]string{"disk": t.TempDir()}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		dirs["shm"] = "/dev/shm"
	}
	for name, dir := range dirs {
		for _, keep := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/keepHoles=%v", name, keep), func(t *testing.T) {
				c, err := newConfig(Config{Dir: dir, Size: 128 << 20, Runtime: 200 * time.Millisecond, Seed: 1,
					Workloads: []string{"overwrite-2", "atomic-64", "doublewrite-64"}})
				require.NoError(t, err)
				c.keepHoles = keep
				rep, err := runBench(context.Background(), c)
				require.NoError(t, err)
				require.NoError(t, rep.Err())
				require.Len(t, rep.Workloads, 3)
				for _, w := range rep.Workloads {
					require.Positive(t, w.Engine.Ops, w.Name)
					assert.Zero(t, w.Raw.ImageGrowth, "%s: raw wrote into holes", w.Name)
					if keep && w.Name == "atomic-64" {
						// A batch moves 1 MiB of pages to free blocks.
						assert.Greater(t, w.Engine.ImageGrowth, float64(64<<10), "atomic-64 with holes kept")
						continue
					}
					assert.Zero(t, w.Engine.ImageGrowth, "%s: the engine wrote into holes", w.Name)
				}
			})
		}
	}
}

// TestBenchSmallFsyncNoHoles runs fsync-small on a temporary sparse
// image: with warmFree's fill, the format through zeroWrites and raw's
// region written first, neither side writes into a hole of the image
// (Measure.ImageGrowth is 0), as on a disk and as Linux's loop backing
// file, which is written whole; with the holes kept the engine's new
// files' blocks are holes, which the same counter shows.
func TestBenchSmallFsyncNoHoles(t *testing.T) {
	dirs := map[string]string{"disk": t.TempDir()}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		dirs["shm"] = "/dev/shm"
	}
	for name, dir := range dirs {
		for _, keep := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/keepHoles=%v", name, keep), func(t *testing.T) {
				c, err := newConfig(Config{Dir: dir, Size: 128 << 20, Runtime: 200 * time.Millisecond, Seed: 1,
					Workloads: []string{"fsync-small"}})
				require.NoError(t, err)
				c.keepHoles = keep
				rep, err := runBench(context.Background(), c)
				require.NoError(t, err)
				require.NoError(t, rep.Err())
				require.Len(t, rep.Workloads, 1)
				w := rep.Workloads[0]
				require.Positive(t, w.Engine.Ops)
				if keep {
					// Most new files' blocks were never written.
					assert.Greater(t, w.Engine.ImageGrowth, float64(1<<10), "engine with holes kept")
					return
				}
				assert.Zero(t, w.Engine.ImageGrowth, "the engine wrote into holes")
				assert.Zero(t, w.Raw.ImageGrowth, "raw wrote into holes")
			})
		}
	}
}

// TestWarmFreeHostSpace: warmFree fills the holes of the filesystem's
// window of a sparse image, unless they exceed half the host's free
// space: a large sparse --image (or a --size bigger than the temporary
// image's free-space rule picks) filled the host's disk. It then leaves
// the image as it is and logs why.
func TestWarmFreeHostSpace(t *testing.T) {
	for _, free := range []int64{1 << 40, 40 << 20} {
		t.Run(fmt.Sprintf("free=%dMiB", free>>20), func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "img")
			d, err := blockdev.CreateFile(img, 64<<20)
			require.NoError(t, err)
			defer d.Close()
			before, ok := allocatedBytes(img)
			if !ok {
				t.Skip("no st_blocks")
			}
			var log bytes.Buffer
			c, err := newConfig(Config{Dir: t.TempDir(), Size: 64 << 20, Runtime: time.Second, Log: &log})
			require.NoError(t, err)
			r := newBenchRun(c, d, 64<<20, 16<<20, nil)
			r.image.path = img
			old := hostFree
			hostFree = func(string) (int64, error) { return free, nil }
			defer func() { hostFree = old }()
			n, err := r.warmFree()
			require.NoError(t, err)
			after, _ := allocatedBytes(img)
			if free > 1<<30 {
				assert.Equal(t, int64(48<<20), n, "the window's holes are filled")
				assert.GreaterOrEqual(t, after-before, int64(48<<20))
				return
			}
			assert.Zero(t, n, "holes larger than half the host's free space are left")
			assert.Less(t, after-before, int64(1<<20), "the image's allocation grew")
			assert.Contains(t, log.String(), "not filling")
		})
	}
}
