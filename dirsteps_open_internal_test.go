package ext4io

import (
	"io/fs"
	"testing"

	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadDirRemovedDirInSteps lists a directory, open by path and by
// number, between the steps that free it after Rmdir (orphanSteps). A
// small removed directory is freed at once and its open Files list
// fs.ErrNotExist (Linux's IS_DEADDIR); one freed in steps listed as
// empty with no error until its last step. Both fail alike now.
func TestReadDirRemovedDirInSteps(t *testing.T) {
	mem := memdev.NewBlockSize(64<<20, 1024)
	v, _ := bigEmptyDir(t, mem)
	d, err := v.Open("d")
	require.NoError(t, err)
	steps, checked := 0, 0
	v.stepHook = func(bool) {
		steps++
		if steps%7 != 1 {
			return
		}
		checked++
		_, err := d.ReadDir(-1)
		assert.ErrorIs(t, err, fs.ErrNotExist, "step %d: ReadDir of the removed directory open by path", steps)
		g, err := v.OpenIno(d.ino)
		if err != nil {
			assert.ErrorIs(t, err, fs.ErrNotExist)
			return
		}
		_, err = g.ReadDir(-1)
		assert.ErrorIs(t, err, fs.ErrNotExist, "step %d: ReadDir of the removed directory open by number", steps)
		_, err = g.CreateAt("x", 0o644)
		assert.ErrorIs(t, err, fs.ErrNotExist, "step %d: CreateAt in the removed directory", steps)
		require.NoError(t, g.Close())
	}
	require.NoError(t, v.Rmdir("d"))
	v.stepHook = nil // later truncates call it too
	require.Greater(t, checked, 1, "listed between steps")
	_, err = d.ReadDir(-1)
	assert.ErrorIs(t, err, fs.ErrNotExist, "after the last step")
	require.NoError(t, d.Close())
	require.NoError(t, v.WriteFile("after", []byte("y"), 0o644))
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, mem)
}
