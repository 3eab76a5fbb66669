package main

import (
	"bytes"
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cloneTestEnv asks for TestBenchClone: 1 for both README commands,
// "tests" for the tests alone (.ci/run, whose bench step has run the main
// job in its own fresh checkout; the main job reads nothing outside the
// image it makes). .ci/run sets it for that test alone, and the commands
// the test runs do not inherit it.
const cloneTestEnv = "EXT4IO_CLONE_TEST"

// TestBenchClone clones the repository at this test's HEAD into an empty
// temporary directory (no ../shared, no other worktrees beside it) and
// runs the README's two commands there, as a new user would: the main
// job, with a short runtime and the default image, and the tests that
// look outside their package's directory (cloneTests: ../shared's test
// images, the repository's go.mod, README and docs), -short and without
// -race to bound CI time. The other tests see the same files in any
// checkout, and CI runs them all (with -race) in its own clean clone.
// With EXT4IO_CLONE_TEST=tests the main job is not run; the clone still
// builds the command (its package is among the tests'). Uncommitted
// changes are not in the clone.
func TestBenchClone(t *testing.T) {
	mode := os.Getenv(cloneTestEnv)
	if mode != "1" && mode != "tests" {
		t.Skip("set " + cloneTestEnv + "=1 to clone the repository and run the README's commands in it (=tests: the tests alone)")
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
	if mode == "1" {
		run(dir, goTool, "run", "./cmd/ext4io", "bench", "--runtime", "300ms")
	} else {
		t.Logf("%s=%s: not running the main job in the clone", cloneTestEnv, mode)
	}
	pkgs, names := cloneTests(t, dir)
	if len(pkgs) == 0 {
		t.Fatal("no test looks outside its package's directory: cloneTests found nothing to run")
	}
	t.Logf("tests that look outside their package: %s in %s", strings.Join(names, " "), strings.Join(pkgs, " "))
	run(dir, goTool, append([]string{"test", "-short", "-run", "^(" + strings.Join(names, "|") + ")$"}, pkgs...)...)
}

// TestCloneTestsScan: TestBenchClone's scan selects the tests that find
// ../shared (through findTestdata, testdataDir, pjdSource and the journal
// command's test image) and the one that finds the repository's root
// (TestDocs), each in its package; the command's package is among them,
// so the clone builds the command even when it does not run the main job.
func TestCloneTestsScan(t *testing.T) {
	pkgs, names := cloneTests(t, filepath.Join("..", ".."))
	for _, want := range []string{".", "./cmd/ext4io", "./journal", "./fusefs", "./internal/docstest"} {
		if !slices.Contains(pkgs, want) {
			t.Errorf("package %s not selected: %v", want, pkgs)
		}
	}
	for _, want := range []string{"TestRecoverE2fsprogsJournals", "TestRecoverKernelCrash", "TestE2fsprogsImages", "TestE2fsprogsJournalCases", "TestPjdfstest", "TestDocs", "TestJournalAndRecoverCommands"} {
		if !slices.Contains(names, want) {
			t.Errorf("%s not selected: %v", want, names)
		}
	}
}

// cloneTests returns the packages (as ./dir patterns) of the repository
// at root whose tests look outside their package's directory, and the
// names of those tests, examples and fuzz targets. A function of a
// package's test files looks outside when it calls os.Getwd (the way the
// tests find ../shared and the repository's root), names "shared",
// "go.mod" or a path through ".." in a string literal given to a path
// function of os, filepath or path, or uses such a function of the same
// package's test files; a Test, Example or Fuzz function that does is
// selected. The scan over-approximates (a file named "shared" in an image
// selects its test too), which only adds tests to the run.
func cloneTests(t *testing.T, root string) (pkgs, names []string) {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if b := d.Name(); path != root && (b == "testdata" || b == "vendor" || strings.HasPrefix(b, ".") || strings.HasPrefix(b, "_")) {
			return filepath.SkipDir
		}
		found, err := outsideTests(path)
		if err != nil {
			return err
		}
		if len(found) == 0 {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		pkg := "."
		if rel != "." {
			pkg = "./" + filepath.ToSlash(rel)
		}
		pkgs = append(pkgs, pkg)
		for _, n := range found {
			if !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("scanning the clone's tests: %v", err)
	}
	slices.Sort(names)
	return pkgs, names
}

// outsideTests returns the tests of the package in dir that look outside
// its directory (see cloneTests).
func outsideTests(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil || len(files) == 0 {
		return nil, err
	}
	fset := token.NewFileSet()
	funcs := map[string][]*ast.FuncDecl{}
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, decl := range af.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok && fd.Body != nil {
				funcs[fd.Name.Name] = append(funcs[fd.Name.Name], fd)
			}
		}
	}
	marked := map[string]bool{}
	refs := map[string]map[string]bool{}
	for name, decls := range funcs {
		refs[name] = map[string]bool{}
		for _, fd := range decls {
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.Ident:
					refs[name][n.Name] = true
				case *ast.CallExpr:
					if looksOutside(n) {
						marked[name] = true
					}
				}
				return true
			})
		}
	}
	for changed := true; changed; {
		changed = false
		for name, r := range refs {
			if marked[name] {
				continue
			}
			for m := range marked {
				if r[m] {
					marked[name], changed = true, true
					break
				}
			}
		}
	}
	var out []string
	for name := range marked {
		for _, prefix := range []string{"Test", "Example", "Fuzz"} {
			if strings.HasPrefix(name, prefix) && funcs[name][0].Recv == nil {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// looksOutside reports whether call is os.Getwd() or a call of a function
// of os, filepath or path with a string literal argument naming "shared",
// "go.mod" or a path through ".." (not counting os.Symlink's target).
func looksOutside(call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	if !ok || (x.Name != "os" && x.Name != "filepath" && x.Name != "path") {
		return false
	}
	if x.Name == "os" && sel.Sel.Name == "Getwd" {
		return true
	}
	args := call.Args
	if x.Name == "os" && sel.Sel.Name == "Symlink" && len(args) > 0 {
		args = args[1:] // a link's target is not a path the test reads
	}
	for _, arg := range args {
		lit, ok := arg.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			continue
		}
		s, err := strconv.Unquote(lit.Value)
		if err != nil {
			continue
		}
		for _, elem := range strings.Split(filepath.ToSlash(s), "/") {
			if elem == "shared" || elem == "go.mod" || elem == ".." {
				return true
			}
		}
	}
	return false
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
