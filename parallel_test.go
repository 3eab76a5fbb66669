package ext4io_test

import (
	"flag"
	"os"
	"runtime"
	"strconv"
	"testing"
)

// TestMain raises go test's -parallel, unless given, from GOMAXPROCS to
// one more: some of the long tests that call t.Parallel mostly wait (the
// MMP protocol's sleeps, Linux's mounts and its 11 s MMP wait, e2fsck and
// debugfs) and would leave a CPU idle; the rest is CPU-bound, so one
// slot more is enough (docs/testing.md has the measurements).
// Tests that change process-wide state (SetMMPWait, SetMMPRecheck, the
// umask) or assert on timing do not call t.Parallel: go test runs every
// sequential test before the parallel ones resume.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", strconv.Itoa(runtime.GOMAXPROCS(0)+1))
	}
	os.Exit(m.Run())
}
