// Package docstest checks the code blocks of README.md and docs/*.md.
//
// Every ```go block must be a complete, gofmt-formatted Go file. Each one is
// compiled (and vetted) as its own package in a temporary module whose go.mod
// replaces github.com/ext4io/ext4io with this checkout. A //line directive
// makes compiler and vet errors point at the Markdown file and line. Each
// main package is then run in a temporary directory of its own, and every
// *.img file it leaves there must pass e2fsck -fn (when e2fsck is
// installed).
//
// Every ```sh block is run with bash -euo pipefail in a temporary directory
// of its own. `go run ./cmd/ext4io` is replaced by an ext4io binary built
// from this checkout once per test. A block that cannot run here (long, or
// needing the network, root or a tool that is missing) must be preceded by
// a line `<!-- not run: REASON -->`; the test skips it and logs the reason.
// A block that uses e2fsck, debugfs or mkfs.ext4 is skipped when that tool
// is missing.
//
// Relative links must point at files inside the repository.
package docstest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// block is one fenced code block of a Markdown file.
type block struct {
	file   string // relative to the repository root
	line   int    // line of the first code line (after the fence)
	lang   string // info string: "go", "sh", "" ...
	code   string
	notRun string // the reason of a preceding <!-- not run: REASON --> line
}

func (b block) where() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

var notRunRE = regexp.MustCompile(`^<!--\s*not run:\s*(.*?)\s*-->$`)

// parseBlocks returns the fenced code blocks of the Markdown file at
// root/rel.
func parseBlocks(t *testing.T, root, rel string) []block {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	var (
		out     []block
		cur     *block
		body    strings.Builder
		prev    string
		lineNum int
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		lineNum++
		line := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &block{file: rel, line: lineNum + 1, lang: strings.TrimSpace(strings.TrimPrefix(line, "```"))}
			if m := notRunRE.FindStringSubmatch(strings.TrimSpace(prev)); m != nil {
				cur.notRun = m[1]
				if cur.notRun == "" {
					t.Errorf("%s:%d: <!-- not run: --> needs a reason", rel, lineNum-1)
				}
			}
			body.Reset()
		case cur != nil && strings.TrimSpace(line) == "```":
			cur.code = body.String()
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			body.WriteString(line)
			body.WriteByte('\n')
		}
		prev = line
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Errorf("%s:%d: code block never closed", rel, cur.line-1)
	}
	return out
}

// repoRoot walks up from the working directory to the go.mod of
// github.com/ext4io/ext4io.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			bytes.HasPrefix(b, []byte("module github.com/ext4io/ext4io\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod of github.com/ext4io/ext4io not found above the working directory")
		}
		dir = parent
	}
}

// docFiles returns README.md and docs/*.md, relative to root.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range more {
		files = append(files, filepath.Join("docs", filepath.Base(f)))
	}
	return files
}

// command runs name with args in dir and returns its combined output; it
// fails after timeout.
func command(dir string, env []string, timeout time.Duration, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after %v: %w", timeout, err)
	}
	return out, err
}

// toolPath finds an e2fsprogs tool on PATH or in the sbin directories.
func toolPath(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		if p := filepath.Join(dir, name); fileExists(p) {
			return p
		}
	}
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func TestDocs(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go is not on PATH: the docs' code blocks need the go command")
	}
	root := repoRoot(t)
	var blocks []block
	for _, f := range docFiles(t, root) {
		checkLinks(t, root, f)
		blocks = append(blocks, parseBlocks(t, root, f)...)
	}
	tmp := t.TempDir()
	// GOPROXY=off: nothing is downloaded. The snippets' module may have
	// its go.mod completed (-mod=mod); the checkout's never is.
	env := append(os.Environ(), "GOTOOLCHAIN=local", "GOPROXY=off", "GOWORK=off", "GOFLAGS=-mod=readonly")

	var goBlocks, shBlocks []block
	for _, b := range blocks {
		switch b.lang {
		case "go":
			if b.notRun != "" {
				t.Errorf("%s: every go block is compiled; drop the not-run marker and make it a complete program", b.where())
			}
			goBlocks = append(goBlocks, b)
		case "sh":
			shBlocks = append(shBlocks, b)
		case "", "text":
			// Diagrams and output: nothing to run.
		default:
			t.Errorf("%s: code block language %q: use go, sh, text or none", b.where(), b.lang)
		}
	}
	if len(goBlocks) == 0 || len(shBlocks) == 0 {
		t.Fatalf("found %d go and %d sh blocks: the parser is broken or the docs lost their examples", len(goBlocks), len(shBlocks))
	}

	t.Run("go", func(t *testing.T) { testGoBlocks(t, root, tmp, env, goBlocks) })
	t.Run("sh", func(t *testing.T) { testShBlocks(t, root, tmp, env, shBlocks) })
}

// testGoBlocks compiles every go block as a package of one module, vets
// them, and runs the main packages.
func testGoBlocks(t *testing.T, root, tmp string, env []string, blocks []block) {
	env = append(slices.Clone(env), "GOFLAGS=-mod=mod")
	mod := filepath.Join(tmp, "snippets")
	gomod, err := snippetGoMod(root)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(mod, "go.mod"), gomod)
	if sum, err := os.ReadFile(filepath.Join(root, "go.sum")); err == nil {
		writeFile(t, filepath.Join(mod, "go.sum"), string(sum))
	}
	var mains []string
	names := map[string]block{}
	for i, b := range blocks {
		if !regexp.MustCompile(`(?m)^package \w+$`).MatchString(b.code) {
			t.Errorf("%s: go block is not a complete file (no package clause)", b.where())
			continue
		}
		if src, err := format.Source([]byte(b.code)); err != nil {
			t.Errorf("%s: go block does not parse: %v", b.where(), err)
			continue
		} else if string(src) != b.code {
			t.Errorf("%s: go block is not gofmt-formatted; gofmt gives:\n%s", b.where(), src)
		}
		name := fmt.Sprintf("b%02d_%s", i, strings.NewReplacer("/", "_", ".", "_", "-", "_").Replace(b.file))
		names[name] = b
		abs := filepath.Join(root, b.file)
		writeFile(t, filepath.Join(mod, name, "main.go"), fmt.Sprintf("//line %s:%d\n%s", abs, b.line, b.code))
		if regexp.MustCompile(`(?m)^package main$`).MatchString(b.code) {
			mains = append(mains, name)
		}
	}
	if t.Failed() {
		return
	}
	if out, err := command(mod, env, 2*time.Minute, "go", "vet", "./..."); err != nil {
		t.Fatalf("go vet of the docs' go blocks: %v\n%s", err, out)
	}
	bin := filepath.Join(tmp, "snippet-bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := command(mod, env, 2*time.Minute, "go", "build", "-o", bin+string(filepath.Separator), "./..."); err != nil {
		t.Fatalf("go build of the docs' go blocks: %v\n%s", err, out)
	}
	fsck := toolPath("e2fsck")
	for _, name := range mains {
		b := names[name]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			out, err := command(dir, env, 30*time.Second, filepath.Join(bin, name))
			t.Logf("%s: output:\n%s", b.where(), out)
			if err != nil {
				t.Fatalf("%s: program failed: %v", b.where(), err)
			}
			imgs, _ := filepath.Glob(filepath.Join(dir, "*.img"))
			for _, img := range imgs {
				if fsck == "" {
					t.Logf("%s: e2fsck not installed; %s not checked", b.where(), filepath.Base(img))
					continue
				}
				if out, err := command(dir, env, 30*time.Second, fsck, "-fn", img); err != nil {
					t.Errorf("%s: e2fsck -fn %s: %v\n%s", b.where(), filepath.Base(img), err, out)
				}
			}
		})
	}
}

// snippetGoMod returns the go.mod of the snippets' module: the repository's
// requirements plus the module itself, replaced by the checkout.
func snippetGoMod(root string) (string, error) {
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", err
	}
	var reqs []string
	inBlock := false
	for line := range strings.SplitSeq(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "require (":
			inBlock = true
		case inBlock && line == ")":
			inBlock = false
		case inBlock && line != "":
			reqs = append(reqs, line)
		case strings.HasPrefix(line, "require "):
			reqs = append(reqs, strings.TrimPrefix(line, "require "))
		}
	}
	var b strings.Builder
	b.WriteString("module docsnippets\n\ngo 1.26.0\n\nrequire (\n\tgithub.com/ext4io/ext4io v0.0.0-00010101000000-000000000000\n")
	for _, r := range reqs {
		fmt.Fprintf(&b, "\t%s\n", r)
	}
	fmt.Fprintf(&b, ")\n\nreplace github.com/ext4io/ext4io => %s\n", root)
	return b.String(), nil
}

// testShBlocks runs every sh block not marked "not run".
func testShBlocks(t *testing.T, root, tmp string, env []string, blocks []block) {
	bin := filepath.Join(tmp, "bin")
	if out, err := command(root, env, 2*time.Minute, "go", "build", "-o", filepath.Join(bin, "ext4io"), "./cmd/ext4io"); err != nil {
		t.Fatalf("building cmd/ext4io: %v\n%s", err, out)
	}
	path := bin + string(os.PathListSeparator) + os.Getenv("PATH") + string(os.PathListSeparator) + "/usr/sbin:/sbin"
	shEnv := append(slices.Clone(env), "PATH="+path)
	for i, b := range blocks {
		t.Run(fmt.Sprintf("b%02d", i), func(t *testing.T) {
			if b.notRun != "" {
				t.Skipf("%s: not run: %s", b.where(), b.notRun)
			}
			for _, tool := range []string{"e2fsck", "debugfs", "mkfs.ext4"} {
				if regexp.MustCompile(`(^|[\s|;&(])`+regexp.QuoteMeta(tool)+`\s`).MatchString(b.code) && toolPath(tool) == "" {
					t.Skipf("%s: %s is not installed", b.where(), tool)
				}
			}
			script := strings.ReplaceAll(b.code, "go run ./cmd/ext4io", "ext4io")
			dir := t.TempDir()
			out, err := command(dir, shEnv, 45*time.Second, "bash", "-euo", "pipefail", "-c", script)
			if err != nil {
				t.Fatalf("%s: sh block failed: %v\n--- script\n%s--- output\n%s", b.where(), err, b.code, out)
			}
			t.Logf("%s: output:\n%s", b.where(), out)
		})
	}
}

var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// checkLinks fails for relative links that leave the repository or name a
// missing file, and for any mention of ../shared.
func checkLinks(t *testing.T, root, rel string) {
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte("../shared")) {
		t.Errorf("%s: refers to ../shared, which is outside the repository", rel)
	}
	for _, m := range linkRE.FindAllStringSubmatch(string(data), -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		target, _, _ = strings.Cut(target, "#")
		p := filepath.Clean(filepath.Join(root, filepath.Dir(rel), target))
		if r, err := filepath.Rel(root, p); err != nil || strings.HasPrefix(r, "..") {
			t.Errorf("%s: link %s leaves the repository", rel, m[1])
		} else if !fileExists(p) {
			t.Errorf("%s: link %s: no such file", rel, m[1])
		}
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
