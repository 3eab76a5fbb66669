package ext4io_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/ext4iotest"
)

// adv22bLinuxTree fills mnt, a Linux mount, with the directory shapes Linux
// makes: deep trees, directories moved between parents, an htree
// directory of thousands of subdirectories, a directory renamed over an
// empty one, RENAME_EXCHANGE of two directories in different parents and
// a directory renamed while open. big gets nsub subdirectories.
func adv22bLinuxTree(t *testing.T, mnt string, nsub int) {
	p := func(s ...string) string { return filepath.Join(append([]string{mnt}, s...)...) }
	require.NoError(t, os.MkdirAll(p("a", "b", "c", "d", "e", "f", "g", "h"), 0o755))
	for _, d := range []string{"x", "y", "s", "t", "p1", "p2", "big"} {
		require.NoError(t, os.Mkdir(p(d), 0o755))
	}
	require.NoError(t, os.MkdirAll(p("x", "m", "n"), 0o755))
	require.NoError(t, os.WriteFile(p("x", "m", "n", "f"), []byte("f"), 0o644))
	require.NoError(t, os.Rename(p("x", "m"), p("y", "m")))
	require.NoError(t, os.Mkdir(p("s", "in"), 0o755))
	require.NoError(t, unix.Rename(p("s"), p("t"))) // over an empty directory
	require.NoError(t, os.Mkdir(p("p1", "q1"), 0o755))
	require.NoError(t, os.Mkdir(p("p2", "q2"), 0o755))
	require.NoError(t, os.Mkdir(p("p2", "q2", "r"), 0o755))
	require.NoError(t, unix.Renameat2(unix.AT_FDCWD, p("p1", "q1"), unix.AT_FDCWD, p("p2", "q2"), unix.RENAME_EXCHANGE))
	for i := range nsub {
		require.NoError(t, os.Mkdir(p("big", fmt.Sprintf("subdirectory-%05d", i)), 0o755))
	}
	require.NoError(t, os.Rename(p("big", "subdirectory-00007"), p("a", "b", "moved")))
	require.NoError(t, os.Rename(p("a", "b", "c"), p("big", "c")))
	f, err := os.Open(p("y", "m"))
	require.NoError(t, err)
	require.NoError(t, os.Rename(p("y", "m"), p("p1", "mm")))
	require.NoError(t, f.Close())
}

// adv22bWalkAll opens and stats every name under the root of v.
func adv22bWalkAll(t *testing.T, v *ext4io.Volume) int {
	n := 0
	err := fs.WalkDir(v.FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		n++
		if _, err := v.Stat(path); err != nil {
			return err
		}
		if d.IsDir() {
			f, err := v.Open(path)
			if err != nil {
				return err
			}
			return f.Close()
		}
		return nil
	})
	require.NoError(t, err)
	return n
}

// TestAdv22bLinuxDirectories: directories Linux made and moved are read
// and renamed without a false ErrCorrupt, with and without inline data or
// an htree, and read when block-mapped (ext3's layout). With dir_index,
// big's 3000 subdirectories make an htree; without it, 400 make a linear
// directory of a dozen 1 KiB blocks: each walk looks every name up from
// the root, a scan of the linear directory, so its cost grows with the
// square of the names.
func TestAdv22bLinuxDirectories(t *testing.T) {
	t.Parallel()
	for _, feat := range []string{"^inline_data", "inline_data", "^dir_index", "^extent,^64bit,^flex_bg,^metadata_csum"} {
		t.Run(feat, func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "img")
			ext4iotest.Mkfs(t, img, "64M", "-O", feat)
			mnt := ext4iotest.Mount(t, img, false)
			nsub := 3000
			if feat == "^dir_index" {
				nsub = 400
			}
			adv22bLinuxTree(t, mnt, nsub)
			ext4iotest.Unmount(t, mnt)
			ext4iotest.Fsck(t, img)

			v, err := ext4io.OpenImage(img, ext4io.Options{})
			require.NoError(t, err)
			adv22bWalkAll(t, v)
			require.NoError(t, v.Close())
			if strings.HasPrefix(feat, "^extent") {
				return // ext4io changes no block-mapped directory (ErrUnsupported)
			}

			v, err = ext4io.OpenImage(img, ext4io.Options{Writable: true})
			require.NoError(t, err)
			// Directories in different parents, each not loaded yet.
			require.NoError(t, v.Rename("p2/q2", "x/q1"))
			require.NoError(t, v.Rename("p1/q1", "y/q2"))
			require.NoError(t, v.Rename2("x/q1", "a/b/moved", ext4io.RENAME_EXCHANGE))
			require.NoError(t, v.Mkdir("p1/new", 0o755))
			require.NoError(t, v.Rename("p1/new", "big/new"))
			require.NoError(t, v.Rename("big/c", "t/c"))
			adv22bWalkAll(t, v)
			require.NoError(t, v.Close())
			ext4iotest.Fsck(t, img)
			v, err = ext4io.OpenImage(img, ext4io.Options{})
			require.NoError(t, err)
			adv22bWalkAll(t, v)
			require.NoError(t, v.Close())
		})
	}
}
