package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cloneTestEnv asks for TestBenchClone; .ci/run sets it for that test
// alone, and the commands the test runs do not inherit it.
const cloneTestEnv = "EXT4IO_CLONE_TEST"

// TestBenchClone clones the repository at this test's HEAD into an empty
// temporary directory (no ../shared, no other worktrees beside it) and
// runs the README's two commands there, as a new user would: the main
// job, with a short runtime and the default image, and the tests
// (-short and without -race, to bound CI time). Uncommitted changes are
// not in the clone.
func TestBenchClone(t *testing.T) {
	if os.Getenv(cloneTestEnv) != "1" {
		t.Skip("set " + cloneTestEnv + "=1 to clone the repository and run the README's commands in it")
	}
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command in PATH")
	}
	root, err := exec.Command(git, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git work tree: %v", err)
	}
	head, err := exec.Command(git, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("no HEAD: %v", err)
	}
	src, rev := strings.TrimSpace(string(root)), strings.TrimSpace(string(head))
	if _, err := os.Stat(filepath.Join(src, ".git")); err != nil {
		t.Skipf("no .git in %s", src)
	}
	dir := filepath.Join(t.TempDir(), "ext4io")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, cloneTestEnv+"=") {
			env = append(env, kv)
		}
	}
	run := func(dir string, name string, args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir, cmd.Env = dir, env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		t0 := time.Now()
		err := cmd.Run()
		t.Logf("%s %s: %v in %s", name, strings.Join(args, " "), err, time.Since(t0).Round(time.Second))
		if err != nil {
			t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, tail(out.String(), 60))
		}
		t.Logf("last lines:\n%s", tail(out.String(), 15))
	}
	run(filepath.Dir(dir), git, "clone", "--quiet", "--no-checkout", src, dir)
	run(dir, git, "checkout", "--quiet", "--detach", rev)
	run(dir, goTool, "run", "./cmd/ext4io", "bench", "--runtime", "300ms")
	run(dir, goTool, "test", "-short", "./...")
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
