package fusetest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io/fusefs/fusetest"
)

// stuckRoot is a file system whose files never answer getattr.
type stuckRoot struct {
	fs.Inode
	release chan struct{}
}

type stuckFile struct {
	fs.Inode
	release chan struct{}
}

func (f *stuckFile) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	<-f.release
	return 0
}

func (r *stuckRoot) OnAdd(ctx context.Context) {
	ch := r.NewPersistentInode(ctx, &stuckFile{release: r.release}, fs.StableAttr{Mode: syscall.S_IFREG})
	r.AddChild("stuck", ch, false)
}

// recorder is a testing.TB that records Errorf instead of failing.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Helper() {}

// TestWatchAborts serves a file system whose getattr never returns: the
// watchdog aborts the connection, the blocked stat fails instead of
// hanging, and Stop reports the hang with the goroutine dump.
func TestWatchAborts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("fusetest: not root")
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		t.Skip("fusetest: no fusermount3")
	}
	dir := t.TempDir()
	root := &stuckRoot{release: make(chan struct{})}
	ttl := time.Duration(0)
	srv, err := fs.Mount(dir, root, &fs.Options{AttrTimeout: &ttl, EntryTimeout: &ttl})
	require.NoError(t, err)
	defer srv.Wait()
	defer syscall.Unmount(dir, syscall.MNT_DETACH)
	defer close(root.release)

	rec := &recorder{TB: t}
	w := fusetest.Watch(rec, dir, 2*time.Second)
	start := time.Now()
	_, err = os.Stat(filepath.Join(dir, "stuck"))
	took := time.Since(start)
	require.Error(t, err, "stat of a file whose server never answers")
	assert.True(t, errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ENOTCONN), "stat: %v", err)
	assert.Less(t, took, 15*time.Second, "the in-process watchdog aborts, not the backstop")
	assert.True(t, w.Fired())
	assert.True(t, fusetest.Mounted(dir), "Mounted does not ask the server")
	w.Stop()
	require.Len(t, rec.errs, 1)
	assert.Contains(t, rec.errs[0], "connection aborted")
	assert.Contains(t, rec.errs[0], "stuckFile).Getattr", "the dump shows the stuck handler")
	assert.Contains(t, rec.errs[0], "request_wait_answer", "the kernel stacks show the blocked stat")
	w.Stop()
	assert.Len(t, rec.errs, 1, "Stop is idempotent")
}

// TestWatchQuiet: a mount that answers leaves the test alone.
func TestWatchQuiet(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("fusetest: not root")
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		t.Skip("fusetest: no fusermount3")
	}
	dir := t.TempDir()
	root := &stuckRoot{release: make(chan struct{})}
	close(root.release)
	srv, err := fs.Mount(dir, root, &fs.Options{})
	require.NoError(t, err)
	assert.True(t, fusetest.Mounted(dir))
	rec := &recorder{TB: t}
	w := fusetest.Watch(rec, dir, time.Minute)
	_, err = os.Stat(filepath.Join(dir, "stuck"))
	require.NoError(t, err)
	require.NoError(t, srv.Unmount())
	srv.Wait()
	assert.False(t, fusetest.Mounted(dir), "after the unmount")
	w.Stop()
	assert.False(t, w.Fired())
	assert.Empty(t, rec.errs)
}

// TestWatchSlowNotStuck: a mount that outlives its budget in a process
// that still runs (a slow test on a loaded machine, not a hang) fails
// with the in-process dump, and the backstop does not fire later and
// blame a stuck process when Stop comes after its time.
func TestWatchSlowNotStuck(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("fusetest: not root")
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		t.Skip("fusetest: no fusermount3")
	}
	t.Parallel()
	dir := t.TempDir()
	root := &stuckRoot{release: make(chan struct{})}
	close(root.release)
	srv, err := fs.Mount(dir, root, &fs.Options{})
	require.NoError(t, err)
	defer srv.Wait()
	defer syscall.Unmount(dir, syscall.MNT_DETACH)
	rec := &recorder{TB: t}
	w := fusetest.Watch(rec, dir, time.Second)
	deadline := time.Now().Add(time.Minute)
	for !w.Fired() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	require.True(t, w.Fired())
	time.Sleep(18 * time.Second) // past the backstop's 1 s + 15 s
	w.Stop()
	require.Len(t, rec.errs, 1)
	assert.Contains(t, rec.errs[0], "did not finish within 1s: connection aborted")
	assert.NotContains(t, rec.errs[0], "could not run its watchdog")
}
