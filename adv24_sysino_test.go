package ext4io_test

import (
	"errors"
	"io/fs"
	"syscall"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/stretchr/testify/require"
)

// TestOpenInoSystemInodeRefusesChanges: a system inode that OpenIno opens
// (read-only, as documented) refuses Chmod, Chown, Chtimes, Setxattr and
// Removexattr with EPERM. They went through: Chmod(0) on the bad-blocks
// inode left an image e2fsck rejects ("The bad block inode looks
// invalid"), and Setxattr gave the journal inode an xattr block. The
// image stays e2fsck-clean.
func TestOpenInoSystemInodeRefusesChanges(t *testing.T) {
	v, img := openOSVolume(t)
	for _, ino := range []uint32{1, 7, 8} { // bad blocks, resize, journal
		f, err := v.OpenIno(ino)
		require.NoError(t, err)
		changes := map[string]func() error{
			"Chmod":       func() error { return f.Chmod(0) },
			"Chown":       func() error { return f.Chown(5, 5) },
			"Chtimes":     func() error { return f.Chtimes(time.Unix(5, 0), time.Unix(5, 0)) },
			"Setxattr":    func() error { return f.Setxattr("user.x", make([]byte, 3000), 0) },
			"Removexattr": func() error { return f.Removexattr("user.x") },
		}
		for name, change := range changes {
			err := change()
			var pe *fs.PathError
			if !errors.Is(err, ext4io.ErrPermission) || !errors.Is(err, syscall.EPERM) || !errors.As(err, &pe) {
				t.Errorf("%s of inode %d = %v; want an *fs.PathError matching ErrPermission (EPERM)", name, ino, err)
			}
		}
		require.NoError(t, f.Close())
	}
	// The root is no system inode: it changes as any directory does.
	root, err := v.OpenIno(2)
	require.NoError(t, err)
	require.NoError(t, root.Chmod(0o700))
	require.NoError(t, root.Setxattr("user.x", []byte("v"), 0))
	require.NoError(t, root.Close())
	require.NoError(t, v.Close())
	e2fs.Fsck(t, img)
}
