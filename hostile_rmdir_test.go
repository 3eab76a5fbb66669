package ext4io_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/ext4iotest"
)

// TestHostileRmdirZeroSize: a directory whose i_size is 0 holds entries
// in the blocks it maps, which no walk bounded by i_size sees. Rmdir
// found it empty and freed it, leaving its files' inodes in use with no
// name (e2fsck: "Unattached inode"). A directory smaller than "." and ".."
// is corruption, as Linux's ext4_empty_dir says ("invalid size"): the
// removal fails with ErrCorrupt and changes nothing.
func TestHostileRmdirZeroSize(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	require.NoError(t, os.MkdirAll(filepath.Join(src, "D"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "D", "f"), []byte("f"), 0o644))
	img := filepath.Join(dir, "img")
	ext4iotest.Mkfs(t, img, "8M", "-d", src, "-b", "1024", "-O", "^has_journal")
	ext4iotest.Debugfs(t, img, true, "sif /D size 0")
	before, err := os.ReadFile(img)
	require.NoError(t, err)
	for _, op := range []struct {
		name string
		fn   func(v *ext4io.Volume) error
	}{
		{"Rmdir", func(v *ext4io.Volume) error { return v.Rmdir("D") }},
		{"Remove", func(v *ext4io.Volume) error { return v.Remove("D") }},
		{"RenameOver", func(v *ext4io.Volume) error {
			if err := v.Mkdir("E", 0o755); err != nil {
				return err
			}
			return v.Rename("E", "D")
		}},
	} {
		t.Run(op.name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(img, before, 0o644))
			v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
			require.NoError(t, err)
			err = within(t, op.name, func() error { return op.fn(v) })
			within(t, "Close", v.Close)
			if err == nil {
				ext4iotest.Fsck(t, img) // what the removal left
			}
			require.ErrorIs(t, err, ext4io.ErrCorrupt)
			assert.Contains(t, err.Error(), "size")
		})
	}
}
