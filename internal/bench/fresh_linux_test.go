//go:build linux

package bench

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shmDir returns a new directory in /dev/shm, skipping the test when
// /dev/shm is not tmpfs.
func shmDir(t *testing.T) string {
	t.Helper()
	if !isTmpfs("/dev/shm") {
		t.Skip("/dev/shm is not tmpfs here")
	}
	dir, err := os.MkdirTemp("/dev/shm", "ext4io-fresh-test-*")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// images returns the bench's image files in dir (kernel: the Linux
// columns' backing files instead).
func images(t *testing.T, dir string, kernel bool) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "ext4io-bench-kernel-") == kernel && strings.HasPrefix(e.Name(), "ext4io-bench-") {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

// imageSeen is one workload's image file, as the hook after its
// preparation found it.
type imageSeen struct {
	workload, path string
	ino            uint64
}

// recordImages runs c with a hook that records, after each workload's
// preparation, the one image file in c.Dir, and returns them in order.
func recordImages(t *testing.T, c Config) ([]imageSeen, string) {
	t.Helper()
	var seen []imageSeen
	failWorkloadHook = func(w workload) error {
		imgs := images(t, c.Dir, false)
		if len(imgs) != 1 {
			return errors.New("image files after the preparation: " + strings.Join(imgs, ", "))
		}
		var st syscall.Stat_t
		if err := syscall.Stat(imgs[0], &st); err != nil {
			return err
		}
		seen = append(seen, imageSeen{w.Name, imgs[0], st.Ino})
		return nil
	}
	t.Cleanup(func() { failWorkloadHook = nil })
	_, out := run(t, c)
	return seen, out
}

// TestBenchFreshImagePerWorkload runs three workloads twice in a tmpfs
// directory: every workload, in each round, runs on an image file of its
// own (path and inode), the previous one is gone by the time the
// workload's preparation is done, and none is left after the run. The
// neighbours overwrite-16 and overwrite-2, which share a written file on
// one image, each prepare theirs anew.
func TestBenchFreshImagePerWorkload(t *testing.T) {
	dir := shmDir(t)
	seen, out := recordImages(t, Config{Dir: dir, Size: 128 << 20, Runtime: 100 * time.Millisecond, Seed: 1, Repeat: 2,
		Workloads: []string{"overwrite-16", "overwrite-2", "seqwrite-1m"}})
	require.Len(t, seen, 6)
	paths, inos := map[string]bool{}, map[uint64]bool{}
	for _, s := range seen {
		assert.False(t, paths[s.path], "%s: image %s served an earlier workload", s.workload, s.path)
		assert.False(t, inos[s.ino], "%s: inode %d served an earlier workload", s.workload, s.ino)
		paths[s.path], inos[s.ino] = true, true
	}
	assert.Contains(t, out, "a new one per workload (tmpfs: fresh host pages)")
	assert.Empty(t, images(t, dir, false), "image files left behind")
}

// TestBenchOneImageOffTmpfs: on another host filesystem (the test's temp
// directory, unless it is tmpfs) one image file serves the whole run.
func TestBenchOneImageOffTmpfs(t *testing.T) {
	dir := t.TempDir()
	if isTmpfs(dir) {
		t.Skip("the test's temp directory is tmpfs")
	}
	seen, out := recordImages(t, Config{Dir: dir, Size: 128 << 20, Runtime: 50 * time.Millisecond, Seed: 1,
		Workloads: []string{"overwrite-2", "seqwrite-1m"}})
	require.Len(t, seen, 2)
	assert.Equal(t, seen[0], imageSeen{"overwrite-2", seen[1].path, seen[1].ino})
	assert.NotContains(t, out, "a new one per workload")
}

// TestFreshPeakFits: the size chooseSize picks for a fresh run keeps two
// images and the Linux columns' backing files within three quarters of
// the memory tmpfs has free, with and without Linux columns.
func TestFreshPeakFits(t *testing.T) {
	dir := shmDir(t)
	for _, k := range []struct{ kernel, fc bool }{{false, false}, {true, false}, {true, true}} {
		c, err := newConfig(Config{Dir: dir, Runtime: time.Second, Kernel: k.kernel, FastCommit: k.fc})
		require.NoError(t, err)
		c.fresh = freshHost(c)
		require.True(t, c.fresh)
		size, err := chooseSize(c)
		require.NoError(t, err)
		free, err := freeBytes(dir)
		require.NoError(t, err)
		limit := min(free, memAvailable()) / 4 * 3
		assert.LessOrEqual(t, freshPeak(c, size), limit, "%+v: size %d", k, size)
		assert.LessOrEqual(t, size, int64(defaultImageSize))
		t.Logf("%+v: image %s, peak %s of %s", k, gib(size), gib(freshPeak(c, size)), gib(limit))
	}
}

// TestBenchFreshKernelPerWorkload runs fsync-small and overwrite-2 twice
// with both Linux columns (root, fio) in a tmpfs directory: every Linux
// run has a backing file of its own, the previous one of its column is
// gone before it runs, and none is left after the run.
func TestBenchFreshKernelPerWorkload(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: the Linux columns need loop devices and mount")
	}
	if _, err := exec.LookPath("fio"); err != nil {
		t.Skip("fio not installed")
	}
	dir := shmDir(t)
	var (
		mu   sync.Mutex
		runs = map[bool][]string{} // fast_commit -> backing files in run order
		errs []string
	)
	kernelRunHook = func(w workload, e *kernelEnv) {
		mu.Lock()
		defer mu.Unlock()
		prev := runs[e.fastCommit]
		for _, p := range prev {
			if p == e.backing {
				errs = append(errs, w.Name+": backing "+p+" ran an earlier workload")
			} else if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, w.Name+": earlier backing "+p+" still there")
			}
		}
		runs[e.fastCommit] = append(prev, e.backing)
	}
	t.Cleanup(func() { kernelRunHook = nil })
	// A whole second: with --runtime=0.200s fio ran fsync-small's job
	// until the filesystem was full (ENOSPC).
	rep, out := run(t, Config{Dir: dir, Size: 128 << 20, Runtime: time.Second, Seed: 1, Repeat: 2,
		Kernel: true, FastCommit: true, Workloads: []string{"overwrite-2", "fsync-small"}})
	require.True(t, rep.Kernel.Ran, rep.Kernel.Skipped)
	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, errs)
	assert.Len(t, runs[false], 4, "linux-default runs")
	assert.Len(t, runs[true], 2, "linux-fc runs")
	assert.Contains(t, out, freshKernelNote)
	for _, w := range rep.Workloads {
		require.NotNil(t, w.Kernel, "%s: %s", w.Name, w.KernelNote)
	}
	assert.Empty(t, images(t, dir, true), "backing files left behind")
	assert.Empty(t, images(t, dir, false), "image files left behind")
}

// TestBenchFreshInterrupted cancels the run once the third workload is
// prepared on its new image (the cancel stops its phases), and, with root
// and fio, when a Linux column's second run has its new backing file: the
// run returns the context's error and leaves no image, backing file or
// loop device behind.
func TestBenchFreshInterrupted(t *testing.T) {
	dir := shmDir(t)
	t.Run("engine", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		n := 0
		failWorkloadHook = func(workload) error {
			if n++; n == 3 {
				cancel()
			}
			return nil
		}
		t.Cleanup(func() { failWorkloadHook = nil })
		_, err := Run(ctx, Config{Dir: dir, Size: 128 << 20, Runtime: 100 * time.Millisecond, Seed: 1, Repeat: 2,
			Workloads: []string{"overwrite-2", "seqwrite-1m"}})
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, 3, n)
		assert.Empty(t, images(t, dir, false), "image files left behind")
	})
	t.Run("linux", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("not root: the Linux columns need loop devices and mount")
		}
		if _, err := exec.LookPath("fio"); err != nil {
			t.Skip("fio not installed")
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var backings []string
		kernelRunHook = func(_ workload, e *kernelEnv) {
			if backings = append(backings, e.backing); len(backings) == 2 {
				cancel()
			}
		}
		t.Cleanup(func() { kernelRunHook = nil })
		_, err := Run(ctx, Config{Dir: dir, Size: 128 << 20, Runtime: time.Second, Seed: 1, Repeat: 2, Kernel: true,
			Workloads: []string{"overwrite-2", "seqwrite-1m"}})
		require.ErrorIs(t, err, context.Canceled)
		require.Len(t, backings, 2)
		assert.NotEqual(t, backings[0], backings[1])
		assert.Empty(t, images(t, dir, true), "backing files left behind")
		assert.Empty(t, images(t, dir, false), "image files left behind")
		for _, b := range backings {
			out, err := exec.Command("losetup", "-j", b).Output()
			require.NoError(t, err)
			assert.Empty(t, strings.TrimSpace(string(out)), "loop device still on %s", b)
		}
	})
}
