package extent

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestIndirectVsDebugfs maps a block-mapped file (written by debugfs on an
// image without the extent feature) through MapIndirect and WalkIndirect
// and compares with debugfs "blocks" and i_blocks.
func TestIndirectVsDebugfs(t *testing.T) {
	needTools(t)
	p := filepath.Join(t.TempDir(), "img")
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-O", "^has_journal,^extent,^metadata_csum,^64bit", "-b", "1024", p, "16384").CombinedOutput(); err != nil {
		t.Fatalf("mkfs: %v\n%s", err, out)
	}
	data := filepath.Join(filepath.Dir(p), "data")
	if err := os.WriteFile(data, []byte(strings.Repeat("x", 400*1024)), 0o644); err != nil { // 12 + 256 + some double
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	im := &img{t: t, path: p, bs: 1024, f: f, first: 1, count: 16384}
	im.debugfsW([]string{"write " + data + " f"})
	ino, _ := im.inode("/f")
	root := im.iblock(ino)
	cfg := im.cfg(ino, 0)
	var want []uint64
	for _, s := range strings.Fields(im.debugfsR("blocks /f")) {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("blocks: %q", s)
		}
		want = append(want, v)
	}
	var got, metaList []uint64
	meta := 0
	err = WalkIndirect(&root, cfg, func(e Extent) error {
		if e.Lblk != uint32(len(got)) {
			return fmt.Errorf("run at %d after %d blocks", e.Lblk, len(got))
		}
		for i := uint32(0); i < e.Len; i++ {
			got = append(got, e.Pblk+uint64(i))
		}
		return nil
	}, func(p uint64) error { meta++; metaList = append(metaList, p); return nil })
	if err != nil {
		t.Fatal(err)
	}
	all := append(append([]uint64(nil), got...), metaList...)
	slices.Sort(all)
	slices.Sort(want)
	if len(got) != 400 || fmt.Sprint(all) != fmt.Sprint(want) {
		t.Fatalf("WalkIndirect data+indirect blocks differ from debugfs blocks (%d+%d vs %d)", len(got), meta, len(want))
	}
	for _, l := range []int{0, 11, 12, 267, 268, 300, 399} {
		out := strings.Fields(im.debugfsR(fmt.Sprintf("bmap /f %d", l)))
		if len(out) == 0 || out[0] != strconv.FormatUint(got[l], 10) {
			t.Fatalf("debugfs bmap %d = %v, walk says %d", l, out, got[l])
		}
	}
	if meta != 1+1+1 { // single, double, one single under double
		t.Fatalf("%d indirect blocks, want 3", meta)
	}
	for l, w := range got {
		p, found, err := MapIndirect(&root, cfg, uint32(l))
		if err != nil || !found || p != w {
			t.Fatalf("MapIndirect(%d) = %d %v %v, want %d", l, p, found, err, w)
		}
	}
	if _, found, err := MapIndirect(&root, cfg, 400); err != nil || found {
		t.Fatalf("MapIndirect(400) found=%v err=%v", found, err)
	}
	// Holes run to the end of the zero pointers' subtrees: the rest of
	// the single indirect block under the double one, the other single
	// blocks under it, the whole triple indirect range, then everything.
	for _, c := range []struct{ lblk, hole uint64 }{
		{400, 524 - 400}, {524, 65804 - 524}, {600, 65804 - 600}, {65804, 1 << 24}, {65804 + 100, 1<<24 - 100},
		{12 + 256 + 65536 + 1<<24, EndLblk - (12 + 256 + 65536 + 1<<24)},
	} {
		if _, found, hole, err := MapIndirectHole(&root, cfg, uint32(c.lblk)); err != nil || found || hole != c.hole {
			t.Errorf("MapIndirectHole(%d) = found %v, hole %d, %v; want a hole of %d", c.lblk, found, hole, err, c.hole)
		}
	}
	// A pointer out of range is corrupt, not a panic.
	bad := root
	bad[0], bad[1], bad[2], bad[3] = 0xff, 0xff, 0xff, 0x7f
	if _, _, err := MapIndirect(&bad, cfg, 0); err == nil {
		t.Fatal("out-of-range pointer accepted")
	}
}
