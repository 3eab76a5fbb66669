package main

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestHelp: "CMD --help", "CMD -h" and "help CMD" print the command's
// usage and every flag with a description on stdout and exit 0, for
// every command.
func TestHelp(t *testing.T) {
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		var first string
		for _, args := range [][]string{{name, "--help"}, {name, "-h"}, {"help", name}, {name, "IMAGE", "-help"}} {
			out, errOut, code := runCmd(t, args...)
			if code != 0 || errOut != "" || !strings.HasPrefix(out, "usage: ext4io "+commands[name].usage+"\n") {
				t.Errorf("%v: exit %d, stderr %q, stdout %q", args, code, errOut, out)
				continue
			}
			if first == "" {
				first = out
			} else if out != first {
				t.Errorf("%v: help differs from %s --help:\n%s", args, name, out)
			}
		}
		if commands[name].help == "" {
			t.Errorf("%s --help: no description of what the command does", name)
		}
		if fs := flagSets[name]; fs != nil {
			fs.VisitAll(func(f *flag.Flag) {
				if f.Usage == "" || !strings.Contains(first, "-"+f.Name) {
					t.Errorf("%s --help: flag -%s not described:\n%s", name, f.Name, first)
				}
				// The usage line is what "ext4io help" lists: every flag.
				if u := " " + commands[name].usage; !strings.Contains(u, " -"+f.Name) && !strings.Contains(u, " --"+f.Name) &&
					!strings.Contains(u, "[-"+f.Name) && !strings.Contains(u, "[--"+f.Name) && !strings.Contains(u, "| --"+f.Name) {
					t.Errorf("%s: flag -%s missing from the usage line %q", name, f.Name, commands[name].usage)
				}
			})
		}
	}
	out, errOut, code := runCmd(t, "help")
	if code != 0 || errOut != "" || !strings.Contains(out, "ext4io ls [-l]") {
		t.Errorf("help: exit %d, stderr %q, stdout %q", code, errOut, out)
	}
	if _, errOut, code := runCmd(t); code != 2 || !strings.Contains(errOut, "usage: ext4io COMMAND") {
		t.Errorf("no arguments: exit %d, stderr %q", code, errOut)
	}
	if _, errOut, code := runCmd(t, "help", "bogus"); code != 2 || !strings.Contains(errOut, `unknown command "bogus"`) {
		t.Errorf("help bogus: exit %d, stderr %q", code, errOut)
	}
}

// TestOptionsAreNotFiles: an unknown option is a usage error (exit 2),
// not a file name; options may follow the arguments; "--" ends options.
func TestOptionsAreNotFiles(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "img")
	e2fs.Mkfs(t, img, "8M", "-b", "1024")
	for _, args := range [][]string{
		{"ls", "-x", img},
		{"ls", img, "--bogus"},
		{"cat", img, "-q", "lost+found"},
		{"get", "-z", img, "/", filepath.Join(dir, "out")},
		{"info", "-v", img},
		{"write", img, "f", "--offset"},
	} {
		_, errOut, code := runCmd(t, args...)
		if code != 2 || !strings.Contains(errOut, "usage: ext4io "+args[0]) || !strings.Contains(errOut, "not defined") && args[0] != "write" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "out")); err == nil {
		t.Errorf("get with a bad option created its destination")
	}
	out, errOut, code := runCmd(t, "ls", img, "/", "-l")
	if code != 0 || !strings.Contains(out, "drwx------") {
		t.Errorf("ls IMAGE / -l: exit %d, %q %q", code, out, errOut)
	}
	// After "--", "-l" is a path.
	_, errOut, code = runCmd(t, "ls", img, "--", "-l")
	if code != 1 || !strings.Contains(errOut, "-l") {
		t.Errorf("ls IMAGE -- -l: exit %d, %q", code, errOut)
	}
}

// TestErrorLines: one line per failure, naming the file once, and a file
// that is not ext4 says so.
func TestErrorLines(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "x.img")
	_, errOut, code := runCmd(t, "info", missing)
	if code != 1 || strings.Count(errOut, "\n") != 1 || strings.Count(errOut, missing) != 1 || !strings.Contains(errOut, "no such file") {
		t.Errorf("info on a missing file: exit %d, %q", code, errOut)
	}
	notExt4 := filepath.Join(dir, "zero.img")
	os.WriteFile(notExt4, make([]byte, 1<<20), 0o644)
	short := filepath.Join(dir, "short.img")
	os.WriteFile(short, []byte("hi\n"), 0o644)
	for _, img := range []string{notExt4, short} {
		for _, cmd := range []string{"info", "ls", "mkdir"} {
			args := []string{cmd, img}
			if cmd == "mkdir" {
				args = append(args, "d")
			}
			_, errOut, code := runCmd(t, args...)
			if want := "ext4io " + cmd + ": " + img + ": not an ext4 file system (bad magic)\n"; code != 1 || errOut != want {
				t.Errorf("%v: exit %d, %q, want %q", args, code, errOut, want)
			}
		}
	}
	_, errOut, code = runCmd(t, "ls", dir)
	if code != 1 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "a directory") {
		t.Errorf("ls on a directory: exit %d, %q", code, errOut)
	}
}

// TestLsLong: ls lists names sorted; ls -l like coreutils (mode, links,
// uid, gid, size, time, name, "-> target").
func TestLsLong(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.MkdirAll(filepath.Join(src, "sub"), 0o750)
	os.WriteFile(filepath.Join(src, "file"), []byte("12345"), 0o640)
	os.Chmod(filepath.Join(src, "file"), 0o640|os.ModeSetgid)
	os.Symlink("sub/x", filepath.Join(src, "link"))
	img := filepath.Join(dir, "img")
	e2fs.Mkfs(t, img, "8M", "-b", "1024", "-d", src)
	out, _, code := runCmd(t, "ls", img)
	if code != 0 || out != "file\nlink\nlost+found\nsub\n" {
		t.Errorf("ls: exit %d, %q", code, out)
	}
	out, _, code = runCmd(t, "ls", "-l", img)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	const when = `[A-Z][a-z]{2} [ 0-9]\d (\d\d:\d\d| \d{4})`
	for i, re := range []string{
		`^-rw-r-S--- +1 +0 +0 +5 ` + when + ` file$`,
		`^lrwxrwxrwx +1 +0 +0 +5 ` + when + ` link -> sub/x$`,
		`^drwx------ +2 +0 +0 +12288 ` + when + ` lost\+found$`,
		`^drwxr-x--- +2 +0 +0 +1024 ` + when + ` sub$`,
	} {
		if code != 0 || len(lines) != 4 || !regexp.MustCompile(re).MatchString(lines[i]) {
			t.Fatalf("ls -l: exit %d, line %d does not match %s:\n%s", code, i, re, out)
		}
	}
	os.Symlink("sub", filepath.Join(src, "dirlink"))
	os.WriteFile(filepath.Join(src, "sub", "in"), nil, 0o644)
	e2fs.Mkfs(t, img, "8M", "-b", "1024", "-d", src)
	if out, _, _ := runCmd(t, "ls", img, "dirlink"); out != "in\n" {
		t.Errorf("ls IMAGE dirlink: %q, want the directory's names", out)
	}
	if out, _, _ := runCmd(t, "ls", "-l", img, "dirlink"); !strings.HasSuffix(out, " dirlink -> sub\n") {
		t.Errorf("ls -l IMAGE dirlink: %q, want the link", out)
	}
	out, _, _ = runCmd(t, "ls", "-li", img, "file")
	if !regexp.MustCompile(`^\d+ -rw-r-S--- 1 0 0 5 ` + when + ` file\n$`).MatchString(out) {
		t.Errorf("ls -li IMAGE file: %q", out)
	}
}

// TestLsGoesOn: an entry ls -l cannot stat is reported on stderr, one
// line, and the others are still listed; the exit status is 1.
func TestLsGoesOn(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "img")
	host := filepath.Join(dir, "payload")
	os.WriteFile(host, []byte("x"), 0o644)
	e2fs.Mkfs(t, img, "8M", "-b", "1024")
	e2fs.DebugfsScript(t, img, true, []string{"write " + host + " a", "write " + host + " b", "write " + host + " c"})
	pointEntry(t, img, "/", "a", 1<<30)
	out, errOut, code := runCmd(t, "ls", "-l", img)
	if code != 1 || !strings.Contains(out, " b\n") || !strings.Contains(out, " c\n") ||
		strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "ext4io ls: a: ") {
		t.Errorf("ls -l with a dangling entry: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// TestWriteReportsAfterClose: when write-back fails, write prints no
// "wrote N bytes", only the error, without the library's "ext4io: "
// after the line's own "ext4io write: ".
func TestWriteReportsAfterClose(t *testing.T) {
	img := filepath.Join(t.TempDir(), "img")
	e2fs.Mkfs(t, img, "8M", "-b", "1024")
	tg := errordev.NewToggle(errordev.Kinds(errordev.Always(), errordev.Write))
	old := openWritable
	defer func() { openWritable = old }()
	openWritable = func(img string) (*ext4io.Volume, error) {
		dev, err := blockdev.OpenFile(img, false)
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { dev.Close() })
		v, err := ext4io.Open(errordev.New(dev, tg), ext4io.Options{Writable: true})
		tg.Enable() // opened: every write from now on fails
		return v, err
	}
	oldIn := stdin
	defer func() { stdin = oldIn }()
	stdin = strings.NewReader(strings.Repeat("data", 1000))
	out, errOut, code := runCmd(t, "write", img, "f")
	if code != 1 || out != "" || strings.Count(errOut, "\n") != 1 || strings.Contains(errOut, "ext4io: ") {
		t.Errorf("write on a failing device: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestBadNumbersAreUsageErrors: a number that does not parse is a usage
// error (exit 2, with the usage line) whichever command and argument it
// is given to, as "write --offset abc" is by the flag package.
func TestBadNumbersAreUsageErrors(t *testing.T) {
	img := filepath.Join(t.TempDir(), "n.img")
	if _, errOut, code := runCmd(t, "mkfs", img, "8M"); code != 0 {
		t.Fatalf("mkfs: %s", errOut)
	}
	for _, args := range [][]string{
		{"write", "--offset", "abc", img, "f"},
		{"fstrim", "--offset", "abc", img},
		{"fstrim", "--length", "abc", img},
		{"fstrim", "--minimum", "abc", img},
		{"truncate", img, "f", "abc"},
		{"fallocate", img, "f", "abc", "4096"},
		{"fallocate", img, "f", "0", "abc"},
		{"mkfs", "-F", img, "abc"},
		{"torture", "--size", "abc"},
		{"bench", "--size", "abc"},
	} {
		_, errOut, code := runCmd(t, args...)
		if code != 2 || !strings.Contains(errOut, "usage: ext4io "+args[0]) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and the usage line", args, code, errOut)
		}
	}
}
