//go:build linux

package ext4io_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/ext4iotest"
)

// TestAdv22bRenameDirRacesLookups: a directory moving between two parents
// (Rename back and forth, RENAME_EXCHANGE with a directory of the other
// parent, a subdirectory made and removed in it) while other goroutines
// look it up by path, by its children and through ReadDir: a lookup sees
// the directory or not, never a directory hard link (ErrCorrupt).
func TestAdv22bRenameDirRacesLookups(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	require.NoError(t, os.MkdirAll(filepath.Join(src, "A", "d", "e"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(src, "B", "o", "e"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "A", "d", "f"), []byte("f"), 0o644))
	img := filepath.Join(dir, "img")
	ext4iotest.Mkfs(t, img, "16M", "-d", src)
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	require.NoError(t, err)

	var stop atomic.Bool
	var (
		badMu sync.Mutex
		bad   error // the first unexpected error
	)
	check := func(err error) {
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			badMu.Lock()
			if bad == nil {
				bad = err
			}
			badMu.Unlock()
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		defer stop.Store(true)
		for i := range 100 {
			check(v.Rename("A/d", "B/d"))
			check(v.Mkdir("B/d/n", 0o755))
			check(v.Rename2("B/d", "A/o", ext4io.RENAME_EXCHANGE)) // no A/o: ErrNotExist
			check(v.Rename2("B/d", "B/o", ext4io.RENAME_EXCHANGE))
			check(v.Rename2("B/d", "B/o", ext4io.RENAME_EXCHANGE))
			check(v.Rmdir("B/d/n"))
			check(v.Rename("B/d", "A/d"))
			if i%2 == 0 {
				check(v.Rename2("A/d", "B/o", ext4io.RENAME_EXCHANGE))
				check(v.Rename2("A/d", "B/o", ext4io.RENAME_EXCHANGE))
			}
		}
	})
	for _, p := range []string{"A/d", "B/d", "A/d/e", "B/d/e", "A/d/f", "B/o/e", "A/o", "A/d/n", "B/d/n"} {
		wg.Go(func() {
			for !stop.Load() {
				_, err := v.Stat(p)
				check(err)
				if f, err := v.Open(p); err == nil {
					require.NoError(t, f.Close())
				} else {
					check(err)
				}
			}
		})
	}
	for _, p := range []string{"A", "B"} {
		wg.Go(func() {
			for !stop.Load() {
				_, err := v.ReadDir(p)
				check(err)
			}
		})
	}
	wg.Wait()
	if err := bad; err != nil {
		t.Fatalf("a lookup during renames failed: %v", err)
	}
	require.NoError(t, v.Close())
	ext4iotest.Fsck(t, img)
	v, err = ext4io.OpenImage(img, ext4io.Options{})
	require.NoError(t, err)
	adv22bWalkAll(t, v)
	assert.NoError(t, v.Close())
}
