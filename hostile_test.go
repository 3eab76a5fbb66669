package ext4io_test

// Hostile images: crafted structures whose checksums are fixed up as an
// attacker would. Each must give an error wrapping ErrCorrupt, never a
// panic, a hang, or an I/O outside what the caller asked for.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/extent"
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/ext4io/ext4io/iomap"
	"github.com/ext4io/ext4io/layout"
	"github.com/stretchr/testify/require"
)

// hostileImage builds an 8 MiB image (4 KiB blocks, metadata_csum, no
// journal) from a tree holding dir/ with the given file names.
func hostileImage(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	require.NoError(t, os.MkdirAll(filepath.Join(src, "dir"), 0o755))
	for _, n := range names {
		require.NoError(t, os.WriteFile(filepath.Join(src, "dir", n), []byte("data of "+n), 0o644))
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
	require.NoError(t, err)
	fi, err := v.Stat(dir)
	require.NoError(t, err)
	sb := v.Superblock()
	bs := v.BlockSize()
	v.Close()
	out := strings.TrimSpace(e2fs.Debugfs(t, img, false, fmt.Sprintf("bmap <%d> 0", fi.Ino)))
	pblk, err := strconv.ParseUint(out, 10, 64)
	if err != nil || pblk == 0 {
		t.Fatalf("bmap of %s: %q", dir, out)
	}
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	require.NoError(t, err)
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
			require.NoError(t, err)
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
	require.NoError(t, err)
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

// TestHostileDirSize: a directory whose i_size reaches far past its last
// mapped block is corruption (e2fsck: "incorrect i_size"), found at once
// instead of after a block-by-block walk through the hole; and a legal
// directory with a large hole before its last block is walked a run at a
// time.
func TestHostileDirSize(t *testing.T) {
	for _, size := range []string{"0x10000000000", "0x1000000000000000"} { // 1 TiB, 2^60
		t.Run(size, func(t *testing.T) {
			img := hostileImage(t, "victim")
			e2fs.Debugfs(t, img, true, "sif dir size "+size)
			v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
			require.NoError(t, err)
			hung := false
			defer func() {
				if !hung { // a hung operation may hold the directory's lock
					v.Close()
				}
			}()
			for _, op := range []struct {
				name string
				fn   func() error
			}{
				{"ReadDir", func() error { _, err := v.ReadDir("dir"); return err }},
				{"Stat", func() error { _, err := v.Stat("dir/nothere"); return err }},
				{"Mkdir", func() error { return v.Mkdir("dir/sub", 0o755) }},
				{"Create", func() error { _, err := v.Create("dir/new"); return err }},
			} {
				var err error
				if !guarded(t, op.name, 5*time.Second, func() { err = op.fn() }) {
					hung = true
					return
				}
				if !errors.Is(err, ext4io.ErrCorrupt) {
					t.Errorf("%s in a directory of size %s: %v; want ErrCorrupt", op.name, size, err)
				}
			}
		})
	}
}

// TestDirHoleWalkedByRuns: a directory whose second block sits 2^31 blocks
// past its first (a hole Linux tolerates, i_size consistent) is listed,
// searched and extended a mapped run at a time, not block by block.
func TestDirHoleWalkedByRuns(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.MkdirAll(filepath.Join(src, "dir"), 0o755)
	var names []string
	for i := range 150 {
		n := fmt.Sprintf("file_with_a_rather_long_name_%04d", i)
		names = append(names, n)
		os.WriteFile(filepath.Join(src, "dir", n), nil, 0o644)
	}
	img := filepath.Join(dir, "img")
	e2fs.Mkfs(t, img, "8M", "-d", src, "-O", "^has_journal,^dir_index", "-b", "4096")
	ex := e2fs.Extents(t, img, "dir")
	if len(ex) != 1 || ex[0].Length != 2 {
		t.Skipf("dir is not one extent of 2 blocks: %+v", ex)
	}
	const far = 1 << 31
	p := ex[0].Physical
	e2fs.DebugfsScript(t, img, true, []string{
		"sif dir block[0] 0x0002F30A", // two entries
		"sif dir block[4] 1",          // [0, +1) at p
		fmt.Sprintf("sif dir block[6] %d", far),
		"sif dir block[7] 1",
		fmt.Sprintf("sif dir block[8] %d", p+1), // [far, +1) at p+1
		fmt.Sprintf("sif dir size %d", (far+1)*4096),
	})
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	ok := guarded(t, "walk", 10*time.Second, func() {
		ents, err := v.ReadDir("dir")
		if err != nil || len(ents) != len(names) {
			t.Errorf("ReadDir: %d entries, %v; want %d", len(ents), err, len(names))
		}
		if _, err := v.Stat("dir/" + names[len(names)-1]); err != nil {
			t.Errorf("Stat of a name in the far block: %v", err)
		}
		if _, err := v.Stat("dir/nothere"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Stat(dir/nothere): %v; want ErrNotExist", err)
		}
		if f, err := v.Create("dir/new"); err != nil {
			t.Errorf("Create: %v", err)
		} else {
			f.Close()
		}
		if err := v.Unlink("dir/" + names[len(names)-1]); err != nil {
			t.Errorf("Unlink of a name in the far block: %v", err)
		}
	})
	if ok { // a hung walk may hold the directory's lock
		v.Close()
	}
}

// TestHostileInodeBitmap: an inode bitmap that marks a live inode free
// must not make create reuse it (Linux: "doubly allocated?"), whether
// the inode is in use on disk (the allocator reads its slot) or open here
// and unlinked (the inode cache knows it).
func TestHostileInodeBitmap(t *testing.T) {
	for _, open := range []bool{false, true} {
		t.Run(fmt.Sprintf("open=%v", open), func(t *testing.T) {
			img := hostileImage(t, "victim", "other")
			v, err := ext4io.OpenImage(img, ext4io.Options{})
			require.NoError(t, err)
			fi, err := v.Stat("dir/victim")
			require.NoError(t, err)
			v.Close()
			// An attacker keeps the counts consistent with the bitmap.
			out := e2fs.Debugfs(t, img, false, "stats")
			var free int
			if i := strings.Index(out, "free inodes, "); i < 0 {
				t.Fatalf("no free inode count in debugfs stats:\n%s", out)
			} else {
				j := strings.LastIndex(out[:i], ", ")
				free, _ = strconv.Atoi(strings.TrimSpace(out[j+2 : i]))
			}
			e2fs.DebugfsScript(t, img, true, []string{
				fmt.Sprintf("freei <%d>", fi.Ino),
				fmt.Sprintf("set_bg 0 free_inodes_count %d", free+1),
				"set_bg 0 checksum calc",
			})
			v, err = ext4io.OpenImage(img, ext4io.Options{Writable: true})
			require.NoError(t, err)
			if open {
				// Unlinked second, the victim's i_dtime links it to the
				// other orphan: on disk it then looks deleted (links 0,
				// dtime set), and only the inode cache knows it is live.
				for _, name := range []string{"dir/other", "dir/victim"} {
					f, err := v.OpenFile(name, os.O_RDWR, 0)
					require.NoError(t, err)
					defer f.Close()
					require.NoError(t, v.Unlink(name))
				}
			}
			// The allocation itself must refuse, before the inode is
			// written over.
			nf, err := v.Create("dir/new")
			var ce *ext4io.CorruptError
			if !errors.As(err, &ce) || ce.What != "inode bitmap" || ce.Ino != fi.Ino {
				t.Errorf("Create: %v; want ErrCorrupt from the inode bitmap naming inode %d", err, fi.Ino)
			}
			if err == nil {
				nf.Close()
			}
			if !open {
				if b, err := fs.ReadFile(v.FS(), "dir/victim"); err != nil || string(b) != "data of victim" {
					t.Errorf("victim after create: %q, %v", b, err)
				}
			}
			v.Close()
		})
	}
}

// zoneImage builds a 16 MiB image (4 KiB blocks, metadata_csum, with a
// journal) holding dir/victim with five one-block extents, so that its
// extent tree has a leaf block. It returns the image, the victim's inode
// number and generation, and its tree blocks.
func zoneImage(t *testing.T) (img string, ino, gen uint32, tree []uint64) {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.MkdirAll(filepath.Join(src, "dir"), 0o755)
	f, err := os.Create(filepath.Join(src, "dir", "victim"))
	require.NoError(t, err)
	for i := range 5 {
		f.WriteAt(bytes.Repeat([]byte{byte('a' + i)}, 4096), int64(i)<<20)
	}
	f.Close()
	img = filepath.Join(dir, "img")
	e2fs.Mkfs(t, img, "16M", "-d", src, "-O", "metadata_csum", "-b", "4096")
	tree = e2fs.TreeBlocks(t, img, "dir/victim")
	if len(tree) != 1 {
		t.Skipf("victim has tree blocks %v, want one leaf", tree)
	}
	v, err := ext4io.OpenImage(img, ext4io.Options{})
	require.NoError(t, err)
	defer v.Close()
	fi, err := v.Stat("dir/victim")
	require.NoError(t, err)
	return img, fi.Ino, fi.Generation, tree
}

// TestHostileExtentIntoMetadata: extents (and extent-tree index entries)
// that point into file-system metadata, a system zone as Linux's
// block_validity keeps it, are corruption on every path: buffered and
// direct reads and writes, the overwrite fast path and fiemap. Nothing is
// read from or written to the metadata.
func TestHostileExtentIntoMetadata(t *testing.T) {
	targets := []struct {
		name string
		blk  func(t *testing.T, v *ext4io.Volume) uint64
	}{
		{"descriptors", func(t *testing.T, v *ext4io.Volume) uint64 { return 1 }},
		{"reserved-gdt", func(t *testing.T, v *ext4io.Volume) uint64 { return 2 }},
		{"inode-table", func(t *testing.T, v *ext4io.Volume) uint64 {
			gd, _ := v.Group(0)
			return gd.InodeTable // holds the root inode
		}},
		{"block-bitmap", func(t *testing.T, v *ext4io.Volume) uint64 { gd, _ := v.Group(0); return gd.BlockBitmap }},
		{"journal", nil}, // the journal inode's block 3, from debugfs
	}
	for _, tg := range targets {
		t.Run("leaf-extent-into-"+tg.name, func(t *testing.T) {
			img, ino, gen, tree := zoneImage(t)
			v, err := ext4io.OpenImage(img, ext4io.Options{})
			require.NoError(t, err)
			sb := v.Superblock()
			var target uint64
			if tg.name == "journal" {
				out := strings.TrimSpace(e2fs.Debugfs(t, img, false, "bmap <8> 3"))
				target, _ = strconv.ParseUint(out, 10, 64)
			} else {
				target = tg.blk(t, v)
			}
			v.Close()
			if target == 0 {
				t.Fatal("no target block")
			}
			// Point the leaf's first extent (logical block 0) at target.
			leaf := readBlocks(t, img, tree[0], 1)
			binary.LittleEndian.PutUint16(leaf[12+6:], 0)
			binary.LittleEndian.PutUint32(leaf[12+8:], uint32(target))
			extent.SetBlockChecksum(leaf, extent.InodeSeed(sb.CsumSeed(), ino, gen))
			writeBlock(t, img, tree[0], leaf)
			before := readBlocks(t, img, target, 1)

			v, err = ext4io.OpenImage(img, ext4io.Options{Writable: true})
			require.NoError(t, err)
			ops := []struct {
				name string
				fn   func() error
			}{
				{"ReadAt", func() error {
					f, err := v.OpenFile("dir/victim", os.O_RDWR, 0)
					if err != nil {
						return err
					}
					defer f.Close()
					b := make([]byte, 4096)
					_, err = f.ReadAt(b, 0)
					if err == nil && bytes.Equal(b, before) {
						t.Errorf("ReadAt returned the metadata block's bytes")
					}
					return err
				}},
				{"Fiemap", func() error {
					f, err := v.OpenFile("dir/victim", os.O_RDWR, 0)
					if err != nil {
						return err
					}
					defer f.Close()
					return f.Fiemap(0, 1<<30, func(iomap.Extent) error { return nil })
				}},
				{"WriteAt", func() error {
					f, err := v.OpenFile("dir/victim", os.O_RDWR, 0)
					if err != nil {
						return err
					}
					defer f.Close()
					if _, err := f.WriteAt(bytes.Repeat([]byte{'X'}, 4096), 0); err != nil {
						return err
					}
					return f.Sync()
				}},
				{"direct WriteAt", func() error {
					f, err := v.OpenFile("dir/victim", os.O_RDWR|ext4io.O_DIRECT, 0)
					if err != nil {
						return err
					}
					defer f.Close()
					_, err = f.WriteAt(bytes.Repeat([]byte{'Y'}, 4096), 0)
					return err
				}},
				{"direct ReadAt", func() error {
					f, err := v.OpenFile("dir/victim", os.O_RDWR|ext4io.O_DIRECT, 0)
					if err != nil {
						return err
					}
					defer f.Close()
					_, err = f.ReadAt(make([]byte, 4096), 0)
					return err
				}},
			}
			for _, op := range ops {
				if err := op.fn(); !errors.Is(err, ext4io.ErrCorrupt) {
					t.Errorf("%s of an extent into the %s (block %d): %v; want ErrCorrupt", op.name, tg.name, target, err)
				}
			}
			v.Close()
			if after := readBlocks(t, img, target, 1); !bytes.Equal(before, after) {
				t.Errorf("block %d (%s) changed", target, tg.name)
			}
		})
	}

	// An index entry of the root pointing at a metadata block that holds
	// a valid copy of the leaf.
	t.Run("index-into-reserved-gdt", func(t *testing.T) {
		img, _, _, tree := zoneImage(t)
		const target = 2 // a reserved GDT block
		writeBlock(t, img, target, readBlocks(t, img, tree[0], 1))
		e2fs.Debugfs(t, img, true, fmt.Sprintf("sif dir/victim block[4] %d", target))
		v, err := ext4io.OpenImage(img, ext4io.Options{})
		require.NoError(t, err)
		defer v.Close()
		if _, err := fs.ReadFile(v.FS(), "dir/victim"); !errors.Is(err, ext4io.ErrCorrupt) {
			t.Errorf("ReadFile through an index block in the reserved GDT: %v; want ErrCorrupt", err)
		}
	})
}

// TestBrokenJournalInodeZone: a journal inode whose mapping is corrupt
// cannot give the system zone its blocks. A writable open fails, as
// Linux's mount does; a read-only open that needs no replay does not use
// the journal and still reads the files.
func TestBrokenJournalInodeZone(t *testing.T) {
	img := hostileImage(t, "victim")
	e2fs.Mkfs(t, img, "8M", "-O", "has_journal,metadata_csum", "-b", "4096", "-d", filepath.Join(filepath.Dir(img), "src"))
	e2fs.Debugfs(t, img, true, "sif <8> block[5] 12345678")
	if _, err := ext4io.OpenImage(img, ext4io.Options{Writable: true}); !errors.Is(err, ext4io.ErrCorrupt) {
		t.Errorf("writable Open: %v; want ErrCorrupt", err)
	}
	v, err := ext4io.OpenImage(img, ext4io.Options{})
	if err != nil {
		t.Fatalf("read-only Open: %v", err)
	}
	defer v.Close()
	if b, err := fs.ReadFile(v.FS(), "dir/victim"); err != nil || string(b) != "data of victim" {
		t.Errorf("ReadFile: %q, %v", b, err)
	}
}

// TestHostileEntryNamesReservedInode: a directory entry that names the
// resize inode (7) or the journal (8) is corruption, as ext4_lookup's
// ext4_valid_inum says: lookups and removals refuse it and the reserved
// inode is left alone.
func TestHostileEntryNamesReservedInode(t *testing.T) {
	for _, ino := range []int{7, 8} {
		t.Run(fmt.Sprint(ino), func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "img")
			e2fs.Mkfs(t, img, "16M", "-b", "1024")
			e2fs.Debugfs(t, img, true, fmt.Sprintf("ln <%d> victim", ino))
			before := e2fs.Debugfs(t, img, false, fmt.Sprintf("stat <%d>", ino))
			v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
			require.NoError(t, err)
			if _, err := v.Stat("victim"); !errors.Is(err, ext4io.ErrCorrupt) {
				t.Errorf("Stat: %v, want ErrCorrupt", err)
			}
			if err := v.Unlink("victim"); !errors.Is(err, ext4io.ErrCorrupt) {
				t.Errorf("Unlink: %v, want ErrCorrupt", err)
			}
			v.Close()
			if after := e2fs.Debugfs(t, img, false, fmt.Sprintf("stat <%d>", ino)); after != before {
				t.Errorf("inode %d changed:\n%s\n->\n%s", ino, before, after)
			}
		})
	}
}

// TestHostileBlocksCountNoJournal: a file whose i_blocks counts fewer
// blocks than its tree maps, on a volume without a journal, fails unlink
// and rename-over with ErrCorrupt before anything is written: e2fsck finds
// the same problems afterwards, not an entry removed from a file it still
// counts.
func TestHostileBlocksCountNoJournal(t *testing.T) {
	for _, op := range []string{"unlink", "rename-over"} {
		t.Run(op, func(t *testing.T) {
			img := hostileImage(t, "victim", "other")
			e2fs.DebugfsScript(t, img, true, []string{"sif dir/victim blocks 0"})
			fsck := func() string {
				out, _ := exec.Command("e2fsck", "-fn", img).CombinedOutput()
				return string(out)
			}
			before := fsck()
			v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
			require.NoError(t, err)
			if op == "unlink" {
				err = v.Unlink("dir/victim")
			} else {
				err = v.Rename("dir/other", "dir/victim")
			}
			require.ErrorIs(t, err, ext4io.ErrCorrupt)
			v.Close()
			require.Equal(t, before, fsck(), "the refused %s changed what e2fsck finds", op)
		})
	}
}

// TestHostileDoubleMappingNoJournal: a file whose two extents map the
// same block, on a volume without a journal, fails truncate and punch with
// ErrCorrupt before freeing anything (the second free of the block would
// fail after the first stayed on disk): e2fsck finds the same problems
// afterwards.
func TestHostileDoubleMappingNoJournal(t *testing.T) {
	for _, op := range []string{"truncate", "punch", "unlink"} {
		t.Run(op, func(t *testing.T) {
			dir := t.TempDir()
			src := filepath.Join(dir, "src")
			require.NoError(t, os.MkdirAll(src, 0o755))
			f, err := os.Create(filepath.Join(src, "victim"))
			require.NoError(t, err)
			_, err = f.WriteAt(bytes.Repeat([]byte{1}, 4096), 0)
			require.NoError(t, err)
			_, err = f.WriteAt(bytes.Repeat([]byte{2}, 4096), 50*4096)
			require.NoError(t, err)
			require.NoError(t, f.Close())
			img := filepath.Join(dir, "img")
			e2fs.Mkfs(t, img, "8M", "-d", src, "-O", "^has_journal,metadata_csum", "-b", "4096")

			v, err := ext4io.OpenImage(img, ext4io.Options{})
			require.NoError(t, err)
			vf, err := v.Open("victim")
			require.NoError(t, err)
			exts, err := vf.Extents()
			require.NoError(t, err)
			vf.Close()
			v.Close()
			require.Len(t, exts, 2)
			// The second extent (i_block[6..8]) gets the first's start.
			e2fs.DebugfsScript(t, img, true, []string{fmt.Sprintf("sif victim block[8] %d", exts[0].Physical)})
			fsck := func() string {
				out, _ := exec.Command("e2fsck", "-fn", img).CombinedOutput()
				return string(out)
			}
			before := fsck()
			require.Contains(t, before, "multiply-claimed")

			v, err = ext4io.OpenImage(img, ext4io.Options{Writable: true})
			require.NoError(t, err)
			switch op {
			case "truncate":
				err = v.Truncate("victim", 1)
			case "punch":
				var w *ext4io.File
				w, err = v.OpenFile("victim", os.O_RDWR, 0)
				require.NoError(t, err)
				err = w.Fallocate(ext4io.FallocPunchHole|ext4io.FallocKeepSize, 0, 51*4096)
				w.Close()
			case "unlink":
				err = v.Unlink("victim")
			}
			require.ErrorIs(t, err, ext4io.ErrCorrupt)
			v.Close()
			require.Equal(t, before, fsck(), "the refused %s changed what e2fsck finds", op)
		})
	}
}
