package ext4io_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ext4io/ext4io"
)

// TestOpenNotExt4: a file that holds no ext4 (other bytes, or too small
// for a superblock) is reported as such: ErrNotExt4 (and ErrCorrupt),
// never an I/O error.
func TestOpenNotExt4(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string][]byte{
		"junk":  []byte(strings.Repeat("not a file system ", 1<<12)),
		"zero":  make([]byte, 1<<20),
		"tiny":  []byte("x"),
		"empty": nil,
	} {
		img := filepath.Join(dir, name)
		if err := os.WriteFile(img, data, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, opts := range []ext4io.Options{{}, {Writable: true}} {
			_, err := ext4io.OpenImage(img, opts)
			if !errors.Is(err, ext4io.ErrNotExt4) || !errors.Is(err, ext4io.ErrCorrupt) || errors.Is(err, ext4io.ErrIO) {
				t.Errorf("%s (writable %v): %v, want ErrNotExt4 and ErrCorrupt, not ErrIO", name, opts.Writable, err)
			}
		}
	}
}
