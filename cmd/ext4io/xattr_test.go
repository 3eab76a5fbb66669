package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ext4io/ext4io/internal/e2fs"
)

func TestXattrCommands(t *testing.T) {
	img := filepath.Join(t.TempDir(), "x.img")
	e2fs.Mkfs(t, img, "16M", "-b", "1024", "-I", "256")
	if _, errOut, code := runCmd(t, "create", img, "f"); code != 0 {
		t.Fatalf("create: %s", errOut)
	}
	big := strings.Repeat("b", 600)
	for _, kv := range [][2]string{{"user.text", `"hello \"world\""`}, {"user.hex", "0x00ff10"},
		{"user.b64", "0sAAEC"}, {"user.big", big}, {"user.gone", "x"}} {
		if _, errOut, code := runCmd(t, "setfattr", img, "f", kv[0], kv[1]); code != 0 {
			t.Fatalf("setfattr %s: %s", kv[0], errOut)
		}
	}
	if _, errOut, code := runCmd(t, "setfattr", img, "f", "-x", "user.gone"); code != 0 {
		t.Fatalf("setfattr -x: %s", errOut)
	}
	if _, errOut, code := runCmd(t, "setfattr", img, "f", "-x", "user.gone"); code != 1 || !strings.Contains(errOut, "no such attribute") {
		t.Fatalf("second -x: %d %s", code, errOut)
	}
	out, errOut, code := runCmd(t, "getfattr", img, "f")
	if code != 0 {
		t.Fatalf("getfattr: %s", errOut)
	}
	for _, want := range []string{"# file: f\n", `user.text="hello \"world\""`, "user.hex=0sAP8Q", "user.b64=0sAAEC", `user.big="` + big + `"`} {
		if !strings.Contains(out, want) {
			t.Fatalf("getfattr output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "user.gone") {
		t.Fatalf("removed attribute listed:\n%s", out)
	}
	one, _, code := runCmd(t, "getfattr", img, "f", "user.hex")
	if code != 0 || one != "# file: f\nuser.hex=0sAP8Q\n\n" {
		t.Fatalf("getfattr NAME: %d %q", code, one)
	}
	if _, _, code := runCmd(t, "setfattr", img, "f", "user.x"); code != 2 {
		t.Fatalf("missing value: code %d", code)
	}
	e2fs.Fsck(t, img)

	// Linux's getfattr prints the same lines.
	getfattr, err := exec.LookPath("getfattr")
	if err != nil {
		t.Skip("getfattr not installed (apt-get install attr)")
	}
	mnt := e2fs.Mount(t, img, true)
	linux, err := exec.Command(getfattr, "-d", "-m", "-", "--absolute-names", filepath.Join(mnt, "f")).Output()
	if err != nil {
		t.Fatalf("getfattr: %v: %s", err, linux)
	}
	body := func(s string) string { _, rest, _ := strings.Cut(s, "\n"); return rest }
	if body(string(linux)) != body(out) {
		t.Fatalf("Linux getfattr -d -m -:\n%s\next4io getfattr:\n%s", linux, out)
	}
}
