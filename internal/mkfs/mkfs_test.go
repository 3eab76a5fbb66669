package mkfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ext4io/ext4io/blockdev"
)

// needTool skips the test when an e2fsprogs tool is missing.
func needTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not installed: %v", name, err)
	}
	return p
}

// formatImage formats a sparse image file of size bytes in dir.
func formatImage(t testing.TB, dir string, size int64, o Options) string {
	t.Helper()
	path := filepath.Join(dir, "fs.img")
	os.Remove(path)
	dev, err := blockdev.CreateFile(path, size)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if err := Format(dev, o); err != nil {
		t.Fatalf("Format(%d, %+v): %v", size, o, err)
	}
	return path
}

// fsck runs e2fsck -fn and fails the test on any finding.
func fsck(t testing.TB, path string) {
	t.Helper()
	cmd := exec.Command(needTool(t, "e2fsck"), "-fn", path)
	out, err := cmd.CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	// A clean run prints the version, the five pass headers and a summary.
	var extra []string
	for _, l := range lines {
		if strings.HasPrefix(l, "e2fsck ") || strings.HasPrefix(l, "Pass ") || strings.Contains(l, " files (") && strings.HasSuffix(l, " blocks") {
			continue
		}
		extra = append(extra, l)
	}
	if err != nil || len(extra) > 0 {
		t.Fatalf("e2fsck -fn %s: %v\n%s", path, err, out)
	}
}
