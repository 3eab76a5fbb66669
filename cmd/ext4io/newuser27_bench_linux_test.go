package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBenchInterrupted: SIGINT (Ctrl-C) or SIGHUP during ext4io bench
// stops it with exit 1 and one line saying it was interrupted by what.
// It said "ext4io bench: context canceled", and SIGHUP (a closed
// terminal) killed it without removing its temporary image.
func TestBenchInterrupted(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGHUP} {
		tmp := t.TempDir()
		var errb bytes.Buffer
		cmd := exec.Command(os.Args[0], "bench", "--size", "64M", "--runtime", "1m", "--workloads", "overwrite-2", "--dir", tmp, "--no-progress") // the test binary as ext4io (TestMain)
		cmd.Env = append(os.Environ(), mountChildEnv+"=1")
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		killer := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
		time.Sleep(time.Second)
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		err := cmd.Wait()
		killer.Stop()
		lines := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n")
		last := lines[len(lines)-1]
		want := "ext4io bench: interrupted: " + sig.String() + " signal received: no report"
		if code := cmd.ProcessState.ExitCode(); code != 1 || last != want {
			t.Errorf("bench after %v: %v (exit %d), last line %q; want exit 1 and %q", sig, err, code, last, want)
		}
		left, err := os.ReadDir(tmp)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range left {
			t.Errorf("bench after %v left %s in --dir", sig, e.Name())
		}
	}
}
