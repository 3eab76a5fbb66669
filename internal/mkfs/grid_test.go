package mkfs

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ext4io/ext4io/layout"
)

type gridCase struct {
	size  int64
	bs    int
	isz   int
	feat  string
	mount bool
}

func (c gridCase) name() string {
	return fmt.Sprintf("%dM-b%d-i%d-%s", c.size>>20, c.bs, c.isz, strings.ReplaceAll(c.feat, ",", "+"))
}

// gridCases is the CI grid; EXT4IO_LONG=1 adds every block size x size x
// feature set.
func gridCases() []gridCase {
	cs := []gridCase{
		{8 << 20, 1024, 0, "", true},
		{8 << 20, 4096, 0, "", false},
		{8 << 20, 65536, 0, "", false},
		{100 << 20, 1024, 0, "^metadata_csum", false},
		{100 << 20, 2048, 0, "^64bit", false},
		{100 << 20, 4096, 0, "^flex_bg", true},
		{100 << 20, 4096, 128, "^has_journal", false},
		{100 << 20, 4096, 0, "^metadata_csum,uninit_bg,^huge_file", true},
		{100 << 20, 65536, 0, "^orphan_file,^dir_nlink,^extra_isize", false},
		{2 << 30, 4096, 0, "", true},
		{2 << 30, 1024, 0, "^metadata_csum,^64bit", false},
	}
	if os.Getenv("EXT4IO_LONG") == "" {
		return cs
	}
	cs = nil
	for _, size := range []int64{8 << 20, 100 << 20, 2 << 30, 64 << 30} {
		for _, bs := range []int{1024, 2048, 4096, 65536} {
			for _, feat := range []string{"", "^metadata_csum", "^64bit", "^flex_bg", "^has_journal",
				"^huge_file,^dir_nlink", "^metadata_csum,uninit_bg", "^metadata_csum_seed,^orphan_file"} {
				cs = append(cs, gridCase{size, bs, 0, feat, bs == 4096 && feat == ""})
			}
		}
	}
	return cs
}

func TestFormatGrid(t *testing.T) {
	needTool(t, "e2fsck")
	for _, c := range gridCases() {
		t.Run(c.name(), func(t *testing.T) {
			t.Parallel()
			o := Options{BlockSize: c.bs, InodeSize: c.isz, Features: c.feat, Label: "grid"}
			p := formatImage(t, t.TempDir(), c.size, o)
			fsck(t, p)
			checkFeatures(t, p, c.size, o)
			if c.mount {
				mountAndWrite(t, p)
			}
		})
	}
}

// checkFeatures compares dumpe2fs -h's feature line with what was asked.
func checkFeatures(t *testing.T, path string, size int64, o Options) {
	out, err := exec.Command(needTool(t, "dumpe2fs"), "-h", path).CombinedOutput()
	if err != nil {
		t.Fatalf("dumpe2fs: %v\n%s", err, out)
	}
	var got []string
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "Filesystem features:"); ok {
			got = strings.Fields(v)
		}
	}
	c, r, i := uint32(DefaultCompat), uint32(DefaultRoCompat), uint32(DefaultIncompat)
	if err := ApplyFeatures(o.Features, &c, &r, &i); err != nil {
		t.Fatal(err)
	}
	if r&layout.RoCompatMetadataCsum == 0 {
		i &^= layout.IncompatCsumSeed
	}
	if o.InodeSize == 128 {
		r &^= layout.RoCompatExtraIsize
	}
	if size/int64(o.BlockSize) < 2048 {
		c &^= layout.CompatHasJournal // mke2fs: too small for a journal
	}
	if c&layout.CompatHasJournal == 0 {
		c &^= layout.CompatOrphanFile
	}
	for _, want := range layout.FeatureNames(c, r, i) {
		if !slices.Contains(got, want) {
			t.Errorf("dumpe2fs features %v lack %s", got, want)
		}
	}
	for _, g := range got {
		_, bit, _ := layout.ParseFeature(g)
		if (c|r|i)&bit == 0 {
			t.Errorf("dumpe2fs shows %s, not asked for", g)
		}
	}
}

// mountAndWrite loop-mounts the image, writes files, unmounts and checks it
// again. It skips when not root or when loop mounts do not work.
func mountAndWrite(t *testing.T, path string) {
	if os.Geteuid() != 0 {
		t.Log("not root: skipping mount check")
		return
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-o", "loop", "-t", "ext4", path, dir).CombinedOutput(); err != nil {
		t.Logf("mount -o loop failed, skipping mount check: %v %s", err, out)
		return
	}
	umounted := false
	defer func() {
		if !umounted {
			exec.Command("umount", dir).Run()
		}
	}()
	data := strings.Repeat("ext4io!", 100000)
	for k := 0; k < 5; k++ {
		if err := os.MkdirAll(fmt.Sprintf("%s/d%d", dir, k), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(fmt.Sprintf("%s/d%d/f", dir, k), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(dir+"/lost+found/x", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dir + "/d3/f")
	if err != nil || string(got) != data {
		t.Fatalf("read back: %v", err)
	}
	var out []byte
	for try := 0; try < 20; try++ {
		if out, err = exec.Command("umount", dir).CombinedOutput(); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("umount: %v %s", err, out)
	}
	umounted = true
	fsck(t, path)
}
