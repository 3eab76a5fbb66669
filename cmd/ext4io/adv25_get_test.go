//go:build unix

package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestAdv25GetSharedBlocks: a crafted image whose files' extents map the
// same physical blocks again and again (e2fsck's multiply-claimed blocks)
// makes every copy of those blocks a write on the host: a few KiB of
// extent entries in a 2 MiB image can stand for terabytes. get refuses,
// as corrupt, a run that would copy more data blocks than the image has
// (ext4 shares no block between files; hard links are made as links)
// before it writes them: in one file, and spread over two files that are
// each below the bound.
func TestAdv25GetSharedBlocks(t *testing.T) {
	for _, files := range [][]string{{"a"}, {"a", "b"}} {
		t.Run(fmt.Sprint(len(files)), func(t *testing.T) {
			dir := t.TempDir()
			src := filepath.Join(dir, "src")
			os.Mkdir(src, 0o755)
			data := make([]byte, 900<<10)
			for i := range data {
				data[i] = byte(i*7 + i>>10)
			}
			os.WriteFile(filepath.Join(src, "a"), data, 0o644)
			os.WriteFile(filepath.Join(src, "b"), []byte("b"), 0o644)
			img := filepath.Join(dir, "img")
			e2fs.Mkfs(t, img, "2M", "-b", "1024", "-O", "^has_journal", "-d", src)
			// The longest extent of a, [p, p+l).
			v, err := ext4io.OpenImage(img, ext4io.Options{})
			if err != nil {
				t.Fatal(err)
			}
			f, err := v.Open("a")
			if err != nil {
				t.Fatal(err)
			}
			exts, err := f.Extents()
			blocks := v.Superblock().BlocksCount
			v.Close()
			if err != nil {
				t.Fatal(err)
			}
			var p, l uint64
			for _, x := range exts {
				if x.Length > l {
					p, l = x.Physical, x.Length
				}
			}
			// Each file maps [p, p+l) copies times, together more than the
			// image's blocks.
			copies := blocks/l/uint64(len(files)) + 1
			if len(files) > 1 && copies*l > blocks {
				t.Fatalf("extent of %d blocks: one file alone would pass the bound", l)
			}
			if copies > 4 {
				t.Fatalf("extent of %d blocks: %d copies do not fit in i_block", l, copies)
			}
			for _, name := range files {
				words := []uint64{0xf30a | copies<<16, 4, 0}
				for i := range copies {
					words = append(words, i*l, l, p)
				}
				var script []string
				for i, w := range words {
					field := fmt.Sprintf("block[%d]", i)
					switch i {
					case 12:
						field = "block[IND]"
					case 13:
						field = "block[DIND]"
					case 14:
						field = "block[TIND]"
					}
					script = append(script, fmt.Sprintf("sif /%s %s %d", name, field, w))
				}
				script = append(script, fmt.Sprintf("sif /%s size %d", name, copies*l*1024))
				e2fs.DebugfsScript(t, img, true, script)
			}
			dst, err := getConfined(t, img, "/")
			if !errors.Is(err, ext4io.ErrCorrupt) {
				t.Errorf("get of %d files mapping %d blocks %d times each, in a %d-block image: %v, want ErrCorrupt",
					len(files), l, copies, blocks, err)
			}
			var written int64
			filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					if fi, err := d.Info(); err == nil {
						written += fi.Sys().(*syscall.Stat_t).Blocks * 512
					}
				}
				return nil
			})
			if written > int64(blocks)*1024 {
				t.Errorf("%d bytes written on the host from a %d-block image", written, blocks)
			}
		})
	}
}
