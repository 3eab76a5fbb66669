package ext4io_test

// Hostile images: crafted structures whose checksums are fixed up as an
// attacker would. Each must give an error wrapping ErrCorrupt, never a
// panic, a hang, or an I/O outside what the caller asked for.

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/ext4io/ext4io/layout"
)

// hostileImage builds an 8 MiB image (4 KiB blocks, metadata_csum, no
// journal) from a tree holding dir/ with the given file names.
func hostileImage(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(filepath.Join(src, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(src, "dir", n), []byte("data of "+n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	img := filepath.Join(dir, "img")
	e2fs.Mkfs(t, img, "8M", "-d", src, "-O", "^has_journal,metadata_csum", "-b", "4096")
	return img
}

// editDirBlock applies edit to logical block 0 of directory dir of img and
// fixes the block's checksum tail.
func editDirBlock(t *testing.T, img, dir string, edit func(b []byte)) {
	t.Helper()
	v, err := ext4io.OpenImage(img, ext4io.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := v.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	sb := v.Superblock()
	bs := v.BlockSize()
	v.Close()
	out := strings.TrimSpace(e2fs.Debugfs(t, img, false, fmt.Sprintf("bmap <%d> 0", fi.Ino)))
	pblk, err := strconv.ParseUint(out, 10, 64)
	if err != nil || pblk == 0 {
		t.Fatalf("bmap of %s: %q", dir, out)
	}
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, bs)
	if _, err := f.ReadAt(b, int64(pblk)*int64(bs)); err != nil {
		t.Fatal(err)
	}
	edit(b)
	if sb.MetadataCsum() && layout.HasDirTail(b) {
		layout.SetDirTail(layout.InodeSeed(sb.CsumSeed(), fi.Ino, fi.Generation), b)
	}
	if _, err := f.WriteAt(b, int64(pblk)*int64(bs)); err != nil {
		t.Fatal(err)
	}
}

// nameAt returns the offset of the entry whose name is name in block b.
func nameAt(t *testing.T, b []byte, name string) int {
	t.Helper()
	i := bytes.Index(b, []byte(name))
	if i < layout.DirEntryHeaderLen || int(b[i-2]) != len(name) {
		t.Fatalf("entry %q not found in the directory block", name)
	}
	return i - layout.DirEntryHeaderLen
}

// TestHostileDirNames: names read from disk that are empty, hold '/' or
// NUL, or are "." or ".." outside their slots are corruption (layout
// invariant L7), for listing, lookup and the namespace's writers alike.
func TestHostileDirNames(t *testing.T) {
	const victim = "victim_name" // 11 bytes, the length of the crafted names
	for _, tc := range []struct {
		name string
		edit func(t *testing.T, b []byte)
	}{
		{"dotdot-path", func(t *testing.T, b []byte) { copy(b[nameAt(t, b, victim)+8:], "../../tmp/x") }},
		{"slash", func(t *testing.T, b []byte) { copy(b[nameAt(t, b, victim)+8:], "a/b") }},
		{"nul", func(t *testing.T, b []byte) { b[nameAt(t, b, victim)+8+3] = 0 }},
		{"empty", func(t *testing.T, b []byte) { b[nameAt(t, b, victim)+6] = 0 }},
		{"dot-elsewhere", func(t *testing.T, b []byte) {
			off := nameAt(t, b, victim)
			b[off+6], b[off+8] = 1, '.'
		}},
		{"dotdot-elsewhere", func(t *testing.T, b []byte) {
			off := nameAt(t, b, victim)
			b[off+6] = 2
			copy(b[off+8:], "..")
		}},
		{"slot0-not-dot", func(t *testing.T, b []byte) { b[8] = 'x' }},
		{"slot1-not-dotdot", func(t *testing.T, b []byte) { b[12+8+1] = 'x' }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := hostileImage(t, "aaaa", victim, "zzzz")
			editDirBlock(t, img, "dir", func(b []byte) { tc.edit(t, b) })
			v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			ents, err := v.ReadDir("dir")
			if !errors.Is(err, ext4io.ErrCorrupt) {
				t.Errorf("ReadDir: %v, %v; want ErrCorrupt", ents, err)
			}
			if _, err := fs.ReadDir(v.FS(), "dir"); !errors.Is(err, ext4io.ErrCorrupt) {
				t.Errorf("FS.ReadDir: %v; want ErrCorrupt", err)
			}
			if _, err := v.Stat("dir/zzzz"); !errors.Is(err, ext4io.ErrCorrupt) {
				t.Errorf("Stat(dir/zzzz) past the bad entry: %v; want ErrCorrupt", err)
			}
			if _, err := v.Create("dir/new"); !errors.Is(err, ext4io.ErrCorrupt) {
				t.Errorf("Create(dir/new): %v; want ErrCorrupt", err)
			}
		})
	}
}

// TestHostileNegativeSize: an i_size with its top bit set is corruption
// on open and stat (Linux's iget: "bad i_size value"), not an empty file.
func TestHostileNegativeSize(t *testing.T) {
	img := hostileImage(t, "victim")
	e2fs.Debugfs(t, img, true, "sif dir/victim size 0x8000000000000010")
	v, err := ext4io.OpenImage(img, ext4io.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if fi, err := v.Stat("dir/victim"); !errors.Is(err, ext4io.ErrCorrupt) {
		t.Errorf("Stat: size %v, %v; want ErrCorrupt", fi, err)
	}
	if f, err := v.Open("dir/victim"); !errors.Is(err, ext4io.ErrCorrupt) {
		t.Errorf("Open: %v, %v; want ErrCorrupt", f, err)
	}
	if _, err := fs.ReadFile(v.FS(), "dir/victim"); !errors.Is(err, ext4io.ErrCorrupt) {
		t.Errorf("FS.ReadFile: %v; want ErrCorrupt", err)
	}
	// FS.ReadDir may read each entry's inode itself, or leave it to Info.
	ents, err := fs.ReadDir(v.FS(), "dir")
	if err != nil && !errors.Is(err, ext4io.ErrCorrupt) {
		t.Errorf("FS.ReadDir: %v; want ErrCorrupt or success", err)
	}
	for _, e := range ents {
		if _, err := e.Info(); !errors.Is(err, ext4io.ErrCorrupt) {
			t.Errorf("DirEntry(%s).Info: %v; want ErrCorrupt", e.Name(), err)
		}
	}
}
