package fusefs_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ext4io/ext4io/fusefs"
)

// TestAdv22bMountDirectoryMoves: through the kernel, directories made
// deep, moved between parents (rename, rename over an empty directory,
// RENAME_EXCHANGE across parents, moved while open) and walked by other
// goroutines meanwhile: no lookup fails with anything but ENOENT (a
// directory taken for a hard link would be EIO/EUCLEAN), and the image
// stays e2fsck clean.
func TestAdv22bMountDirectoryMoves(t *testing.T) {
	needFUSE(t)
	img := newImage(t, 64<<20)
	m := mount(t, img, fusefs.Options{})
	check(t, os.MkdirAll(m.path("A/d/e/f/g"), 0o755))
	check(t, os.MkdirAll(m.path("B/o/p"), 0o755))
	check(t, os.MkdirAll(m.path("C"), 0o755))
	check(t, os.WriteFile(m.path("A/d/e/file"), []byte("x"), 0o644))

	var stop atomic.Bool
	var (
		badMu sync.Mutex
		bad   error // the first unexpected error
	)
	ok := func(err error) {
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			badMu.Lock()
			if bad == nil {
				bad = err
			}
			badMu.Unlock()
		}
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
				ok(filepath.WalkDir(m.dir, func(p string, d fs.DirEntry, err error) error {
					ok(err)
					return nil
				}))
				for _, p := range []string{"A/d/e/f", "B/d/e/f", "C/d/e", "B/o/p", "A/o/p", "C/o"} {
					_, err := os.Stat(m.path(p))
					ok(err)
				}
			}
		})
	}
	open, err := os.Open(m.path("A/d/e"))
	check(t, err)
	// must records an error the renames must not meet; the loop stops
	// at the first, and the walkers with it, before the test fails.
	must := func(err error) {
		if err != nil {
			badMu.Lock()
			if bad == nil {
				bad = err
			}
			badMu.Unlock()
		}
	}
	failed := func() bool {
		badMu.Lock()
		defer badMu.Unlock()
		return bad != nil
	}
	for i := 0; i < 100 && !failed(); i++ {
		must(os.Rename(m.path("A/d"), m.path("B/d")))
		ok(unix.Renameat2(unix.AT_FDCWD, m.path("B/d"), unix.AT_FDCWD, m.path("C/o"), unix.RENAME_EXCHANGE)) // no C/o: ENOENT
		must(unix.Renameat2(unix.AT_FDCWD, m.path("B/d"), unix.AT_FDCWD, m.path("B/o"), unix.RENAME_EXCHANGE))
		must(os.Rename(m.path("B/o"), m.path("C/o")))
		must(unix.Renameat2(unix.AT_FDCWD, m.path("B/d"), unix.AT_FDCWD, m.path("C/o"), unix.RENAME_EXCHANGE))
		must(os.Mkdir(m.path(fmt.Sprintf("C/empty%d", i)), 0o755))
		must(unix.Rename(m.path("B/d"), m.path(fmt.Sprintf("C/empty%d", i)))) // over an empty directory
		must(os.Rename(m.path(fmt.Sprintf("C/empty%d", i)), m.path("A/d")))
		must(os.Rename(m.path("C/o"), m.path("B/o")))
		names, err := open.Readdirnames(-1)
		must(err)
		if len(names) != 2 {
			must(fmt.Errorf("the open directory lists %v", names))
		}
		_, err = open.Seek(0, 0)
		must(err)
	}
	stop.Store(true)
	wg.Wait()
	check(t, open.Close())
	if err := bad; err != nil {
		t.Fatalf("through the kernel, during directory moves: %v", err)
	}
	_, err = os.Stat(m.path("A/d/e/file"))
	check(t, err)
	m.unmount()
	e2fsck(t, img)
}
