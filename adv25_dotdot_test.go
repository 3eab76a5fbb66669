package ext4io_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestAdv25InlineDirNoParent: an inline-data directory whose parent
// pointer (the first word of i_block) is 0 has no "..". Renames that walk
// the ".." chain through it (rename's ancestry check) reported
// ErrNotExist, as if a name given were missing; they now fail with
// ErrCorrupt, as Linux's ext4_get_parent does ("bad parent inode number").
func TestAdv25InlineDirNoParent(t *testing.T) {
	img := filepath.Join(t.TempDir(), "img")
	e2fs.Mkfs(t, img, "8M", "-b", "1024", "-O", "inline_data,^has_journal")
	e2fs.DebugfsScript(t, img, true, []string{"mkdir d", "mkdir d/sub", "write /dev/null d/a", "sif d block[0] 0"})
	if out := e2fs.Debugfs(t, img, false, "stat d"); !strings.Contains(out, "Size of inline data") {
		t.Skipf("debugfs did not make d inline:\n%s", out)
	}
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	for _, r := range [][2]string{{"d/a", "d/sub/a"}, {"d/sub", "x"}} {
		if err := v.Rename(r[0], r[1]); !errors.Is(err, ext4io.ErrCorrupt) {
			t.Errorf("rename %s %s: %v, want ErrCorrupt", r[0], r[1], err)
		}
	}
}
