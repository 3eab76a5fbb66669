package ext4io_test

import (
	"fmt"
	"io/fs"
	"os"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCreateAtMkdirAt builds a tree through directory Files only
// (MkdirAt, CreateAt), with enough names to grow the directories by new
// blocks and into htrees, journaled, without a journal and unjournaled
// with write-back metadata (Tuning.NoJournal); reads it back by path and
// has e2fsck check the image.
func TestCreateAtMkdirAt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		features string
		opts     ext4io.Options
	}{
		{"journal", "", ext4io.Options{Writable: true}},
		{"no-journal", "^has_journal", ext4io.Options{Writable: true}},
		{"NoJournal", "", ext4io.Options{Writable: true, PageCacheBytes: -1, Tuning: ext4io.Tuning{NoJournal: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dev := memdev.New(64 << 20)
			require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{Features: tc.features}))
			v, err := ext4io.Open(dev, tc.opts)
			require.NoError(t, err)
			root, err := v.Open("/")
			require.NoError(t, err)
			const dirs, files = 3, 300
			for d := range dirs {
				dir, err := root.MkdirAt(fmt.Sprintf("d%d", d), 0o750)
				require.NoError(t, err)
				assert.Equal(t, fmt.Sprintf("/d%d", d), dir.Name())
				sub, err := dir.MkdirAt("sub", 0o700)
				require.NoError(t, err)
				for i := range files {
					f, err := dir.CreateAt(fmt.Sprintf("file-with-a-longish-name-%04d", i), 0o640)
					require.NoError(t, err)
					_, err = f.Write([]byte(fmt.Sprintf("%d/%d\n", d, i)))
					require.NoError(t, err)
					require.NoError(t, f.Close())
				}
				f, err := sub.CreateAt("deep", 0o600)
				require.NoError(t, err)
				require.NoError(t, f.Close())
				require.NoError(t, sub.Close())
				require.NoError(t, dir.Close())
			}
			require.NoError(t, root.Close())
			require.NoError(t, v.Close())

			v, err = ext4io.Open(dev, ext4io.Options{})
			require.NoError(t, err)
			for d := range dirs {
				ents, err := v.ReadDir(fmt.Sprintf("/d%d", d))
				require.NoError(t, err)
				assert.Len(t, ents, files+1)
				fi, err := v.Stat(fmt.Sprintf("/d%d", d))
				require.NoError(t, err)
				assert.Equal(t, fs.ModeDir|0o750, fi.Mode())
				for _, i := range []int{0, files / 2, files - 1} {
					name := fmt.Sprintf("/d%d/file-with-a-longish-name-%04d", d, i)
					b, err := v.ReadFile(name)
					require.NoError(t, err)
					assert.Equal(t, fmt.Sprintf("%d/%d\n", d, i), string(b))
					fi, err := v.Stat(name)
					require.NoError(t, err)
					assert.Equal(t, fs.FileMode(0o640), fi.Mode())
				}
				_, err = v.Stat(fmt.Sprintf("/d%d/sub/deep", d))
				require.NoError(t, err)
			}
			require.NoError(t, v.Close())
			ext4iotest.FsckDev(t, dev)
		})
	}
}

// TestCreateAtErrors checks what CreateAt and MkdirAt refuse, each as
// an *fs.PathError naming the path, with nothing created.
func TestCreateAtErrors(t *testing.T) {
	t.Parallel()
	dev := memdev.New(32 << 20)
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{}))
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	require.NoError(t, err)
	require.NoError(t, v.Mkdir("/d", 0o755))
	require.NoError(t, v.Symlink("/nowhere", "/d/dangling"))
	require.NoError(t, v.WriteFile("/d/f", []byte("x"), 0o644))
	d, err := v.Open("/d")
	require.NoError(t, err)

	for _, name := range []string{"f", "dangling"} {
		_, err = d.CreateAt(name, 0o644)
		assert.ErrorIs(t, err, fs.ErrExist, name)
		_, err = d.MkdirAt(name, 0o755)
		assert.ErrorIs(t, err, fs.ErrExist, name)
	}
	// As Linux's openat(O_CREAT|O_EXCL) and mkdirat: EEXIST for "." and
	// "..", ENOENT for an empty name; more than one element is refused.
	for name, want := range map[string]error{"a/b": ext4io.ErrInvalid, "": fs.ErrNotExist, ".": fs.ErrExist, "..": fs.ErrExist} {
		_, err = d.CreateAt(name, 0o644)
		assert.ErrorIs(t, err, want, name)
		_, err = d.MkdirAt(name, 0o755)
		assert.ErrorIs(t, err, want, name)
	}
	var pe *fs.PathError
	_, err = d.CreateAt("f", 0o644)
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "/d/f", pe.Path)

	f, err := v.Open("/d/f")
	require.NoError(t, err)
	_, err = f.CreateAt("x", 0o644)
	assert.ErrorIs(t, err, ext4io.ErrNotDir)
	require.NoError(t, f.Close())

	// A directory removed while open takes no new names.
	e, err := d.MkdirAt("e", 0o755)
	require.NoError(t, err)
	require.NoError(t, v.Remove("/d/e"))
	_, err = e.CreateAt("x", 0o644)
	assert.ErrorIs(t, err, fs.ErrNotExist)
	_, err = e.MkdirAt("x", 0o755)
	assert.ErrorIs(t, err, fs.ErrNotExist)
	require.NoError(t, e.Close())

	require.NoError(t, d.Close())
	_, err = d.CreateAt("y", 0o644)
	assert.ErrorIs(t, err, fs.ErrClosed)
	ents, err := v.ReadDir("/d")
	require.NoError(t, err)
	assert.Len(t, ents, 2)
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, dev)

	v, err = ext4io.Open(dev, ext4io.Options{})
	require.NoError(t, err)
	d, err = v.Open("/d")
	require.NoError(t, err)
	_, err = d.CreateAt("z", 0o644)
	assert.ErrorIs(t, err, ext4io.ErrReadOnly)
	require.NoError(t, v.Close())
}

// TestCreateAtOExclPath checks the O_CREATE|O_EXCL path of OpenFile,
// which creates without resolving the name again: a new name is made,
// an existing one or a dangling symlink is refused.
func TestCreateAtOExclPath(t *testing.T) {
	t.Parallel()
	dev := memdev.New(32 << 20)
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{}))
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	require.NoError(t, err)
	require.NoError(t, v.Symlink("target", "/link"))
	_, err = v.OpenFile("/link", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	assert.ErrorIs(t, err, fs.ErrExist)
	_, err = v.Stat("/target")
	assert.ErrorIs(t, err, fs.ErrNotExist)
	_, err = v.OpenFile("/missing/x", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	assert.ErrorIs(t, err, fs.ErrNotExist)
	f, err := v.OpenFile("/new", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = v.OpenFile("/new", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	assert.ErrorIs(t, err, fs.ErrExist)
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, dev)
}
