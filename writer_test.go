package ext4io_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestOneWriterInProcess: a second writable Volume on the same device
// (memdev, or the same image file through OpenImage) fails at once with
// ErrBusy and writes nothing; read-only opens work beside the writer; the
// claim goes with Close.
func TestOneWriterInProcess(t *testing.T) {
	dev := memdev.New(32 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, opts := range []ext4io.Options{{Writable: true}, {Replay: true}} {
		if _, err := ext4io.Open(dev, opts); !errors.Is(err, ext4io.ErrBusy) {
			t.Errorf("second open %+v: %v, want ErrBusy", opts, err)
		}
	}
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); !errors.Is(err, ext4io.ErrBusy) {
		t.Errorf("Format under a writer: %v, want ErrBusy", err)
	}
	ro, err := ext4io.Open(dev, ext4io.Options{})
	if err != nil {
		t.Fatalf("read-only open beside the writer: %v", err)
	}
	ro.Close()
	v.Close()
	v, err = ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatalf("writable open after Close: %v", err)
	}
	v.Close()

	img, w, f := openWritableWithFile(t)
	f.Close()
	if _, err := ext4io.OpenImage(img, ext4io.Options{Writable: true}); !errors.Is(err, ext4io.ErrBusy) {
		t.Errorf("second OpenImage: %v, want ErrBusy", err)
	}
	r, err := ext4io.OpenImage(img, ext4io.Options{})
	if err != nil {
		t.Fatalf("read-only OpenImage beside the writer: %v", err)
	}
	r.Close()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	e2fs.Fsck(t, img)
}

// TestOneWriterAcrossProcesses: two processes race to open one image
// writable; exactly one wins every time, the other fails with ErrBusy,
// and the image stays clean.
func TestOneWriterAcrossProcesses(t *testing.T) {
	if img := os.Getenv("EXT4IO_WRITER_CHILD"); img != "" {
		writerChild(img)
		return
	}
	img := formatImage(t, 16<<20, ext4io.FormatOptions{})
	tries := 50
	if testing.Short() {
		tries = 10
	}
	for i := range tries {
		var kids [2]*exec.Cmd
		var stdins [2]io.WriteCloser
		var outs [2]*bufio.Reader
		for k := range kids {
			c := exec.Command(os.Args[0], "-test.run=^TestOneWriterAcrossProcesses$")
			// GORACE: a -race child would sleep a second at exit.
			c.Env = append(os.Environ(), "EXT4IO_WRITER_CHILD="+img, "GORACE=atexit_sleep_ms=0")
			c.Stderr = os.Stderr
			var err error
			if stdins[k], err = c.StdinPipe(); err != nil {
				t.Fatal(err)
			}
			out, err := c.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			outs[k] = bufio.NewReader(out)
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			kids[k] = c
		}
		won := 0
		var lines []string
		for k := range kids {
			l, err := outs[k].ReadString('\n')
			if err != nil {
				t.Fatalf("try %d: child %d: %v", i, k, err)
			}
			lines = append(lines, strings.TrimSpace(l))
			if l == "won\n" {
				won++
			} else if !strings.HasPrefix(l, "busy") {
				t.Errorf("try %d: child %d: %q", i, k, l)
			}
		}
		for k := range kids {
			stdins[k].Close()
			if err := kids[k].Wait(); err != nil {
				t.Errorf("try %d: child %d: %v", i, k, err)
			}
		}
		if won != 1 {
			t.Fatalf("try %d: %d winners: %q", i, won, lines)
		}
	}
	e2fs.Fsck(t, img)
}

// writerChild opens img writable, prints "won" or "busy ...", and keeps
// the volume open until stdin closes.
func writerChild(img string) {
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	switch {
	case err == nil:
		fmt.Println("won")
	case errors.Is(err, ext4io.ErrBusy):
		fmt.Printf("busy %v\n", err)
	default:
		fmt.Printf("error %v\n", err)
	}
	io.Copy(io.Discard, os.Stdin)
	code := 0
	if v != nil {
		if err := v.Close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}
