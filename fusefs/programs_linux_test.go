package fusefs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ext4io/ext4io/fusefs"
	"github.com/ext4io/ext4io/fusefs/fusetest"
)

// TestMountPrograms runs tar, git and rsync on the mount and in a host
// directory, as the long run of fusefs/testdata/programs.sh does on the
// whole Go tree: a few MB of Go's sources untarred, a git repository of
// them committed with fixed dates, then rsync -a back out. The trees, the
// commit hash, git status and git fsck agree with the host's; after the
// unmount e2fsck -fn is clean.
func TestMountPrograms(t *testing.T) {
	needFUSE(t)
	for _, tool := range []string{"go", "tar", "git", "rsync", "diff"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("fusefs programs: no %s", tool)
		}
	}
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Skipf("fusefs programs: go env GOROOT: %v", err)
	}
	src := filepath.Join(strings.TrimSpace(string(goroot)), "src")
	if _, err := os.Stat(filepath.Join(src, "go/types")); err != nil {
		t.Skipf("fusefs programs: no Go sources at %s", src)
	}
	tarball := filepath.Join(t.TempDir(), "src.tar")
	sh(t, "", "tar", "-C", src, "-cf", tarball, "go", "encoding")

	img := newImage(t, 128<<20)
	m := mount(t, img, fusefs.Options{})
	host := t.TempDir()
	commit := map[string]string{}
	for _, dir := range []string{m.dir, host} {
		sh(t, dir, "tar", "-xf", tarball)
		sh(t, dir, "mkdir", "repo")
		sh(t, dir, "cp", "-a", "go/ast", "go/token", "repo/")
		repo := filepath.Join(dir, "repo")
		sh(t, repo, "git", "init", "-q", "-b", "main", ".")
		sh(t, repo, "git", "add", "-A")
		sh(t, repo, "git", "commit", "-qm", "ast and token")
		if err := os.WriteFile(filepath.Join(repo, "ast/ast.go"), []byte("package ast\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		sh(t, repo, "git", "rm", "-q", "token/token.go")
		sh(t, repo, "git", "commit", "-qam", "changed")
		commit[dir] = sh(t, repo, "git", "log", "--format=%H %s")
		if st := sh(t, repo, "git", "status", "--porcelain"); st != "" {
			t.Fatalf("git status in %s: %q", dir, st)
		}
		sh(t, repo, "git", "fsck", "--no-progress", "--strict")
	}
	if commit[m.dir] != commit[host] {
		t.Fatalf("git log on the mount:\n%s\non the host:\n%s", commit[m.dir], commit[host])
	}
	out := t.TempDir()
	sh(t, "", "rsync", "-a", "--exclude=lost+found", m.dir+"/", out+"/")
	// The git index records inode numbers and ctimes.
	sh(t, "", "diff", "-r", "-x", "index", out, host)
	// rsync -a keeps modes and the untarred files' mtimes.
	meta := func(root string) string {
		return sh(t, root, "find", "go", "encoding", "-printf", `%p %M %s %T@\n`)
	}
	if a, b := meta(out), meta(host); a != b {
		t.Fatalf("modes, sizes or mtimes differ after rsync -a:\n%s", firstDiff(a, b))
	}
	m.unmount()
	e2fsck(t, img)
}

// TestCommandInMount runs pwd in a directory of a mount this process
// serves, with no entry or attribute caching (each change of directory
// asks the server), 100 times while garbage collections run: commandIn
// must start it there without hanging the process, which exec.Cmd.Dir on
// the mount does at once (the watchdog then fails the test).
func TestCommandInMount(t *testing.T) {
	needFUSE(t)
	img := newImage(t, 16<<20)
	m := mount(t, img, fusefs.Options{EntryTimeout: -1, AttrTimeout: -1})
	wd := fusetest.Watch(t, m.dir, 30*time.Second)
	sub := m.path("sub dir")
	check(t, os.Mkdir(sub, 0o755))
	var stop atomic.Bool
	gcDone := make(chan struct{})
	go func() {
		defer close(gcDone)
		for !stop.Load() {
			runtime.GC()
		}
	}()
	for i := 0; i < 100 && !wd.Fired(); i++ {
		out, err := commandIn(sub, "pwd").CombinedOutput()
		if err != nil || string(out) != sub+"\n" {
			t.Errorf("run %d: pwd: %q, %v; want %q", i, out, err, sub)
			break
		}
	}
	stop.Store(true)
	<-gcDone
	wd.Stop()
	m.unmount()
}

// sh runs name with args in dir (fixed git identity and dates) and returns
// its output; it fails the test on an error.
func sh(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := commandIn(dir, name, args...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.com",
		"GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@example.com",
		"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z",
		"GIT_CONFIG_NOSYSTEM=1", "HOME="+t.TempDir(), "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// commandIn is exec.Command(name, args...) run in dir, which may be on a
// mount this process serves. exec.Cmd.Dir must not be: Go starts a child
// with vfork, and the child changes to Dir before its exec while the
// parent's thread waits in clone without giving up its P. The child's
// lookups on the mount need this process's goroutines, and a garbage
// collection starting then stops them and waits for that thread: the
// process hangs for good (TestCommandInMount). So the child execs
// /bin/sh, which is not on the mount, and the shell changes to dir.
func commandIn(dir, name string, args ...string) *exec.Cmd {
	if dir == "" {
		return exec.Command(name, args...)
	}
	return exec.Command("/bin/sh", append([]string{"-c", `cd "$0" && exec "$@"`, dir, name}, args...)...)
}

// firstDiff returns the first differing lines of a and b.
func firstDiff(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(la), len(lb)) {
		if la[i] != lb[i] {
			return la[i] + "\n" + lb[i]
		}
	}
	return "(one is a prefix of the other)"
}
