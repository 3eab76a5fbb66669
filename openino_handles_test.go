package ext4io_test

import (
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/ext4iotest"
)

// TestOpenInoHandleNumbers: OpenIno takes numbers from outside (a FUSE or
// NFS-style handle), not from the image. A number no inode has (0, past
// s_inodes_count) is a stale handle, fs.ErrNotExist as Linux's ESTALE
// (__ext4_iget with EXT4_IGET_HANDLE), not a corrupt image. A reserved
// inode opens for reading only: a write into the journal inode would land
// in the live log under the journal's feet.
func TestOpenInoHandleNumbers(t *testing.T) {
	img := filepath.Join(t.TempDir(), "img")
	ext4iotest.Mkfs(t, img, "8M", "-b", "1024")
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	sb := v.Superblock()
	for _, ino := range []uint32{0, sb.InodesCount + 1, ^uint32(0)} {
		_, err := v.OpenIno(ino)
		require.ErrorIs(t, err, fs.ErrNotExist, "OpenIno(%d)", ino)
		assert.NotErrorIs(t, err, ext4io.ErrCorrupt, "OpenIno(%d)", ino)
		var pe *fs.PathError
		assert.ErrorAs(t, err, &pe)
	}

	jf, err := v.OpenIno(sb.JournalInum)
	require.NoError(t, err, "the journal opens by number for reading")
	jsb := make([]byte, 1024)
	_, err = jf.ReadAt(jsb, 0)
	require.NoError(t, err)
	_, err = jf.WriteAt([]byte("not a journal superblock"), 0)
	require.Error(t, err, "a write into the live journal")
	require.Error(t, jf.Truncate(0), "a truncate of the live journal")
	require.NoError(t, jf.Close())

	root, err := v.OpenIno(2)
	require.NoError(t, err)
	require.NoError(t, root.Close())
	require.NoError(t, v.WriteFile("after", []byte("x"), 0o644), "the volume goes on")
	require.NoError(t, v.Close())
	ext4iotest.Fsck(t, img)
}

// TestOpenInoOrphanFileReadOnly: the orphan file's inode lies past the
// reserved inodes (orphan_file); a write through OpenIno of it left e2fsck
// with "Orphan file (inode 12) block 0 is not clean". It opens read-only.
func TestOpenInoOrphanFileReadOnly(t *testing.T) {
	img := filepath.Join(t.TempDir(), "img")
	ext4iotest.Mkfs(t, img, "16M", "-b", "1024", "-O", "orphan_file")
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	sb := v.Superblock()
	ino := sb.OrphanFileInum
	require.GreaterOrEqual(t, ino, sb.FirstInode())
	f, err := v.OpenIno(ino)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("not an orphan block"), 0)
	require.Error(t, err, "a write into the orphan file")
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
	ext4iotest.Fsck(t, img)
}
