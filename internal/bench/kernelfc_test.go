package bench

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// fcReport is a report of two workloads over two rounds with both Linux
// columns: fsync-small has Linux at its defaults and with fast_commit,
// overwrite-2 only at its defaults (fastCommitMatters).
func fcReport(t *testing.T) *Report {
	t.Helper()
	mk := func(round int, name string, eng, raw, kern float64, kernFC *float64) roundSample {
		r := WorkloadResult{Name: name, Jobs: 4, IOSize: 4096,
			Engine: Measure{Ops: int64(eng), Seconds: 1, IOPS: eng, P50us: 10, P99us: 20},
			Raw:    Measure{Ops: int64(raw), Seconds: 1, IOPS: raw, P50us: 1, P99us: 2},
			Kernel: &Measure{Ops: int64(kern), Seconds: 1, IOPS: kern, P50us: 30, P99us: 40}, KernelNote: "fio counts files/s"}
		r.EngineOverRaw = eng / raw
		if kernFC != nil {
			r.KernelFC = &Measure{Ops: int64(*kernFC), Seconds: 1, IOPS: *kernFC, P50us: 50, P99us: 60}
			r.KernelFCNote = "fio counts files/s"
		}
		return roundSample{round: round, pos: 1, res: r}
	}
	k := func(x float64) *float64 { return &x }
	// fsync-small: engine 6000, 9000 over Linux at its defaults 4000,
	// 3000 (ratios 1.5, 3: median 2.25) and with fast_commit 8000, 6000
	// (0.75, 1.5: median 1.125).
	fs := []roundSample{mk(1, "fsync-small", 6000, 60000, 4000, k(8000)), mk(2, "fsync-small", 9000, 60000, 3000, k(6000))}
	ow := []roundSample{mk(1, "overwrite-2", 100, 100, 50, nil), mk(2, "overwrite-2", 100, 100, 50, nil)}
	res, _ := combineRounds([][]roundSample{ow, fs})
	return &Report{Schema: Schema, Config: ReportConfig{Repeat: 2}, Workloads: res,
		Kernel:   KernelInfo{Ran: true, Fio: "fio-3", Notes: []string{"linux-default: mkfs.ext4's default features, no fast_commit"}},
		KernelFC: &KernelInfo{Ran: true, Fio: "fio-3", Notes: []string{"linux-fc: mkfs.ext4 -O fast_commit"}}}
}

// TestKernelFCCombine: Linux's figures with fast_commit are combined
// over the rounds as the default column's are, each ratio a median of the
// per-round ratios, and only for the workloads that ran it.
func TestKernelFCCombine(t *testing.T) {
	rep := fcReport(t)
	ow, fs := &rep.Workloads[0], &rep.Workloads[1]
	if ow.KernelFC != nil || ow.EngineOverKernFC != nil || ow.Rounds[0].KernelFCIOPS != nil {
		t.Fatalf("overwrite-2 has a fast_commit column: %+v", ow)
	}
	if fs.KernelFC == nil || fs.KernelFC.IOPS != 7000 || fs.EngineOverKernFC == nil || *fs.EngineOverKernFC != 1.125 ||
		fs.EngineOverKern == nil || *fs.EngineOverKern != 2.25 || fs.KernelFCOverRaw == nil || *fs.KernelFCOverRaw != 7000.0/60000 {
		t.Fatalf("fsync-small: linux-fc %+v eng/linux-fc %v eng/linux-default %v", fs.KernelFC, fs.EngineOverKernFC, fs.EngineOverKern)
	}
	if r := fs.Rounds[1]; r.KernelFCIOPS == nil || *r.KernelFCIOPS != 6000 || r.EngineOverKernFC == nil || *r.EngineOverKernFC != 1.5 {
		t.Fatalf("round 2: %+v", r)
	}
	if fs.KernelFCNote != "fio counts files/s" {
		t.Fatalf("linux-fc note %q", fs.KernelFCNote)
	}
}

// TestKernelFCJSON: the fast_commit column's fields have JSON names of
// their own and decode back with every field known.
func TestKernelFCJSON(t *testing.T) {
	rep := fcReport(t)
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"kernel_fast_commit":{"ran":true`, `"engine_over_kernel_fast_commit":1.125`, `"kernel_fast_commit_iops":8000`,
		`"engine_over_kernel":2.25`, `"kernel_fast_commit_over_raw":`} {
		if !strings.Contains(string(b), key) {
			t.Fatalf("JSON lacks %s:\n%s", key, b)
		}
	}
	out := viaJSON(t, rep)
	if out.KernelFC == nil || !out.KernelFC.Ran || out.Workloads[1].KernelFC == nil || *out.Workloads[1].EngineOverKernFC != 1.125 {
		t.Fatalf("decoded: %+v", out)
	}
	// Without fast commits there is no second column in the JSON.
	rep.KernelFC = nil
	for i := range rep.Workloads {
		r := &rep.Workloads[i]
		r.KernelFC, r.EngineOverKernFC, r.KernelFCOverRaw, r.KernelFCNote = nil, nil, nil, ""
		for j := range r.Rounds {
			rr := &r.Rounds[j]
			rr.KernelFCIOPS, rr.KernelFCMBps, rr.EngineOverKernFC, rr.KernelFCOverRaw = nil, nil, nil, nil
		}
	}
	if b, _ := json.Marshal(rep); strings.Contains(string(b), `"kernel_fast_commit`) || strings.Contains(string(b), `_kernel_fast_commit"`) {
		t.Fatalf("fast_commit keys without the column:\n%s", b)
	}
}

// TestKernelFCText: the table, the Linux section and the verdict name
// both Linux columns; without the second one the labels stay "linux".
func TestKernelFCText(t *testing.T) {
	rep := fcReport(t)
	var b strings.Builder
	rep.WriteText(&b)
	out := b.String()
	for _, re := range []string{
		`(?m)^ *workload .* linux-default +p50 µs +p99 µs +eng/linux-default +linux-default/raw +linux-fc +p50 µs +p99 µs +eng/linux-fc +linux-fc/raw *$`,
		`(?m)^ *fsync-small +4 +IOPS +7,500 .* 0\.12 +3,500 +30\.0 +40\.0 +2\.25 +0\.06 +7,000 +50\.0 +60\.0 +1\.12 +0\.12 *$`,
		`(?m)^ *overwrite-2 +4 +IOPS .* 1\.00 +50\.0 +30\.0 +40\.0 +2\.00 +0\.50 +- +- +- +- +- *$`,
		`(?m)^  fsync-small +0\.12× raw: slower; 2\.25× linux-default: faster; 1\.12× linux-fc: faster$`,
		`(?m)^  overwrite-2 +1\.00× raw: on par \(within 5%\); 2\.00× linux-default: faster$`,
		`(?m)^verdict \(.*linux-default at mkfs\.ext4's defaults, linux-fc with fast_commit`,
		`(?m)^linux-default: fio fio-3 on ext4`,
		`(?m)^linux-fc: fio fio-3 on ext4 with fast_commit`,
		`(?m)^  - fsync-small: eng/linux-default 2\.25, eng/linux-fc 1\.12 \(medians: linux-fc/linux-default 2\.00\)$`,
		`(?m)^  - fsync-small \(linux-fc\): fio counts files/s$`,
		`eng/raw, eng/linux-default, linux-default/raw, eng/linux-fc, linux-fc/raw: medians`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Fatalf("report does not match %s:\n%s", re, out)
		}
	}
	if regexp.MustCompile(`(?m)^  overwrite-2 .*linux-fc`).MatchString(out) {
		t.Fatalf("overwrite-2 has a linux-fc figure:\n%s", out)
	}

	// The Linux column alone (no --fast-commit) keeps its labels.
	rep.KernelFC, rep.Kernel.Notes = nil, nil
	for i := range rep.Workloads {
		rep.Workloads[i].KernelFC, rep.Workloads[i].EngineOverKernFC = nil, nil
	}
	b.Reset()
	rep.WriteText(&b)
	out = b.String()
	if strings.Contains(out, "linux-default") || strings.Contains(out, "linux-fc") ||
		!regexp.MustCompile(`(?m)^ *workload .* linux +p50 µs +p99 µs +eng/linux +linux/raw *$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^  fsync-small +0\.12× raw: slower; 2\.25× linux: faster$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^linux: fio fio-3 on ext4`).MatchString(out) {
		t.Fatalf("report without the fast_commit column:\n%s", out)
	}
}

// TestFastCommitMatters: only fsync-small gets a second Linux run.
func TestFastCommitMatters(t *testing.T) {
	if got := fastCommitWorkloads(); len(got) != 1 || got[0] != "fsync-small" {
		t.Fatalf("fastCommitWorkloads() = %v", got)
	}
}
