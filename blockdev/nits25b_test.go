package blockdev_test

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/ext4io/ext4io/blockdev"
)

// unixOpens holds the constructors that exist on Unix only
// (nits25b_unix_test.go).
var unixOpens = map[string]func(string) error{}

// TestHostPathErrors checks the constructors report a missing path or a
// refused permission as the fs errors, not as ErrIO: the host file system
// answered, there was no I/O failure.
func TestHostPathErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nodir", "img")
	opens := map[string]func(string) error{
		"CreateFile": func(p string) error { _, err := blockdev.CreateFile(p, 1<<20); return err },
		"OpenFile":   func(p string) error { _, err := blockdev.OpenFile(p, false); return err },
	}
	maps.Copy(opens, unixOpens)
	for name, open := range opens {
		err := open(missing)
		if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, blockdev.ErrIO) {
			t.Errorf("%s with a missing parent = %v, want fs.ErrNotExist and not ErrIO", name, err)
		}
	}
	if os.Geteuid() == 0 || runtime.GOOS == "windows" {
		t.Log("permission checks skipped: root ignores file modes")
		return
	}
	locked := filepath.Join(dir, "locked")
	if err := os.Mkdir(locked, 0o500); err != nil {
		t.Fatal(err)
	}
	for name, open := range opens {
		err := open(filepath.Join(locked, "img"))
		if !errors.Is(err, fs.ErrPermission) || errors.Is(err, blockdev.ErrIO) {
			t.Errorf("%s in a read-only directory = %v, want fs.ErrPermission and not ErrIO", name, err)
		}
	}
}
