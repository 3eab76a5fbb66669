package mkfs

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ext4io/ext4io/layout"
)

// TestFormatMMP: with mmp, Format allocates a clean MMP block that e2fsck
// accepts and dumpe2fs and debugfs report as mkfs.ext4's.
func TestFormatMMP(t *testing.T) {
	for _, tt := range []struct {
		name     string
		o        Options
		interval uint16
	}{
		{"default", Options{Features: "mmp"}, 5},
		{"1k-interval1", Options{BlockSize: 1024, Features: "mmp", MMPUpdateInterval: 1}, 1},
		{"nocsum", Options{Features: "mmp,^metadata_csum,uninit_bg", MMPUpdateInterval: 7}, 7},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := formatImage(t, t.TempDir(), 64<<20, tt.o)
			fsck(t, path)
			img, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			sb, err := layout.DecodeSuperblock(img[layout.SuperblockOffset:])
			if err != nil {
				t.Fatal(err)
			}
			if !sb.HasIncompat(layout.IncompatMMP) || sb.MmpInterval != tt.interval || sb.MmpBlock == 0 {
				t.Fatalf("mmp %v, interval %d, block %d", sb.HasIncompat(layout.IncompatMMP), sb.MmpInterval, sb.MmpBlock)
			}
			bs := sb.BlockSize()
			m, err := layout.DecodeMMP(img[int(sb.MmpBlock)*bs:], sb.MmpBlock)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.VerifyChecksum(sb.MetadataCsum(), sb.CsumSeed(), sb.MmpBlock); err != nil {
				t.Fatal(err)
			}
			if m.Seq != layout.MMPSeqClean || m.CheckInterval != max(tt.interval, layout.MMPMinCheckInterval) {
				t.Fatalf("seq %#x check interval %d", m.Seq, m.CheckInterval)
			}
			out, err := exec.Command(needTool(t, "debugfs"), "-R", "dump_mmp", path).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "sequence: ff4d4d50") || !strings.Contains(string(out), "magic: 0x4d4d50") {
				t.Fatalf("debugfs dump_mmp: %v\n%s", err, out)
			}
			if strings.Contains(string(out), "checksum") && strings.Contains(string(out), "MMP checksum") {
				t.Fatalf("debugfs reports a bad checksum:\n%s", out)
			}
		})
	}
}

func TestFormatMMPInterval(t *testing.T) {
	for _, n := range []int{-1, 301} {
		err := Format(nil, Options{Features: "mmp", MMPUpdateInterval: n})
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("interval %d: %v", n, err)
		}
	}
}
