package blockdev_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestClaimInProcess: a second Claim of the same device, or of another
// Device on the same file (any backend), fails with ErrBusy until the
// first is released; read-only opens are not affected.
func TestClaimInProcess(t *testing.T) {
	mem := memdev.New(1 << 20)
	rel, err := blockdev.Claim(mem)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blockdev.Claim(mem); !errors.Is(err, blockdev.ErrBusy) {
		t.Fatalf("second claim of a memdev: %v, want ErrBusy", err)
	}
	rel()
	rel() // idempotent
	rel2, err := blockdev.Claim(mem)
	if err != nil {
		t.Fatalf("claim after release: %v", err)
	}
	rel2()

	img := filepath.Join(t.TempDir(), "img")
	a, err := blockdev.CreateFile(img, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	relA, err := blockdev.Claim(a)
	if err != nil {
		t.Fatal(err)
	}
	opens := map[string]func() (blockdev.Device, error){
		"file":   func() (blockdev.Device, error) { return blockdev.OpenFile(img, false) },
		"mmap":   func() (blockdev.Device, error) { return blockdev.OpenMmap(img, false) },
		"direct": func() (blockdev.Device, error) { return blockdev.OpenDirect(img, false) },
	}
	for name, open := range opens {
		d, err := open()
		if err != nil {
			if name == "direct" && errors.Is(err, blockdev.ErrUnsupported) {
				continue
			}
			t.Fatal(err)
		}
		if _, err := blockdev.Claim(d); !errors.Is(err, blockdev.ErrBusy) {
			t.Errorf("%s: claim beside a writer: %v, want ErrBusy", name, err)
		}
		// Not through the registry: the flock alone.
		if err := d.(blockdev.Locker).Lock(); !errors.Is(err, blockdev.ErrBusy) {
			t.Errorf("%s: flock beside a writer: %v, want ErrBusy", name, err)
		}
		d.Close()
	}
	ro, err := blockdev.OpenFile(img, true)
	if err != nil {
		t.Fatalf("read-only open beside a writer: %v", err)
	}
	ro.Close()
	relA()
	b, err := blockdev.OpenFile(img, false)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	relB, err := blockdev.Claim(b)
	if err != nil {
		t.Fatalf("claim after the first writer released: %v", err)
	}
	relB()
}

// TestClaimAcrossProcesses: two processes race to claim one image file,
// 200 times; exactly one wins each time and the other sees ErrBusy. The
// two processes live for all the tries: at each try's "claim" line both
// open the file and claim it, and at "release" both let go (the winner
// releases its claim and closes the file) before the next try.
func TestClaimAcrossProcesses(t *testing.T) {
	if img := os.Getenv("BLOCKDEV_CLAIM_CHILD"); img != "" {
		claimChild(img)
		return
	}
	img := filepath.Join(t.TempDir(), "img")
	d, err := blockdev.CreateFile(img, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	tries := 200
	if testing.Short() {
		tries = 20
	}
	var kids [2]*exec.Cmd
	var stdins [2]io.WriteCloser
	var outs [2]*bufio.Reader
	for k := range kids {
		c := exec.Command(os.Args[0], "-test.run=^TestClaimAcrossProcesses$")
		// GORACE: a -race child would sleep a second at exit.
		c.Env = append(os.Environ(), "BLOCKDEV_CLAIM_CHILD="+img, "GORACE=atexit_sleep_ms=0")
		c.Stderr = os.Stderr
		stdins[k], err = c.StdinPipe()
		if err != nil {
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
	defer func() {
		for k := range kids {
			stdins[k].Close()
			kids[k].Wait()
		}
	}()
	send := func(i int, line string) {
		t.Helper()
		for k := range kids {
			if _, err := io.WriteString(stdins[k], line+"\n"); err != nil {
				t.Fatalf("try %d: child %d: %s: %v", i, k, line, err)
			}
		}
	}
	for i := range tries {
		send(i, "claim")
		won := 0
		var lines []string
		for k := range kids {
			l, err := outs[k].ReadString('\n')
			if err != nil {
				t.Fatalf("try %d: child %d: %v", i, k, err)
			}
			lines = append(lines, strings.TrimSpace(l))
			switch {
			case l == "won\n":
				won++
			case strings.HasPrefix(l, "busy"):
			default:
				t.Errorf("try %d: child %d: %q", i, k, l)
			}
		}
		if won != 1 {
			t.Fatalf("try %d: %d winners: %q", i, won, lines)
		}
		send(i, "release")
		for k := range kids {
			if l, err := outs[k].ReadString('\n'); err != nil || l != "released\n" {
				t.Fatalf("try %d: child %d: release: %q, %v", i, k, l, err)
			}
		}
	}
}

// claimChild serves TestClaimAcrossProcesses's lines on stdin until it
// closes: at "claim" it opens img writable, claims it and prints "won" or
// "busy ..."; at "release" it releases what it holds, closes img and
// prints "released".
func claimChild(img string) {
	in := bufio.NewScanner(os.Stdin)
	var d blockdev.Device
	var rel func()
	for in.Scan() {
		switch in.Text() {
		case "claim":
			var err error
			d, err = blockdev.OpenFile(img, false)
			if err != nil {
				fmt.Printf("error %v\n", err)
				os.Exit(1)
			}
			rel, err = blockdev.Claim(d)
			switch {
			case err == nil:
				fmt.Println("won")
			case errors.Is(err, blockdev.ErrBusy):
				fmt.Printf("busy %v\n", err)
			default:
				fmt.Printf("error %v\n", err)
			}
		case "release":
			if rel != nil {
				rel()
				rel = nil
			}
			if d != nil {
				d.Close()
				d = nil
			}
			fmt.Println("released")
		}
	}
	os.Exit(0)
}
