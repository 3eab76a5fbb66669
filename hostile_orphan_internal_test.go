package ext4io

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestHostileOrphanFileTwoSlots: an orphan file naming one inode in two
// slots. Processing freed the inode and cleared one slot, then cleared
// orphan_present with the other still naming the freed inode. Listing an
// inode twice is corruption: the writable Open fails with ErrCorrupt.
func TestHostileOrphanFileTwoSlots(t *testing.T) {
	img := orphanImage(t, "")
	v, err := OpenImage(img, Options{Writable: true})
	require.NoError(t, err)
	f, err := v.Create("victim")
	require.NoError(t, err)
	_, err = f.WriteAt(make([]byte, 5000), 0)
	require.NoError(t, err)
	ino := f.Ino()
	require.NoError(t, v.Unlink("victim"))
	require.NoError(t, v.beginInternalOp())
	v.ns().omu.Lock()
	ok, err := v.orphanFileSet(0, ino) // a second slot
	v.ns().omu.Unlock()
	require.NoError(t, v.endOpErr(err))
	require.True(t, ok)
	require.Equal(t, []uint32{ino, ino}, listedOrphans(t, v))
	// A crash now: the image as the committed journal leaves it.
	require.NoError(t, v.Sync())
	crashed := filepath.Join(t.TempDir(), "crashed.img")
	b, err := os.ReadFile(img)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(crashed, b, 0o644))
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())

	v, err = OpenImage(crashed, Options{Writable: true})
	if err == nil {
		require.NoError(t, v.Close())
		e2fs.Fsck(t, crashed) // what the Open left
	}
	require.ErrorIs(t, err, ErrCorrupt)
	assert.Contains(t, err.Error(), "two slots")
}
