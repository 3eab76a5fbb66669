package main

import (
	"bytes"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestWriteCommands drives create, write (buffered and --direct),
// fallocate and truncate on an image mkfs.ext4 made, and checks the file
// against a model with debugfs and e2fsck.
func TestWriteCommands(t *testing.T) {
	img := filepath.Join(t.TempDir(), "w.img")
	e2fs.Mkfs(t, img, "32M", "-b", "4096")
	var model []byte
	put := func(off int, p []byte) {
		if n := off + len(p); n > len(model) {
			model = append(model, make([]byte, n-len(model))...)
		}
		copy(model[off:], p)
	}
	cmd := func(in []byte, args ...string) string {
		t.Helper()
		old := stdin
		stdin = bytes.NewReader(in)
		defer func() { stdin = old }()
		out, errOut, code := runCmd(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		return out
	}
	check := func(step string) {
		t.Helper()
		if got := e2fs.Dump(t, img, "f"); !bytes.Equal(got, model) {
			t.Fatalf("after %s: debugfs dumps %d bytes, want %d (or different bytes)", step, len(got), len(model))
		}
		e2fs.Fsck(t, img)
	}

	if out := cmd(nil, "create", img, "f"); !strings.Contains(out, "created f") {
		t.Fatalf("create: %q", out)
	}
	check("create")
	a := bytes.Repeat([]byte("buffered "), 2000) // 18000 bytes
	cmd(a, "write", img, "f", "--offset", "100")
	put(100, a)
	check("buffered write")

	// 3 blocks and 100 bytes at an aligned offset: 3 blocks go direct,
	// the tail through the page cache.
	b := bytes.Repeat([]byte("D"), 3*4096+100)
	if out := cmd(b, "write", img, "f", "--direct", "--offset", "40960"); !strings.Contains(out, "(12288 direct, 100 buffered)") {
		t.Fatalf("direct write: %q", out)
	}
	put(40960, b)
	check("direct write")
	// More than one chunk, each block different.
	c := make([]byte, 1<<20+2*4096+7)
	for i := range c {
		c[i] = byte(i/4096 + i)
	}
	if out := cmd(c, "write", img, "f", "--direct", "--offset", "65536"); !strings.Contains(out, "(1056768 direct, 7 buffered)") {
		t.Fatalf("direct write: %q", out)
	}
	put(65536, c)
	check("direct write of two chunks")

	// A misaligned direct write fails with a one-line error, changing nothing.
	old := stdin
	stdin = bytes.NewReader(b)
	_, errOut, code := runCmd(t, "write", img, "f", "--direct", "--offset", "1000")
	stdin = old
	if code != 1 || !strings.Contains(errOut, "not aligned") {
		t.Fatalf("misaligned direct write: exit %d: %q", code, errOut)
	}
	check("misaligned direct write")

	cmd(nil, "fallocate", img, "f", "4096", "8192", "--mode", "punch-hole")
	copy(model[4096:4096+8192], make([]byte, 8192))
	check("punch-hole")
	cmd(nil, "fallocate", img, "f", "0", "4096", "--mode", "collapse-range")
	model = model[4096:]
	check("collapse-range")
	cmd(nil, "fallocate", img, "f", "8192", "4096", "--mode", "insert-range")
	model = append(model[:8192], append(make([]byte, 4096), model[8192:]...)...)
	check("insert-range")
	end := len(model)
	cmd(nil, "fallocate", img, "f", strconv.Itoa(end), "100000", "--mode", "allocate")
	model = append(model, make([]byte, 100000)...)
	check("allocate")
	cmd(nil, "truncate", img, "f", "5000")
	model = model[:5000]
	check("truncate")
}
