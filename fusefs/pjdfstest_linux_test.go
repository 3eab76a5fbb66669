package fusefs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ext4io/ext4io/fusefs"
)

// pjdSubset lists the pjdfstest files CI runs in a mount: whole
// directories (nil) or the numbered .t files of one. The full suite passes
// (docs/fuse.md); the subset keeps CI's time down under -race.
var pjdSubset = []struct {
	dir   string
	files []string
}{
	{"chflags", nil},
	{"chmod", []string{"02", "03", "04", "05", "06", "07", "08", "09", "10", "12"}},
	{"chown", []string{"02", "03", "04", "05", "06", "08", "09", "10"}},
	{"ftruncate", nil},
	{"granular", nil},
	{"link", []string{"02", "03", "04", "05", "06", "07", "08", "09", "11", "12", "13", "14", "15", "16", "17"}},
	{"mkdir", []string{"00", "02", "03", "04", "05", "06", "07", "08", "09", "11", "12"}},
	{"mkfifo", nil},
	{"mknod", nil},
	{"open", []string{"00", "02", "03", "04", "05", "07", "08", "09", "10", "11", "12", "13", "14", "15", "16", "18", "19", "20", "21", "23", "25", "26"}},
	{"posix_fallocate", nil},
	{"rename", nil},
	{"rmdir", []string{"00", "02", "03", "04", "05", "07", "08", "09", "10", "11", "12", "13", "14", "15"}},
	{"symlink", []string{"00", "01", "02", "03", "04", "05", "06", "07", "09", "10", "11", "12"}},
	{"truncate", nil},
	{"unlink", []string{"01", "02", "03", "04", "05", "06", "07", "08", "09", "10", "12", "13", "14"}},
	{"utimensat", []string{"01", "02", "03", "04", "05", "06", "07", "08", "09"}},
}

// pjdSource finds shared/testdata/pjdfstest by walking up from the
// package directory.
func pjdSource(t testing.TB) string {
	dir, _ := os.Getwd()
	for d := dir; ; d = filepath.Dir(d) {
		p := filepath.Join(d, "shared", "testdata", "pjdfstest")
		if st, err := os.Stat(filepath.Join(p, "pjdfstest.c")); err == nil && !st.IsDir() {
			return p
		}
		if filepath.Dir(d) == d {
			t.Skip("pjdfstest: shared/testdata/pjdfstest not found")
		}
	}
}

// buildPjd builds pjdfstest out of tree in a temporary directory and
// returns the directory holding the pjdfstest binary and tests/.
func buildPjd(t testing.TB) string {
	t.Helper()
	for _, tool := range []string{"prove", "gcc", "make", "autoreconf"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("pjdfstest: no %s (Debian: perl, gcc, make, autoconf, automake)", tool)
		}
	}
	src := pjdSource(t)
	dir := filepath.Join(t.TempDir(), "pjdfstest")
	if out, err := exec.Command("cp", "-r", src, dir).CombinedOutput(); err != nil {
		t.Fatalf("copy pjdfstest: %v\n%s", err, out)
	}
	for _, c := range [][]string{{"autoreconf", "-ifs"}, {"./configure"}, {"make"}} {
		cmd := exec.Command(c[0], c[1:]...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("pjdfstest: %s: %v\n%s", strings.Join(c, " "), err, out)
		}
	}
	return dir
}

// TestPjdfstest runs the pjdfstest files in pjdSubset inside a mount, then
// checks the image with e2fsck -fn.
func TestPjdfstest(t *testing.T) {
	needFUSE(t)
	if testing.Short() {
		t.Skip("pjdfstest: -short")
	}
	pjd := buildPjd(t)
	img := newImage(t, 256<<20)
	// The whole run in one mount: about 2 minutes under -race on 2 CPUs,
	// over 8 on such a machine loaded by other jobs, so its watchdog waits
	// longer than mountBudget (Watch still fires before the binary's
	// -timeout).
	m := mountFor(t, img, fusefs.Options{AllowOther: true}, 20*time.Minute)
	work := m.path("work")
	check(t, os.Mkdir(work, 0o755))
	args := []string{"-r"}
	for _, s := range pjdSubset {
		if s.files == nil {
			args = append(args, filepath.Join(pjd, "tests", s.dir))
		}
		for _, f := range s.files {
			args = append(args, filepath.Join(pjd, "tests", s.dir, f+".t"))
		}
	}
	cmd := commandIn(work, "prove", args...) // not cmd.Dir: see commandIn
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("prove took %v", time.Since(start).Round(time.Second))
	if err != nil || !strings.Contains(string(out), "Result: PASS") {
		t.Errorf("pjdfstest: %v\n%s", err, out)
	}
	m.unmount()
	e2fsck(t, img)
}
