package ext4io

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestHostileOrphanFileSlots: orphan file slots a writable Open must
// refuse before it frees anything. With one inode in two slots,
// processing freed the inode and cleared one slot, then cleared
// orphan_present with the other slot still naming the freed inode (e2fsck:
// "Orphan file (inode 12) block 0 is not clean"). A number past the inode
// count, or a free inode, is a bad orphan as Linux's ext4_orphan_get says.
func TestHostileOrphanFileSlots(t *testing.T) {
	for _, c := range []struct {
		name string
		slot func(v *Volume, victim uint32) uint32 // the extra slot's number
		want string
	}{
		{"TwoSlots", func(_ *Volume, victim uint32) uint32 { return victim }, "two slots"},
		{"OutOfRange", func(v *Volume, _ uint32) uint32 { return v.sb.InodesCount + 1 }, "out of range"},
		{"FreeInode", func(v *Volume, _ uint32) uint32 { return v.sb.InodesCount - 1 }, "free in the inode bitmap"},
	} {
		t.Run(c.name, func(t *testing.T) {
			img := orphanImage(t, "")
			v, err := OpenImage(img, Options{Writable: true})
			require.NoError(t, err)
			f, err := v.Create("victim")
			require.NoError(t, err)
			_, err = f.WriteAt(make([]byte, 5000), 0)
			require.NoError(t, err)
			ino := f.Ino()
			require.NoError(t, v.Unlink("victim"))
			extra := c.slot(v, ino)
			require.NoError(t, v.beginInternalOp())
			v.ns().omu.Lock()
			ok, err := v.orphanFileSet(0, extra)
			v.ns().omu.Unlock()
			require.NoError(t, v.endOpErr(err))
			require.True(t, ok)
			require.Equal(t, []uint32{ino, extra}, listedOrphans(t, v))
			// A crash now: the image as the committed journal leaves it.
			require.NoError(t, v.Sync())
			crashed := filepath.Join(t.TempDir(), "crashed.img")
			b, err := os.ReadFile(img)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(crashed, b, 0o644))
			require.NoError(t, f.Close())
			v.Close() // frees the victim and clears its slot, leaving the extra one

			v, err = OpenImage(crashed, Options{Writable: true})
			if err == nil {
				require.NoError(t, v.Close())
				e2fs.Fsck(t, crashed) // what the Open left
			}
			require.ErrorIs(t, err, ErrCorrupt)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}
