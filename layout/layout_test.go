package layout

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func needTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		for _, dir := range []string{"/usr/sbin", "/sbin"} {
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
				return filepath.Join(dir, name)
			}
		}
		t.Skipf("%s not installed (e2fsprogs); .ci/run installs it", name)
	}
	return p
}

// mkfs makes an image with mkfs.ext4 and the given extra arguments.
func mkfs(t *testing.T, size string, args ...string) []byte {
	t.Helper()
	bin := needTool(t, "mkfs.ext4")
	img := filepath.Join(t.TempDir(), "t.img")
	cmd := exec.Command(bin, append(append([]string{"-q", "-F"}, args...), img, size)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4 %v: %v\n%s", args, err, out)
	}
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var mkfsVariants = []struct {
	name string
	args []string
}{
	{"default4k", []string{"-t", "ext4", "-O", "metadata_csum,64bit,metadata_csum_seed"}},
	{"1k", []string{"-t", "ext4", "-b", "1024", "-O", "metadata_csum,64bit"}},
	{"64k", []string{"-t", "ext4", "-b", "65536", "-O", "metadata_csum,64bit"}},
	{"nocsum", []string{"-t", "ext4", "-O", "^metadata_csum,uninit_bg,^64bit"}},
	{"128inode", []string{"-t", "ext4", "-I", "128"}},
	{"ext2", []string{"-t", "ext2"}},
	{"ext3", []string{"-t", "ext3"}},
	{"metabg", []string{"-t", "ext4", "-O", "meta_bg,^resize_inode,metadata_csum,64bit"}},
	// bigalloc with 1 KiB blocks: s_first_data_block is 0, the descriptor
	// table still follows the superblock's block 1.
	{"bigalloc1k", []string{"-t", "ext4", "-b", "1024", "-C", "16384", "-O", "bigalloc"}},
	{"bigalloc1k-metabg", []string{"-t", "ext4", "-b", "1024", "-C", "4096", "-O", "bigalloc,meta_bg,^resize_inode"}},
	{"bigalloc4k", []string{"-t", "ext4", "-b", "4096", "-C", "65536", "-O", "bigalloc"}},
}

func TestDecodeMkfsImages(t *testing.T) {
	for _, v := range mkfsVariants {
		t.Run(v.name, func(t *testing.T) {
			size := "32M"
			if v.name == "64k" {
				size = "256M"
			}
			img := mkfs(t, size, v.args...)
			sb, err := DecodeSuperblock(img[SuperblockOffset:])
			if err != nil {
				t.Fatal(err)
			}
			if got := sb.Encode(); !bytes.Equal(got, img[SuperblockOffset:SuperblockOffset+SuperblockSize]) {
				t.Fatal("superblock does not re-encode byte-identically")
			}
			bs := sb.BlockSize()
			ds := sb.DescriptorSize()
			for g := uint64(0); g < sb.GroupCount(); g++ {
				blk, off := sb.DescriptorLocation(g)
				raw := img[int(blk)*bs+off:][:ds]
				gd, err := DecodeGroupDesc(raw, ds)
				if err != nil {
					t.Fatal(err)
				}
				if err := gd.Verify(sb, uint32(g), blk); err != nil {
					t.Fatalf("group %d: %v", g, err)
				}
				if !bytes.Equal(gd.Encode(ds), raw) {
					t.Fatalf("group %d: descriptor does not re-encode", g)
				}
				save := gd.Checksum
				gd.SetChecksum(sb, uint32(g))
				if gd.Checksum != save {
					t.Fatalf("group %d: SetChecksum %#x, mkfs wrote %#x", g, gd.Checksum, save)
				}
				if sb.MetadataCsum() && gd.Flags&BgBlockUninit == 0 {
					bm := img[int(gd.BlockBitmap)*bs:][:bs]
					if !BitmapCsumMatches(sb, gd.BlockBitmapCsum, BlockBitmapChecksum(sb, bm), false) {
						t.Fatalf("group %d: block bitmap checksum", g)
					}
				}
				if sb.MetadataCsum() && gd.Flags&BgInodeUninit == 0 {
					bm := img[int(gd.InodeBitmap)*bs:][:bs]
					if !BitmapCsumMatches(sb, gd.InodeBitmapCsum, InodeBitmapChecksum(sb, bm), true) {
						t.Fatalf("group %d: inode bitmap checksum", g)
					}
				}
				if g == 0 {
					checkRoot(t, img, sb, gd)
				}
			}
		})
	}
}

func checkRoot(t *testing.T, img []byte, sb *Superblock, gd *GroupDesc) {
	bs := sb.BlockSize()
	isz := sb.InodeSizeBytes()
	_, idx := sb.InodeLocation(RootIno)
	raw := img[int(gd.InodeTable)*bs+int(idx)*isz:][:isz]
	in, err := DecodeInode(raw, isz)
	if err != nil {
		t.Fatal(err)
	}
	if !in.IsDir() || in.LinksCount < 3 {
		t.Fatalf("root inode mode %#o links %d", in.Mode, in.LinksCount)
	}
	if !bytes.Equal(in.Encode(isz), raw) {
		t.Fatal("root inode does not re-encode")
	}
	if sb.MetadataCsum() {
		if err := in.VerifyChecksum(sb.CsumSeed(), RootIno, gd.InodeTable, 0); err != nil {
			t.Fatal(err)
		}
		in.Mode ^= 1
		in.Encode(isz)
		if err := in.VerifyChecksum(sb.CsumSeed(), RootIno, gd.InodeTable, 0); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flipped mode: %v", err)
		}
		in.SetChecksum(sb.CsumSeed(), RootIno)
		if err := in.VerifyChecksum(sb.CsumSeed(), RootIno, gd.InodeTable, 0); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSuperblockCorruption(t *testing.T) {
	img := mkfs(t, "16M", "-O", "metadata_csum")
	sbb := img[SuperblockOffset : SuperblockOffset+SuperblockSize]
	for _, off := range []int{0x38, 0x18, 0x20, 0x28, 0x58, 0x100, 0x3FC} {
		b := append([]byte(nil), sbb...)
		b[off] ^= 0x5A
		if _, err := DecodeSuperblock(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("byte %#x flipped: err %v, want ErrCorrupt", off, err)
		}
	}
	if _, err := DecodeSuperblock(sbb[:100]); !errors.Is(err, ErrCorrupt) {
		t.Error("short buffer accepted")
	}
}

func TestDirHashMatchesDebugfs(t *testing.T) {
	debugfs := needTool(t, "debugfs")
	img := filepath.Join(t.TempDir(), "h.img")
	if err := os.WriteFile(img, mkfs(t, "4M"), 0o644); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var names []string
	for i := 0; i < 40; i++ {
		n := 1 + rng.IntN(70)
		b := make([]byte, n)
		for j := range b {
			// printable, plus high bytes to tell signed from unsigned
			b[j] = byte(0x21 + rng.IntN(0x5E))
			if rng.IntN(5) == 0 {
				b[j] = byte(0xA1 + rng.IntN(0x5E))
			}
			if b[j] == '"' || b[j] == '\\' {
				b[j] = 'x'
			}
		}
		names = append(names, string(b))
	}
	algs := map[string]uint8{"legacy": HashLegacy, "half_md4": HashHalfMD4, "tea": HashTea,
		"legacy_unsigned": HashLegacyUnsigned, "half_md4_unsigned": HashHalfMD4Unsigned, "tea_unsigned": HashTeaUnsigned}
	seedUUID := "01020304-0506-0708-090a-0b0c0d0e0f10"
	seed := [4]uint32{0x04030201, 0x08070605, 0x0c0b0a09, 0x100f0e0d}
	var cmds strings.Builder
	type q struct {
		alg    string
		seeded bool
		name   string
	}
	var qs []q
	for alg := range algs {
		for i, n := range names {
			seeded := i%2 == 0
			s := ""
			if seeded {
				s = "-s " + seedUUID
			}
			fmt.Fprintf(&cmds, "dx_hash -h %d %s \"%s\"\n", algs[alg], s, n)
			qs = append(qs, q{alg, seeded, n})
		}
	}
	cmdFile := filepath.Join(t.TempDir(), "cmds")
	os.WriteFile(cmdFile, []byte(cmds.String()), 0o644)
	out, err := exec.Command(debugfs, "-f", cmdFile, img).Output()
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`Hash of .* is 0x([0-9a-f]+) \(minor 0x([0-9a-f]+)\)`)
	m := re.FindAllStringSubmatch(string(out), -1)
	if len(m) != len(qs) {
		t.Fatalf("debugfs printed %d hashes, want %d", len(m), len(qs))
	}
	for i, q := range qs {
		wantH, _ := strconv.ParseUint(m[i][1], 16, 32)
		wantM, _ := strconv.ParseUint(m[i][2], 16, 32)
		s := [4]uint32{}
		if q.seeded {
			s = seed
		}
		h, mi, ok := DirHash(algs[q.alg], s, []byte(q.name))
		if !ok || h != uint32(wantH) || mi != uint32(wantM) {
			t.Errorf("%s seeded=%v %q: got %#x/%#x, debugfs %#x/%#x", q.alg, q.seeded, q.name, h, mi, wantH, wantM)
		}
	}
}

func TestRecLen64K(t *testing.T) {
	for _, l := range []int{12, 65532, 65536, 4096, 32768} {
		if got := DecodeRecLen(EncodeRecLen(l, 65536), 65536); got != l {
			t.Errorf("rec_len %d round trips to %d", l, got)
		}
	}
}

func TestInodeTimestamps(t *testing.T) {
	for _, ts := range []Timestamp{{0, 0}, {-1, 5}, {1 << 31, 999999999}, {1<<33 + 7, 1}, {-(1 << 31), 0}} {
		in := &Inode{Mtime: ts, ExtraIsize: 32}
		raw := in.Encode(256)
		out, err := DecodeInode(raw, 256)
		if err != nil {
			t.Fatal(err)
		}
		if out.Mtime != ts {
			t.Errorf("mtime %+v decodes to %+v", ts, out.Mtime)
		}
	}
}

// TestDirNames checks invariant L7 on DirBlock: bad names in used
// entries are corrupt, unused entries' names are not looked at.
func TestDirNames(t *testing.T) {
	block := func(names ...string) []byte {
		b := make([]byte, 1024)
		off := 0
		for i, n := range names {
			rec := DirRecLen(len(n))
			if i == len(names)-1 {
				rec = len(b) - off
			}
			PutDirEntry(b, off, 12, rec, FtRegFile, []byte(n))
			off += rec
		}
		return b
	}
	for _, tc := range []struct {
		names []string
		dots  bool
		ok    bool
	}{
		{[]string{".", "..", "a"}, true, true},
		{[]string{"a", "b"}, false, true},
		{[]string{".", "..", "a/b"}, true, false},
		{[]string{".", "..", "a\x00"}, true, false},
		{[]string{".", "..", ""}, true, false},
		{[]string{".", "..", "."}, true, false},
		{[]string{".", "..", ".."}, true, false},
		{[]string{"x", "..", "a"}, true, false},
		{[]string{".", "x", "a"}, true, false},
		{[]string{".", ".."}, false, false}, // not block 0: no dot slots
		{[]string{"../../etc/passwd"}, false, false},
	} {
		err := DirBlock(block(tc.names...), 1, 2, false, true, tc.dots, func(DirEntry) error { return nil })
		if (err == nil) != tc.ok {
			t.Errorf("names %q (dots %v): %v; want ok %v", tc.names, tc.dots, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Errorf("names %q: %v does not wrap ErrCorrupt", tc.names, err)
		}
	}
	// An unused entry's bytes are not a name.
	b := block(".", "..", "x/y")
	binary.LittleEndian.PutUint32(b[24:], 0)
	if err := DirBlock(b, 1, 2, false, true, true, func(DirEntry) error { return nil }); err != nil {
		t.Errorf("unused entry with a '/' in its stale name: %v", err)
	}
}
