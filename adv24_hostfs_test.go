package ext4io_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/stretchr/testify/require"
)

// TestOSFileSystemRemoveEmptyName: OSFileSystem(dir).RemoveAll("") and
// Remove("") leave dir alone, as Volume's do (and os.RemoveAll("") and
// os.Remove("")): a name left empty by mistake removed the whole host
// directory the FileSystem stands for.
func TestOSFileSystemRemoveEmptyName(t *testing.T) {
	host := filepath.Join(t.TempDir(), "root")
	require.NoError(t, os.Mkdir(host, 0o755))
	v, _ := openOSVolume(t)
	defer v.Close()
	for _, fsys := range []ext4io.FileSystem{v.FileSystem(), ext4io.OSFileSystem(host)} {
		require.NoError(t, fsys.WriteFile("keep", []byte("x"), 0o644))
		require.NoError(t, fsys.RemoveAll(""))
		_, err := fsys.Stat("keep")
		require.NoError(t, err, "RemoveAll(\"\") removed the files")
		require.NoError(t, fsys.Remove("keep"))
		err = fsys.Remove("")
		var pe *fs.PathError
		require.ErrorAs(t, err, &pe, "Remove(\"\") of an empty root")
		require.Equal(t, "", pe.Path)
	}
	_, err := os.Stat(host)
	require.NoError(t, err, "the host directory was removed")
}
