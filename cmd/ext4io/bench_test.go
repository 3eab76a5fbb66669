package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/ext4io/ext4io/internal/bench"
)

// TestBenchOutput runs the command briefly on the memory backend: --json
// writes one document of schema ext4io-bench/1 and nothing on stderr,
// --svg a chart; without --json the text report goes to stdout and the
// space plan to stderr. internal/bench tests the figures.
func TestBenchOutput(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "bench.svg")
	args := []string{"bench", "--backend", "memory", "--size", "96M", "--runtime", "20ms", "--workloads", "overwrite-2,fsync-small"}
	out, errOut, code := runCmd(t, append(args, "--json", "--svg", svg)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if errOut != "" {
		t.Errorf("stderr not empty with --json: %q", errOut)
	}
	var rep bench.Report
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("decoding JSON: %v\n%s", err, out)
	}
	if rep.Schema != "ext4io-bench/1" || rep.Config.Backend != "memory" || rep.Config.DeviceBytes != 96<<20 || len(rep.Workloads) != 2 ||
		rep.Workloads[0].Name != "overwrite-2" || rep.Workloads[1].Name != "fsync-small" || rep.Workloads[0].Engine.Ops <= 0 {
		t.Fatalf("report: %+v", rep)
	}
	if b, err := os.ReadFile(svg); err != nil || !bytes.HasPrefix(b, []byte("<svg")) && !bytes.HasPrefix(b, []byte("<?xml")) {
		t.Fatalf("--svg: %v, %.40q", err, b)
	}
	out, errOut, code = runCmd(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.HasPrefix(errOut, "space plan: 2 workloads") {
		t.Errorf("stderr %q, want the space plan", errOut)
	}
	for _, want := range []string{"ext4io bench (ext4io-bench/1)", "device: memdev, 96 MiB", "engine version notes:", "eng/raw", "linux column skipped", "verdict"} {
		if !strings.Contains(out, want) {
			t.Fatalf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestBenchUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--workloads", "nope"},
		{"bench", "--workloads", ","},
		{"bench", "--backend", "tape"},
		{"bench", "--backend", "memory", "--image", "x"},
		{"bench", "--backend", "nbd"},
		{"bench", "--backend", "nbd", "--image", "x.img"},
		{"bench", "--runtime", "0s"},
		{"bench", "--repeat", "0"},
		{"bench", "--raw-at", "middle"},
		{"bench", "extra"},
		{"bench", "--size", "12Q"},
	} {
		_, errOut, code := runCmd(t, args...)
		if code != 2 || !strings.Contains(errOut, "usage: ext4io bench") {
			t.Errorf("%v: exit %d, %q", args, code, errOut)
		}
	}
	_, errOut, code := runCmd(t, "bench", "--backend", "memory", "--size", "32M", "--runtime", "10ms")
	if code != 1 || !strings.Contains(errOut, "too small") {
		t.Errorf("tiny device: exit %d, %q", code, errOut)
	}
}

// TestBenchGOMAXPROCS: --gomaxprocs applies to the run, is reported, and
// is undone afterwards.
func TestBenchGOMAXPROCS(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	want := before + 3
	out, errOut, code := runCmd(t, "bench", "--backend", "memory", "--size", "128M", "--runtime", "20ms",
		"--gomaxprocs", strconv.Itoa(want), "--workloads", "overwrite-2", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Machine.GOMAXPROCS != want {
		t.Errorf("report says GOMAXPROCS %d, want %d", rep.Machine.GOMAXPROCS, want)
	}
	if got := runtime.GOMAXPROCS(0); got != before {
		t.Errorf("GOMAXPROCS %d after the bench, want %d restored", got, before)
	}
	if _, _, code := runCmd(t, "bench", "--gomaxprocs", "-1"); code != 2 {
		t.Errorf("--gomaxprocs -1: exit %d, want 2 (usage)", code)
	}
}

// TestBenchProfiles: --cpuprofile, --mutexprofile and --blockprofile each
// write a pprof profile (gzip-compressed protobuf) of the run, --trace an
// execution trace, and the mutex and block sampling are off again
// afterwards.
func TestBenchProfiles(t *testing.T) {
	dir := t.TempDir()
	cpu, mu, blk, tr := filepath.Join(dir, "cpu"), filepath.Join(dir, "mutex"), filepath.Join(dir, "block"), filepath.Join(dir, "trace")
	_, errOut, code := runCmd(t, "bench", "--backend", "memory", "--size", "128M", "--runtime", "20ms",
		"--workloads", "overwrite-2", "--cpuprofile", cpu, "--mutexprofile", mu, "--blockprofile", blk, "--trace", tr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, p := range []string{cpu, mu, blk} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			t.Errorf("%s: %d bytes, not a gzip-compressed profile", filepath.Base(p), len(b))
		}
	}
	if b, err := os.ReadFile(tr); err != nil || !bytes.HasPrefix(b, []byte("go 1.")) {
		t.Errorf("trace: %v, %d bytes, not a Go execution trace", err, len(b))
	}
	if f := runtime.SetMutexProfileFraction(-1); f != 0 {
		t.Errorf("mutex profile fraction %d after the bench, want 0", f)
	}
}

// TestBenchFastCommitKernelJSON (root, fio): with --fast-commit --kernel
// the JSON document has Linux at its defaults and with fast_commit, and
// the text report labels both.
func TestBenchFastCommitKernelJSON(t *testing.T) {
	if os.Geteuid() != 0 || runtime.GOOS != "linux" {
		t.Skip("the Linux columns need root on Linux")
	}
	if _, err := exec.LookPath("fio"); err != nil {
		t.Skip("fio not installed")
	}
	args := []string{"bench", "--backend", "memory", "--size", "128M", "--runtime", "1s", "--workloads", "fsync-small", "--kernel", "--fast-commit"}
	out, errOut, code := runCmd(t, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep bench.Report
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("decoding JSON: %v\n%s", err, out)
	}
	r := rep.Workloads[0]
	if !rep.Kernel.Ran || rep.KernelFC == nil || !rep.KernelFC.Ran || r.Kernel == nil || r.KernelFC == nil ||
		r.EngineOverKern == nil || r.EngineOverKernFC == nil || !strings.Contains(out, `"engine_over_kernel_fast_commit"`) {
		t.Fatalf("Linux columns missing: %+v %+v\n%s", rep.Kernel, rep.KernelFC, out)
	}
	out, errOut, code = runCmd(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"eng/linux-default", "eng/linux-fc", "× linux-default: ", "× linux-fc: "} {
		if !strings.Contains(out, want) {
			t.Fatalf("report lacks %q:\n%s", want, out)
		}
	}
}
