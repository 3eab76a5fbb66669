package ext4io_test

// Bigalloc images made by mkfs.ext4 open read-only and read back what
// debugfs dumps; writing is refused naming the feature. With 1 KiB blocks
// bigalloc sets s_first_data_block to 0, so the descriptor table follows
// the superblock's block 1, not s_first_data_block.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
)

func TestBigallocReadOnly(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		size string
		args []string
	}{
		{"1k-c16k", "64M", []string{"-O", "bigalloc", "-b", "1024", "-C", "16384"}},
		{"1k-c16k-metabg", "64M", []string{"-O", "bigalloc,meta_bg,^resize_inode", "-b", "1024", "-C", "16384"}},
		{"1k-c4k-metabg-2metagroups", "1G", []string{"-O", "bigalloc,meta_bg,^resize_inode", "-b", "1024", "-C", "4096"}},
		{"1k-c16k-4groups", "512M", []string{"-O", "bigalloc", "-b", "1024", "-C", "16384"}},
		{"4k-default", "256M", []string{"-O", "bigalloc", "-b", "4096"}},
		{"4k-c16k", "128M", []string{"-O", "bigalloc", "-b", "4096", "-C", "16384"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			img := filepath.Join(dir, "img")
			e2fs.Mkfs(t, img, tt.size, tt.args...)
			rng := rand.New(rand.NewPCG(1, uint64(len(tt.name))))
			sizes := []int{0, 11, 1024, 16384 + 7, 300000, 1 << 20}
			var cmds []string
			for i, n := range sizes {
				data := make([]byte, n)
				for j := range data {
					data[j] = byte(rng.Uint32())
				}
				host := filepath.Join(dir, fmt.Sprintf("h%d", i))
				if err := os.WriteFile(host, data, 0o644); err != nil {
					t.Fatal(err)
				}
				cmds = append(cmds, fmt.Sprintf("write %s f%d", host, i))
			}
			cmds = append(cmds, "mkdir d", fmt.Sprintf("write %s d/inner", filepath.Join(dir, "h4")))
			e2fs.DebugfsScript(t, img, true, cmds)
			e2fs.Fsck(t, img)

			v, err := ext4io.OpenImage(img, ext4io.Options{})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer v.Close()
			for i := range sizes {
				checkDump(t, v, img, fmt.Sprintf("f%d", i))
			}
			checkDump(t, v, img, "d/inner")

			_, err = ext4io.OpenImage(img, ext4io.Options{Writable: true})
			if !errors.Is(err, ext4io.ErrUnsupported) || !strings.Contains(fmt.Sprint(err), "bigalloc") {
				t.Fatalf("writable Open: %v, want ErrUnsupported naming bigalloc", err)
			}
		})
	}
}

// checkDump compares file name read through v with debugfs's dump of it.
func checkDump(t *testing.T, v *ext4io.Volume, img, name string) {
	t.Helper()
	want := e2fs.Dump(t, img, name)
	f, err := v.Open(name)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	defer f.Close()
	got, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<40))
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: read %d bytes, debugfs dumps %d; first difference at %d", name, len(got), len(want), firstDiff(got, want))
	}
}

// TestBigallocMMPRefusedAtOnce: a writable open of a bigalloc image with
// mmp is refused for bigalloc before the MMP protocol's wait, and leaves
// the MMP block clean.
func TestBigallocMMPRefusedAtOnce(t *testing.T) {
	// A wait far above the test binary's ext4io.MMPTestWait, so that a
	// refusal after the wait shows (sequential: SetMMPWait is global).
	defer ext4io.SetMMPWait(time.Minute)()
	img := filepath.Join(t.TempDir(), "img")
	e2fs.Mkfs(t, img, "64M", "-O", "bigalloc,mmp", "-b", "4096", "-C", "16384")
	start := time.Now()
	_, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	if !errors.Is(err, ext4io.ErrUnsupported) || !strings.Contains(err.Error(), "bigalloc") {
		t.Fatalf("writable Open: %v, want ErrUnsupported naming bigalloc", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("refusal took %v", d)
	}
	if seq := debugfsMMPSeq(t, img); seq != "ff4d4d50" {
		t.Fatalf("MMP sequence %s", seq)
	}
	v, err := ext4io.OpenImage(img, ext4io.Options{})
	if err != nil {
		t.Fatalf("read-only Open: %v", err)
	}
	v.Close()
}
