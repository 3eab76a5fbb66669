package ext4io_test

// Compatibility with files whose extent trees debugfs built: unwritten
// extents (whose physical blocks are filled with a pattern, so a reader
// that returns stale disk bytes fails) and trees of depth 2 and 3 made by
// fallocate + hundreds of punches. debugfs is the oracle for the extent
// list (`ex`) and for written bytes (`dump`).

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// stalePattern is written into the physical blocks behind unwritten
// extents; it must never be read back.
const stalePattern = 0xA5

// leafExtents converts debugfs leaf rows to FileExtents.
func leafExtents(rows []e2fs.ExtentLine) []ext4io.FileExtent {
	out := make([]ext4io.FileExtent, 0, len(rows))
	for _, r := range rows {
		out = append(out, ext4io.FileExtent{Logical: r.Logical, Physical: r.Physical, Length: r.Length, Unwritten: r.Unwritten})
	}
	return out
}

// fillUnwritten overwrites the physical blocks of every unwritten extent
// in img with stalePattern and returns how many blocks it filled.
func fillUnwritten(t *testing.T, img string, bs int, exts []ext4io.FileExtent) int {
	t.Helper()
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for _, e := range exts {
		if !e.Unwritten {
			continue
		}
		buf := bytes.Repeat([]byte{stalePattern}, int(e.Length)*bs)
		if _, err := f.WriteAt(buf, int64(e.Physical)*int64(bs)); err != nil {
			t.Fatal(err)
		}
		n += int(e.Length)
	}
	return n
}

// expectedContents builds a file's bytes from its extent list: written
// blocks hold data's bytes (the data debugfs wrote), unwritten blocks and
// holes read as zeroes.
func expectedContents(data []byte, size int64, bs int, exts []ext4io.FileExtent) []byte {
	want := make([]byte, size)
	for _, e := range exts {
		if e.Unwritten {
			continue
		}
		lo := int64(e.Logical) * int64(bs)
		hi := lo + int64(e.Length)*int64(bs)
		lo, hi = min(lo, size), min(hi, size)
		if lo < int64(len(data)) {
			copy(want[lo:hi], data[lo:min(hi, int64(len(data)))])
		}
	}
	return want
}

// checkFile compares path's Extents with want and its bytes with
// wantData, reading it whole and in random windows.
func checkFile(t *testing.T, v *ext4io.Volume, path string, want []ext4io.FileExtent, wantData []byte, rng *rand.Rand) {
	t.Helper()
	f, err := v.Open(path)
	if err != nil {
		t.Fatalf("Open %s: %v", path, err)
	}
	got, err := f.Extents()
	if err != nil {
		t.Fatalf("%s: Extents: %v", path, err)
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d extents, debugfs lists %d", path, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: extent %d = %+v, debugfs %+v", path, i, got[i], want[i])
		}
	}
	if f.Size() != int64(len(wantData)) {
		t.Fatalf("%s: size %d, want %d", path, f.Size(), len(wantData))
	}
	all := make([]byte, f.Size())
	if n, err := f.ReadAt(all, 0); n != len(all) || (err != nil && err != io.EOF) {
		t.Fatalf("%s: read %d of %d bytes: %v", path, n, len(all), err)
	}
	if i := firstDiff(all, wantData); i >= 0 {
		t.Fatalf("%s: byte %d (block %d) = %#x, want %#x", path, i, i/v.BlockSize(), all[i], wantData[i])
	}
	for k := 0; k < 200 && len(wantData) > 0; k++ {
		off := rng.Int64N(int64(len(wantData)))
		buf := make([]byte, 1+rng.IntN(3*v.BlockSize()))
		n, err := f.ReadAt(buf, off)
		end := min(off+int64(len(buf)), int64(len(wantData)))
		if n != int(end-off) || (err != nil && err != io.EOF) {
			t.Fatalf("%s: ReadAt(%d, %d) = %d, %v", path, len(buf), off, n, err)
		}
		if !bytes.Equal(buf[:n], wantData[off:end]) {
			t.Fatalf("%s: ReadAt(%d, %d) differs", path, len(buf), off)
		}
	}
}

// sparseData returns random data of nblk blocks where some blocks are all
// zero (debugfs write leaves them as holes).
func sparseData(rng *rand.Rand, nblk, bs int) []byte {
	b := make([]byte, nblk*bs)
	for blk := 0; blk < nblk; blk++ {
		if rng.IntN(3) == 0 {
			continue
		}
		for i := blk * bs; i < (blk+1)*bs; i++ {
			b[i] = byte(rng.Uint32())
		}
	}
	return b
}

// TestUnwrittenReadsZeroes proves unwritten extents read as zeroes even
// when their physical blocks hold non-zero bytes: a file with data, holes
// filled by fallocate and an unwritten tail (size raised over it), and a
// brand-new file that is only fallocated and punched.
func TestUnwrittenReadsZeroes(t *testing.T) {
	t.Parallel()
	for i, c := range []struct {
		name string
		args []string
	}{
		{"1k", []string{"-b", "1024"}},
		{"1k-nocsum", []string{"-b", "1024", "-O", "^metadata_csum"}},
		{"4k", []string{"-b", "4096"}},
		{"4k-nocsum", []string{"-b", "4096", "-O", "^metadata_csum"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			seed := uint64(i + 1)
			rng := rand.New(rand.NewPCG(seed, 42))
			dir := t.TempDir()
			img := filepath.Join(dir, "img")
			e2fs.Mkfs(t, img, "32M", append([]string{"-O", "^has_journal"}, c.args...)...)
			bs := 1024
			if c.args[1] == "4096" {
				bs = 4096
			}
			data := sparseData(rng, 40, bs)
			data = append(data, bytes.Repeat([]byte{'t'}, bs/3)...) // partial last block
			host := filepath.Join(dir, "data")
			if err := os.WriteFile(host, data, 0o644); err != nil {
				t.Fatal(err)
			}
			fileSize := int64(70*bs + 123)
			emptySize := int64(90*bs - 7)
			e2fs.DebugfsScript(t, img, true, []string{
				"write " + host + " file",
				"fallocate /file 0 79", // fills the holes and goes past EOF
				fmt.Sprintf("sif /file size %d", fileSize),
				"write /dev/null empty",
				"fallocate /empty 0 99",
				"punch /empty 10 14",
				"punch /empty 50 50",
				fmt.Sprintf("sif /empty size %d", emptySize),
			})
			e2fs.Fsck(t, img)
			check := map[string][]byte{}
			exts := map[string][]ext4io.FileExtent{}
			filled := 0
			for _, name := range []string{"file", "empty"} {
				rows, _ := e2fs.Leaves(t, img, name)
				exts[name] = leafExtents(rows)
				filled += fillUnwritten(t, img, bs, exts[name])
			}
			check["file"] = expectedContents(data, fileSize, bs, exts["file"])
			check["empty"] = make([]byte, emptySize)
			if filled < 60 {
				t.Fatalf("only %d unwritten blocks to fill; debugfs fallocate did not make unwritten extents", filled)
			}
			var unwrittenInFile, writtenInFile int
			for _, e := range exts["file"] {
				if e.Unwritten && int64(e.Logical)*int64(bs) < int64(len(data)) {
					unwrittenInFile++
				} else if !e.Unwritten {
					writtenInFile++
				}
			}
			if unwrittenInFile == 0 || writtenInFile == 0 {
				t.Fatalf("file has %d unwritten extents inside its data, %d written: %+v", unwrittenInFile, writtenInFile, exts["file"])
			}
			v, err := ext4io.OpenImage(img, ext4io.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			for _, name := range []string{"file", "empty"} {
				checkFile(t, v, name, exts[name], check[name], rng)
			}
			// Blocks written by debugfs hold the host data, which the
			// dump of written ranges confirms independently.
			dump := e2fs.Dump(t, img, "file")
			for _, e := range exts["file"] {
				if e.Unwritten {
					continue
				}
				lo, hi := int(e.Logical)*bs, min(int(e.Logical+e.Length)*bs, len(dump))
				if !bytes.Equal(dump[lo:hi], check["file"][lo:hi]) {
					t.Fatalf("debugfs dump disagrees with the host data in blocks %d+%d", e.Logical, e.Length)
				}
			}
		})
	}
}

// TestDeepTreesFromDebugfs builds extent trees of depth 2 and 3 with
// debugfs (fallocate, then hundreds or thousands of punches, and
// fallocates back into punched ranges of a written file) and checks that
// Extents equals debugfs's leaf list and that reads return the written
// data and zeroes elsewhere.
func TestDeepTreesFromDebugfs(t *testing.T) {
	t.Parallel()
	type tcase struct {
		name      string
		bs        int
		csum      bool
		dataBlks  int // a written file of this many blocks, else only fallocate
		span      int // fallocated span in blocks
		punches   int // random punches
		alternate bool
		minDepth  int
	}
	cases := []tcase{
		{name: "falloc-depth2-1k", bs: 1024, csum: true, span: 4000, punches: 600, minDepth: 2},
		{name: "written-depth2-1k", bs: 1024, csum: true, dataBlks: 3000, span: 3600, punches: 500, minDepth: 2},
		{name: "written-depth2-1k-nocsum", bs: 1024, dataBlks: 3000, span: 3600, punches: 500, minDepth: 2},
		{name: "written-depth1-4k", bs: 4096, csum: true, dataBlks: 1500, span: 2000, punches: 300, minDepth: 1},
		{name: "alternate-depth3-1k", bs: 1024, csum: true, span: 60000, alternate: true, minDepth: 3},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if c.alternate && testing.Short() {
				t.Skip("depth-3 tree (30000 extents) skipped in -short")
			}
			seed := uint64(100 + i)
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 7))
			dir := t.TempDir()
			img := filepath.Join(dir, "img")
			args := []string{"-O", "^has_journal", "-b", fmt.Sprint(c.bs)}
			if !c.csum {
				args = append(args, "-O", "^metadata_csum")
			}
			size := "64M"
			if c.alternate {
				size = "128M"
			}
			e2fs.Mkfs(t, img, size, args...)
			var data []byte
			cmds := []string{}
			if c.dataBlks > 0 {
				data = make([]byte, c.dataBlks*c.bs)
				for j := range data {
					data[j] = byte(rng.Uint32())
				}
				host := filepath.Join(dir, "data")
				if err := os.WriteFile(host, data, 0o644); err != nil {
					t.Fatal(err)
				}
				cmds = append(cmds, "write "+host+" deep")
			} else {
				cmds = append(cmds, "write /dev/null deep")
			}
			cmds = append(cmds, fmt.Sprintf("fallocate /deep 0 %d", c.span-1))
			if c.alternate {
				for b := 1; b < c.span; b += 2 {
					cmds = append(cmds, fmt.Sprintf("punch /deep %d %d", b, b))
				}
			}
			for j := 0; j < c.punches; j++ {
				lo := rng.IntN(c.span)
				hi := lo + rng.IntN(4)
				cmds = append(cmds, fmt.Sprintf("punch /deep %d %d", lo, hi))
				if c.dataBlks > 0 && j%10 == 9 {
					// Refill an earlier punched range: unwritten again.
					lo := rng.IntN(c.span)
					cmds = append(cmds, fmt.Sprintf("fallocate /deep %d %d", lo, lo+rng.IntN(3)))
				}
			}
			fsize := int64(c.span)*int64(c.bs) - int64(rng.IntN(c.bs))
			cmds = append(cmds, fmt.Sprintf("sif /deep size %d", fsize))
			e2fs.DebugfsScript(t, img, true, cmds)
			rows, depth := e2fs.Leaves(t, img, "deep")
			if depth < c.minDepth {
				t.Fatalf("debugfs made a tree of depth %d, want >= %d (%d extents)", depth, c.minDepth, len(rows))
			}
			t.Logf("depth %d, %d extents", depth, len(rows))
			want := leafExtents(rows)
			dump := e2fs.Dump(t, img, "deep")
			filled := fillUnwritten(t, img, c.bs, want)
			wantData := expectedContents(data, fsize, c.bs, want)
			// debugfs dump is the oracle for written ranges.
			var unwritten, written int
			for _, e := range want {
				lo := min(int64(e.Logical)*int64(c.bs), fsize)
				hi := min(int64(e.Logical+e.Length)*int64(c.bs), fsize)
				if e.Unwritten {
					unwritten++
					continue
				}
				if hi > int64(len(dump)) || !bytes.Equal(dump[lo:hi], wantData[lo:hi]) {
					t.Fatalf("debugfs dump disagrees in written blocks %d+%d", e.Logical, e.Length)
				}
				written++
			}
			if unwritten == 0 || filled == 0 {
				t.Fatal("no unwritten extents to check")
			}
			e2fs.Fsck(t, img)
			v, err := ext4io.OpenImage(img, ext4io.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			checkFile(t, v, "deep", want, wantData, rng)
			if c.dataBlks > 0 && written == 0 {
				t.Fatal("no written extents survived the punches")
			}
		})
	}
}
