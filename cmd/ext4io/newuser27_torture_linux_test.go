package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTortureInterrupted: SIGINT (Ctrl-C) during ext4io torture ends the
// run after the round under way, prints the summary and exits 1 saying it
// was interrupted, and leaves none of the temporary images a round makes
// in $TMPDIR. The signal killed the process instead, with no summary and
// 64 MiB torture-*.img files left behind.
func TestTortureInterrupted(t *testing.T) {
	tmp := t.TempDir()
	var errb bytes.Buffer
	cmd := exec.Command(os.Args[0], "torture", "--duration", "2m", "--seed", "5", "--dir", tmp) // the test binary as ext4io (TestMain)
	cmd.Env = append(os.Environ(), mountChildEnv+"=1", "TMPDIR="+tmp)
	cmd.Stderr = &errb
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killer := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
	defer killer.Stop()
	out := bufio.NewScanner(stdout)
	if !out.Scan() || !strings.HasPrefix(out.Text(), "torture: seed 5") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("first line %q: %s", out.Text(), errb.String())
	}
	// Inside a round: its device images are in $TMPDIR.
	time.Sleep(1500 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	var rest strings.Builder
	for out.Scan() {
		rest.WriteString(out.Text() + "\n")
	}
	err = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(errb.String(), "ext4io torture: interrupted after ") {
		t.Errorf("torture after SIGINT: %v (exit %d), stderr %q; want exit 1 saying it was interrupted", err, code, errb.String())
	}
	if !strings.HasPrefix(rest.String(), "torture: rounds=") || !strings.Contains(rest.String(), " failures=0") {
		t.Errorf("no summary after SIGINT: %q", rest.String())
	}
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("left in TMPDIR: %s", e.Name())
	}
}
