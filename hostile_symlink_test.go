package ext4io_test

import (
	"errors"
	"io/fs"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestHostileReadlinkVsRemove: Readlink (and a path walk through a
// symlink) read the target's block after the directory's lock was
// released and without the symlink's own lock, so a Remove could free the
// block and a new symlink take it meanwhile: Readlink returned another
// link's target, or zeros. It returns the link's own target or fails
// with fs.ErrNotExist, as if it came after the removal.
func TestHostileReadlinkVsRemove(t *testing.T) {
	v, img := openOSVolume(t)
	a := strings.Repeat("a", 200) // block symlinks: past i_block's 60 bytes
	b := strings.Repeat("b", 200)
	require.NoError(t, v.Mkdir("d", 0o755))
	var stop atomic.Bool
	var wg sync.WaitGroup
	churn := func(target, name string) {
		for !stop.Load() {
			if err := v.Symlink(target, name); err != nil {
				t.Error(err)
				return
			}
			if err := v.Remove(name); err != nil {
				t.Error(err)
				return
			}
		}
	}
	wg.Go(func() { churn(a, "a") })
	wg.Go(func() { churn(b, "b") })
	wg.Go(func() { churn(b, "d/c") })
	var reads, found atomic.Int64
	bad := make(chan string, 1)
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
				got, err := v.Readlink("a")
				reads.Add(1)
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				if err != nil || got != a {
					select {
					case bad <- got + " " + errString(err):
					default:
					}
					return
				}
				found.Add(1)
			}
		})
	}
	select {
	case s := <-bad:
		t.Errorf("Readlink(\"a\") = %.40q...", s)
	case <-time.After(time.Duration(sized(1, 3, 20)) * time.Second):
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d reads, %d found the link", reads.Load(), found.Load())
	assert.Positive(t, found.Load())
	require.NoError(t, v.Close())
	e2fs.Fsck(t, img)
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestHostileSymlinkChurnNoSpace: creating and removing a block symlink
// more times than the volume has free blocks, with no Sync, failed with
// ErrNoSpace: each removal's block stays busy until a commit, and
// namespace operations did not commit and retry as writes do (Linux's
// ext4_symlink retries after ext4_should_retry_alloc).
func TestHostileSymlinkChurnNoSpace(t *testing.T) {
	t.Parallel()
	v, img := openOSVolume(t)
	st, err := v.Statfs()
	require.NoError(t, err)
	target := strings.Repeat("t", 100)
	for i := range st.BlocksFree + 64 {
		require.NoError(t, v.Symlink(target, "l"), "round %d of %d free blocks", i, st.BlocksFree)
		require.NoError(t, v.Remove("l"))
	}
	require.NoError(t, v.Close())
	e2fs.Fsck(t, img)
}
