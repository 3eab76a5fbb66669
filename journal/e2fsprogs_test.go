package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ext4io/ext4io/internal/crc32c"
)

// testdataDir finds shared/testdata/e2fsprogs by walking up from the package.
func testdataDir(t testing.TB) string {
	dir, _ := os.Getwd()
	for d := dir; ; d = filepath.Dir(d) {
		p := filepath.Join(d, "shared", "testdata", "e2fsprogs")
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			return p
		}
		if filepath.Dir(d) == d {
			t.Skip("shared/testdata/e2fsprogs not found")
		}
	}
}

func needTools(t testing.TB, tools ...string) {
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
}

func run(t testing.TB, name string, args ...string) (string, int) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "E2FSCK_CONFIG=/dev/null", "LC_ALL=C", "TZ=GMT0", "E2FSPROGS_SKIP_PROGRESS=yes")
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return string(out), code
}

// writeSparse writes data to path leaving all-zero 64 KiB chunks as holes.
func writeSparse(t testing.TB, path string, data []byte) {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const chunk = 64 << 10
	zero := make([]byte, chunk)
	for off := 0; off < len(data); off += chunk {
		end := min(off+chunk, len(data))
		if bytes.Equal(data[off:end], zero[:end-off]) {
			continue
		}
		if _, err := f.WriteAt(data[off:end], int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(int64(len(data))); err != nil {
		t.Fatal(err)
	}
}

// logdumpReplay is an oracle independent of e2fsck's repairs: the blocks
// "debugfs -R 'logdump -a'" lists as logged, each with its journal block's
// contents (newest wins). It handles only journals without revokes.
func logdumpReplay(t testing.TB, img string, g fsGeom, raw []byte) map[int][]byte {
	out, _ := run(t, "debugfs", "-R", "logdump -a", img)
	if strings.Contains(out, "revoke") {
		t.Fatalf("logdump oracle does not handle revokes")
	}
	want := map[int][]byte{}
	re := regexp.MustCompile(`FS block (\d+) logged at journal block (\d+) \(flags (0x[0-9a-f]+)\)`)
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		fb, _ := strconv.Atoi(m[1])
		jb, _ := strconv.Atoi(m[2])
		fl, _ := strconv.ParseUint(m[3], 0, 32)
		pb := int(g.journal[jb])
		d := append([]byte(nil), raw[pb*g.bs:(pb+1)*g.bs]...)
		if fl&1 != 0 {
			binary.BigEndian.PutUint32(d, Magic)
		}
		want[fb] = d
	}
	return want
}

// unpack writes the case's pre-replay image to dst.
func unpack(t testing.TB, caseDir, dst string) bool {
	for _, c := range []struct{ file, tool string }{
		{"prereplay.img.gz", "gzip"}, {"image.gz", "gzip"}, {"image.bz2", "bzip2"},
	} {
		src := filepath.Join(caseDir, c.file)
		if _, err := os.Stat(src); err != nil {
			continue
		}
		out, err := exec.Command(c.tool, "-dc", src).Output()
		if err != nil {
			t.Fatalf("%s -dc %s: %v", c.tool, src, err)
		}
		writeSparse(t, dst, out)
		return true
	}
	return false
}

type fsGeom struct {
	bs, firstData, perGroup int
	journal                 []uint64 // journal inode blocks, in logical order
}

func geometry(t testing.TB, img string) fsGeom {
	out, _ := run(t, "dumpe2fs", "-h", img)
	num := func(key string) int {
		m := regexp.MustCompile(`(?m)^` + key + `:\s+(\d+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("dumpe2fs: no %q in\n%s", key, out)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	g := fsGeom{bs: num("Block size"), firstData: num("First block"), perGroup: num("Blocks per group")}
	bl, _ := run(t, "debugfs", "-R", "blocks <8>", img)
	for _, f := range strings.Fields(bl) {
		if n, err := strconv.ParseUint(f, 10, 64); err == nil {
			g.journal = append(g.journal, n)
		}
	}
	return g
}

func (g fsGeom) config(dev *fileDev) Config {
	return Config{Dev: dev, BlockSize: g.bs, Blocks: uint32(len(g.journal)), CommitInterval: -1,
		Map: func(j uint32) (uint64, error) { return g.journal[j], nil }}
}

// diffBlocks lists blocks that differ, ignoring the journal's blocks and
// every group's first block (superblock copies).
func diffBlocks(g fsGeom, a, b []byte) []int {
	skip := map[uint64]bool{}
	for _, x := range g.journal {
		skip[x] = true
	}
	var d []int
	n := min(len(a), len(b)) / g.bs
	for blk := 0; blk < n; blk++ {
		if blk%256 == 0 {
			end := min(blk+256, n) * g.bs
			if bytes.Equal(a[blk*g.bs:end], b[blk*g.bs:end]) {
				blk += 255
				continue
			}
		}
		if skip[uint64(blk)] || (blk >= g.firstData && (blk-g.firstData)%g.perGroup == 0) || (g.bs == 1024 && blk == 1) {
			continue
		}
		if !bytes.Equal(a[blk*g.bs:(blk+1)*g.bs], b[blk*g.bs:(blk+1)*g.bs]) {
			d = append(d, blk)
		}
	}
	return d
}

// clearRecover clears EXT4_FEATURE_INCOMPAT_RECOVER in the primary ext4
// superblock, fixing its checksum under metadata_csum.
func clearRecover(t testing.TB, img string) {
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sb := make([]byte, 1024)
	if _, err := f.ReadAt(sb, 1024); err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	le.PutUint32(sb[0x60:], le.Uint32(sb[0x60:])&^0x4)
	if le.Uint32(sb[0x64:])&0x400 != 0 {
		le.PutUint32(sb[0x3FC:], crc32c.Kernel(^uint32(0), sb[:0x3FC]))
	}
	if _, err := f.WriteAt(sb, 1024); err != nil {
		t.Fatal(err)
	}
}

// fsckFindings returns e2fsck -fn's problem lines, without the count and
// summary lines that replay is allowed to leave (free counts).
func fsckFindings(t testing.TB, img string) ([]string, int) {
	out, code := run(t, "e2fsck", "-fn", img)
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		switch {
		case l == "", strings.HasPrefix(l, "e2fsck "), strings.HasPrefix(l, "Pass "),
			strings.Contains(l, "count wrong"), strings.Contains(l, "files,"),
			strings.Contains(l, "WARNING"), strings.Contains(l, "*****"),
			strings.HasPrefix(l, "Fix? no"), strings.Contains(l, "was not cleanly unmounted"):
			continue
		}
		keep = append(keep, strings.ReplaceAll(l, img, "IMG"))
	}
	return keep, code
}

// TestE2fsprogsJournalCases replays every internal-journal j_* case with
// Recover and with e2fsck -E journal_only, and compares the images.
func TestE2fsprogsJournalCases(t *testing.T) {
	needTools(t, "e2fsck", "debugfs", "dumpe2fs", "gzip", "bzip2")
	root := testdataDir(t)
	cases, _ := filepath.Glob(filepath.Join(root, "j_*"))
	cases = append(cases, filepath.Join(root, "f_jnl_32bit"), filepath.Join(root, "f_jnl_64bit"))
	// Cases this package refuses, and why; everything else must replay to
	// e2fsck's result.
	refuse := map[string]error{
		"j_corrupt_sb_csum":       ErrCorrupt,     // e2fsck resets the journal, replays nothing
		"j_corrupt_sb_magic":      ErrCorrupt,     // e2fsck deletes and recreates the journal
		"j_corrupt_revoke_rcount": ErrCorrupt,     // e2fsck: "Invalid argument while recovering journal"
		"j_corrupt_descr_csum":    ErrCorrupt,     // e2fsck: "Journal checksum error found", nothing replayed
		"j_recover_fast_commit":   ErrUnsupported, // fast-commit replay is ext4-specific
		// r_count 0xffffffff: current jbd2 (u32 r_count) fails recovery with
		// -EINVAL; e2fsprogs 1.47.0 reads it as a negative int and skips the
		// block. We follow the kernel and refuse.
		"j_corrupt_revoke_block": ErrCorrupt,
	}
	e2fsckReplays := map[string]bool{"j_corrupt_sb_magic": true, "j_recover_fast_commit": true, "j_corrupt_revoke_block": true}
	for _, dir := range cases {
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			if !strings.HasPrefix(name, "j_corrupt_") && name != "f_jnl_32bit" && os.Getenv("JOURNAL_E2FSPROGS_ALL") == "" {
				t.Skip("large image (slow under -race); set JOURNAL_E2FSPROGS_ALL=1 to run")
			}
			tmp := t.TempDir()
			orig := filepath.Join(tmp, "orig.img")
			if !unpack(t, dir, orig) {
				t.Skip("no internal-journal image (external journal case)")
			}
			raw, _ := os.ReadFile(orig)
			a, b := filepath.Join(tmp, "a.img"), filepath.Join(tmp, "b.img")
			writeSparse(t, a, raw)
			writeSparse(t, b, raw)
			out, code := run(t, "e2fsck", "-E", "journal_only", "-y", b)
			t.Logf("e2fsck journal_only exit %d:\n%s", code, out)
			g := geometry(t, orig)
			if len(g.journal) == 0 {
				t.Skip("no journal inode blocks")
			}
			dev, err := openFileDev(a)
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			var info RecoveryInfo
			j, err := Open(g.config(dev))
			if err == nil {
				info, err = j.Recover()
			}
			t.Logf("Recover: %+v err=%v", info, err)
			ra, _ := os.ReadFile(a)
			rb, _ := os.ReadFile(b)
			if want, ok := refuse[name]; ok {
				if !errors.Is(err, want) {
					t.Fatalf("want refusal wrapping %v, got %v", want, err)
				}
				// e2fsck must not have replayed anything we refused either,
				// except where it rebuilt the journal.
				if !e2fsckReplays[name] {
					if d := diffBlocks(g, raw, rb); len(d) > 0 {
						t.Errorf("e2fsck changed blocks %v that we refused to replay", d)
					}
				}
				return
			}
			if err != nil && !(errors.Is(err, ErrCorrupt) && len(info.BadBlocks) > 0) {
				t.Fatalf("Recover: %v", err)
			}
			if strings.Contains(out, "journal has been deleted") {
				// The replay overwrote the journal inode, so e2fsck went on to
				// repair the file system: check against logdump instead.
				want := logdumpReplay(t, orig, g, raw)
				for blk := 0; (blk+1)*g.bs <= len(raw); blk++ {
					exp, ok := want[blk]
					if !ok {
						exp = raw[blk*g.bs : (blk+1)*g.bs]
					}
					if !bytes.Equal(ra[blk*g.bs:(blk+1)*g.bs], exp) && !(blk >= int(g.journal[0]) && blk <= int(g.journal[len(g.journal)-1])) {
						t.Fatalf("block %d (logged %v) differs from the logdump oracle", blk, ok)
					}
				}
				if len(want) != info.Replayed {
					t.Fatalf("replayed %d blocks, logdump lists %d distinct", info.Replayed, len(want))
				}
				return
			}
			if d := diffBlocks(g, ra, rb); len(d) > 0 {
				t.Fatalf("%d blocks differ from e2fsck's replay: %v", len(d), d[:min(len(d), 20)])
			}
			// The journal must now be empty and loadable.
			j2, err := Open(g.config(dev))
			if err != nil || j2.NeedsRecovery() {
				t.Fatalf("reopen after recovery: err=%v needsRecovery=%v", err, err == nil && j2.NeedsRecovery())
			}
			clearRecover(t, a)
			fa, ca := fsckFindings(t, a)
			fb, cb := fsckFindings(t, b)
			if strings.Join(fa, "\n") != strings.Join(fb, "\n") {
				t.Fatalf("e2fsck -fn after our replay (exit %d):\n%s\nafter e2fsck's replay (exit %d):\n%s",
					ca, strings.Join(fa, "\n"), cb, strings.Join(fb, "\n"))
			}
		})
	}
}
