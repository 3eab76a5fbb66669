//go:build linux

package bench

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestKernelFCRun runs fsync-small and overwrite-2 against both Linux
// columns (root, fio): in each round fsync-small gets Linux at its
// defaults and with fast_commit, overwrite-2 only the first.
func TestKernelFCRun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: the Linux columns need loop devices and mount")
	}
	if _, err := exec.LookPath("fio"); err != nil {
		t.Skip("fio not installed")
	}
	c := mem(128<<20, time.Second, "fsync-small")
	c.Kernel, c.FastCommit, c.Repeat = true, true, 2
	rep, out := run(t, c)
	if !rep.Kernel.Ran || rep.KernelFC == nil || !rep.KernelFC.Ran {
		t.Fatalf("Linux columns: %+v, %+v", rep.Kernel, rep.KernelFC)
	}
	fs := rep.Workloads[0]
	if fs.Kernel == nil || fs.KernelFC == nil || fs.EngineOverKernFC == nil || fs.EngineOverKern == nil {
		t.Fatalf("fsync-small %+v %+v\n%s", fs.Kernel, fs.KernelFC, out)
	}
	for _, r := range fs.Rounds {
		if r.KernelIOPS == nil || r.KernelFCIOPS == nil || *r.KernelFCIOPS <= 0 {
			t.Fatalf("fsync-small round %d: %+v", r.Round, r)
		}
	}
	for _, want := range []string{"eng/linux-default", "eng/linux-fc", "× linux-fc: ", "linux-fc: fio "} {
		if !strings.Contains(out, want) {
			t.Fatalf("report lacks %q:\n%s", want, out)
		}
	}
	// Without --fast-commit: one Linux column, at its defaults.
	c.FastCommit, c.Repeat, c.Workloads = false, 1, []string{"fsync-small"}
	rep, out = run(t, c)
	if !rep.Kernel.Ran || rep.KernelFC != nil || rep.Workloads[0].KernelFC != nil || strings.Contains(out, "linux-fc") {
		t.Fatalf("without --fast-commit: %+v\n%s", rep.KernelFC, out)
	}
}
