package main

import (
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ext4io/ext4io/internal/e2fs"
)

// kcrashImage unpacks the image Linux left with a dirty journal.
func kcrashImage(t *testing.T) string {
	t.Helper()
	dir, _ := os.Getwd()
	for ; dir != "/"; dir = filepath.Dir(dir) {
		p := filepath.Join(dir, "..", "shared", "testdata", "e2fsprogs", "_extra_kernel_made", "kcrash-mcsum64-1k-needs_recovery.img.gz")
		if _, err := os.Stat(p); err == nil {
			in, _ := os.Open(p)
			defer in.Close()
			zr, err := gzip.NewReader(in)
			if err != nil {
				t.Fatal(err)
			}
			img := filepath.Join(t.TempDir(), "kcrash.img")
			out, _ := os.Create(img)
			if _, err := io.Copy(out, zr); err != nil {
				t.Fatal(err)
			}
			out.Close()
			return img
		}
	}
	t.Skip("shared/testdata/e2fsprogs not found")
	return ""
}

func TestJournalAndRecoverCommands(t *testing.T) {
	img := kcrashImage(t)
	out, errOut, code := runCmd(t, "journal", img)
	// debugfs logdump lists descriptors at 1, 10, 18, 26, 29 and commits
	// at 9, 17, 25, 28, 35 (EXPECTED.txt).
	if code != 0 || !strings.Contains(out, "block 1: descriptor, transaction 2, 7 tags") ||
		!strings.Contains(out, "block 35: commit, transaction 6") || !strings.Contains(out, "5 committed transactions") {
		t.Fatalf("journal: code %d %s\n%s", code, errOut, out)
	}
	// info replays in memory; it says the image itself still needs it.
	if out, _, _ := runCmd(t, "info", img); !strings.Contains(out, "needs recovery: 5 transactions replayed in memory only") {
		t.Fatalf("info before recover:\n%s", out)
	}
	out, errOut, code = runCmd(t, "recover", img)
	if code != 0 || !strings.Contains(out, "replayed 5 transactions") {
		t.Fatalf("recover: code %d %s\n%s", code, errOut, out)
	}
	e2fs.Fsck(t, img)
	if out, _, _ := runCmd(t, "info", img); strings.Contains(out, "needs recovery") {
		t.Fatalf("info after recover:\n%s", out)
	}
	out, _, _ = runCmd(t, "journal", img)
	if !strings.Contains(out, "The journal is empty.") {
		t.Fatalf("journal after recover:\n%s", out)
	}
	out, _, _ = runCmd(t, "recover", img)
	if !strings.Contains(out, "did not need recovery") {
		t.Fatalf("second recover:\n%s", out)
	}
}
