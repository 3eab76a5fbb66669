package fusefs_test

import (
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/fusefs"
	"github.com/ext4io/ext4io/fusefs/fusetest"
)

// TestMountOpenWhileMounting opens a file of the mount from this process
// as soon as the mount shows in /proc/self/mountinfo, while garbage
// collections run, which is what the old in-process TestMountCommand of
// cmd/ext4io did. An open that reaches the kernel before it has learned
// that the server has no FUSE_POLL makes the Go runtime's epoll_ctl send
// one while holding its P, and a stop-the-world then hangs the process
// (fusefs.Mount's comment); Mount holds such opens until the kernel knows.
// Each iteration is watched: a hang fails the test through the watchdog.
func TestMountOpenWhileMounting(t *testing.T) {
	needFUSE(t)
	img := newImage(t, 16<<20)
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	require.NoError(t, v.Mkdir("d", 0o755))
	f, err := v.Create("d/f")
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("x"), 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())

	var stop atomic.Bool
	gcDone := make(chan struct{})
	go func() {
		defer close(gcDone)
		for !stop.Load() {
			runtime.GC()
		}
	}()
	defer func() { stop.Store(true); <-gcDone }()

	iters := 10
	if testing.Short() {
		iters = 3
	}
	for i := 0; i < iters && !t.Failed(); i++ {
		v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
		require.NoError(t, err)
		dir := t.TempDir()
		opened := make(chan error, 1)
		var w atomic.Pointer[fusetest.Watchdog]
		go func() {
			for !fusetest.Mounted(dir) {
				time.Sleep(100 * time.Microsecond)
			}
			wd, err := fusetest.Arm(t, dir, 10*time.Second)
			if err != nil {
				opened <- err
				return
			}
			w.Store(wd)
			f, err := os.Open(filepath.Join(dir, "d/f"))
			if err == nil {
				f.Close()
			}
			f, err2 := os.Create(filepath.Join(dir, "d/g"))
			if err2 == nil {
				f.Close()
			}
			if err == nil {
				err = err2
			}
			opened <- err
		}()
		s, err := fusefs.Mount(v, dir, fusefs.Options{})
		oerr := <-opened
		// The watchdog's backstop process was started while go-fuse had
		// its poll file open without O_CLOEXEC and may hold it, which
		// would keep the mount busy: stop it before the unmount.
		if wd := w.Load(); wd != nil {
			wd.Stop()
		}
		if err != nil {
			syscall.Unmount(dir, syscall.MNT_DETACH)
		} else {
			require.NoError(t, s.Unmount())
			s.Wait()
		}
		require.NoError(t, v.Close())
		require.NoError(t, err, "iteration %d: mount", i)
		require.NoError(t, oerr, "iteration %d: open while mounting", i)
	}
	e2fsck(t, img)
}
