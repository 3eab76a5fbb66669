package ext4io_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/ext4iotest"
)

// TestHostileQuotaInodes: the quota files are the filesystem's, as the
// journal is. mkfs.ext4 -O quota,project puts the project quota file
// past the reserved inodes (12 here); with the features cleared the
// volume opens writable, and OpenIno of that inode opened it for writing:
// a write went into the live quota file. It opens read-only, as the
// journal does, and an entry naming it is corruption (Linux's
// is_special_ino counts the superblock's quota inodes).
func TestHostileQuotaInodes(t *testing.T) {
	img := filepath.Join(t.TempDir(), "img")
	ext4iotest.Mkfs(t, img, "16M", "-b", "1024", "-O", "quota,project")
	ext4iotest.Debugfs(t, img, true, "feature -quota -project")
	v, err := ext4io.OpenImage(img, ext4io.Options{})
	require.NoError(t, err)
	sb := v.Superblock()
	prj := sb.PrjQuotaInum
	require.NoError(t, v.Close())
	require.GreaterOrEqual(t, prj, sb.FirstInode(), "mkfs put the project quota file past the reserved inodes")
	assert.Equal(t, uint32(3), sb.UsrQuotaInum)
	assert.Equal(t, uint32(4), sb.GrpQuotaInum)
	ext4iotest.Debugfs(t, img, true, "ln "+debugfsIno(prj)+" /x")
	before := ext4iotest.Dump(t, img, debugfsIno(prj))

	v, err = ext4io.OpenImage(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	for _, ino := range []uint32{sb.UsrQuotaInum, sb.GrpQuotaInum, prj} {
		f, err := v.OpenIno(ino)
		require.NoError(t, err, "OpenIno(%d) opens for reading", ino)
		_, err = f.WriteAt([]byte("not a quota file"), 0)
		assert.Error(t, err, "a write into quota inode %d", ino)
		assert.Error(t, f.Truncate(0), "a truncate of quota inode %d", ino)
		require.NoError(t, f.Close())
	}
	_, err = v.OpenFile("x", os.O_RDWR, 0)
	assert.ErrorIs(t, err, ext4io.ErrCorrupt, "an entry naming the project quota inode")
	within(t, "Close", v.Close)
	assert.Equal(t, before, ext4iotest.Dump(t, img, debugfsIno(prj)), "the quota file is unchanged")
}

// debugfsIno is debugfs's spelling of inode number n.
func debugfsIno(n uint32) string { return fmt.Sprintf("<%d>", n) }
