package ext4io_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/ext4io/ext4io/layout"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHostileRenameDotDotRefusedWhole: moving a directory whose ".." block
// is damaged (the ".." name overwritten, checksum fixed up) to another
// parent, by RENAME_EXCHANGE either way round or by a plain rename, fails
// with ErrCorrupt before it changes anything: on a volume without a
// journal a half-done swap would stay on disk. Both names keep their
// inodes, in the open volume and in the image after Close.
func TestHostileRenameDotDotRefusedWhole(t *testing.T) {
	for _, tc := range []struct {
		name     string
		old, new string
		flags    uint
	}{
		{"exchange damaged first", "a/x", "b/y", ext4io.RENAME_EXCHANGE},
		{"exchange damaged second", "b/y", "a/x", ext4io.RENAME_EXCHANGE},
		{"exchange two directories", "a/x", "b/d", ext4io.RENAME_EXCHANGE},
		{"rename", "a/x", "b/z", 0},
		{"rename over empty directory", "a/x", "b/d", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src := filepath.Join(dir, "src")
			require.NoError(t, os.MkdirAll(filepath.Join(src, "a", "x", "sub"), 0o755))
			require.NoError(t, os.MkdirAll(filepath.Join(src, "b", "d"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(src, "b", "y"), []byte("y"), 0o644))
			img := filepath.Join(dir, "img")
			e2fs.Mkfs(t, img, "8M", "-d", src, "-O", "^has_journal,metadata_csum", "-b", "4096")
			editDirBlock(t, img, "a/x", func(b []byte) {
				require.Equal(t, "..", string(b[12+8:12+10]))
				copy(b[12+8:], "zz")
			})
			v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true, Tuning: ext4io.Tuning{NoJournal: true}})
			require.NoError(t, err)
			inos := map[string]uint32{}
			for _, n := range []string{"a/x", "b/y", "b/d"} {
				fi, err := v.Lstat(n)
				require.NoError(t, err)
				inos[n] = fi.Ino
			}
			err = within(t, "Rename2", func() error { return v.Rename2(tc.old, tc.new, tc.flags) })
			require.ErrorIs(t, err, ext4io.ErrCorrupt)
			check := func(v *ext4io.Volume, when string) {
				for n, ino := range inos {
					fi, err := v.Lstat(n)
					if assert.NoError(t, err, "%s: %s", when, n) {
						assert.Equal(t, ino, fi.Ino, "%s: %s names another inode", when, n)
					}
				}
				_, err := v.Lstat("b/z")
				assert.ErrorIs(t, err, os.ErrNotExist, "%s: b/z", when)
			}
			check(v, "open volume")
			within(t, "Close", v.Close)
			ro, err := ext4io.OpenImage(img, ext4io.Options{})
			require.NoError(t, err)
			defer ro.Close()
			check(ro, "image after Close")
		})
	}
}

// TestRenameDirDotDotKinds: moving directories of every kind of block 0
// to another parent, by rename and by RENAME_EXCHANGE, rewrites their ".."
// as e2fsck expects: a linear directory, an htree directory (".." in the
// dx root, whose dx tail carries the checksum) and an inline one.
func TestRenameDirDotDotKinds(t *testing.T) {
	for _, feat := range []string{"inline_data", "^metadata_csum,inline_data"} {
		t.Run(feat, func(t *testing.T) {
			dir := t.TempDir()
			src := filepath.Join(dir, "src")
			for _, d := range []string{"a/lin", "a/dx", "a/inl", "b/lin2", "b/dx2", "c"} {
				require.NoError(t, os.MkdirAll(filepath.Join(src, d), 0o755))
			}
			img := filepath.Join(dir, "img")
			e2fs.Mkfs(t, img, "16M", "-d", src, "-O", feat, "-b", "4096")
			v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
			require.NoError(t, err)
			for i := range 100 {
				for _, d := range []string{"a/lin", "a/dx", "b/dx2"} {
					if d == "a/lin" && i >= 3 {
						continue
					}
					require.NoError(t, v.WriteFile(d+"/"+strings.Repeat("n", 100)+strconv.Itoa(i), nil, 0o644))
				}
			}
			for _, d := range []string{"a/dx", "b/dx2"} {
				fi, err := v.Stat(d)
				require.NoError(t, err)
				require.NotZero(t, fi.Flags&layout.InodeFlagIndex, "%s is not an htree", d)
			}
			fi, err := v.Stat("a/inl")
			require.NoError(t, err)
			if strings.HasPrefix(feat, "inline") {
				require.NotZero(t, fi.Flags&layout.InodeFlagInlineData, "a/inl is not inline")
			}
			require.NoError(t, v.Rename("a/lin", "c/lin"))
			require.NoError(t, v.Rename("a/inl", "c/inl"))
			require.NoError(t, v.Rename2("a/dx", "b/lin2", ext4io.RENAME_EXCHANGE))
			require.NoError(t, v.Rename2("c/inl", "b/dx2", ext4io.RENAME_EXCHANGE))
			require.NoError(t, v.Close())
			e2fs.Fsck(t, img)
			ro, err := ext4io.OpenImage(img, ext4io.Options{})
			require.NoError(t, err)
			defer ro.Close()
			for _, n := range []string{"c/lin/..", "b/lin2/..", "a/dx/..", "b/dx2/..", "c/inl/.."} {
				want := filepath.Dir(filepath.Dir(n))
				got, err := ro.Stat(n)
				require.NoError(t, err)
				w, err := ro.Stat(want)
				require.NoError(t, err)
				assert.Equal(t, w.Ino, got.Ino, "%s", n)
			}
		})
	}
}
