package torture

import (
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/stretchr/testify/require"
)

// TestDroppedNameMayStay: a file dropped after a failed operation (a write
// that failed for space leaves the file) may still be there after a later
// Volume.Sync, while a name the model never had is still reported. The
// torture on a 16 MiB volume with 8 goroutines reported the first as
// "exists but the model says it does not".
func TestDroppedNameMayStay(t *testing.T) {
	dev := memdev.NewBlockSize(16<<20, 4096)
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{}))
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	require.NoError(t, err)
	defer v.Close()
	require.NoError(t, v.Mkdir("/d", 0o755))
	w := newWorker(v, "/d", 1, 4096)
	for _, name := range []string{"kept", "failed"} {
		f, err := v.Create("/d/" + name)
		require.NoError(t, err)
		w.files[name] = &mfile{name: name, f: f}
	}
	require.NoError(t, v.Sync())
	w.syncAll()
	w.drop(w.files["failed"]) // as step does after the write's ErrNoSpace
	require.NoError(t, v.Sync())
	w.syncAll()
	require.NoError(t, w.check(v, true), "after a crash")
	require.NoError(t, w.check(v, false), "after Close")

	f, err := v.Create("/d/stray") // no operation of the worker made it
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.ErrorContains(t, w.check(v, true), "/d/stray: exists but the model says it does not")
	require.ErrorContains(t, w.check(v, false), "/d/stray: exists but the model says it does not")
}
