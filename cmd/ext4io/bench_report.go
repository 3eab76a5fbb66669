package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/ext4io/ext4io/internal/benchstat"
)

// engineVersionNotes says what the engine measured here does and does not
// do yet, so that numbers are read for what they are. Update it when the
// engine changes.
var engineVersionNotes = []string{
	"buffered writes go through a bounded page cache (64 MiB) with delayed allocation: blocks are reserved at write time and allocated, written and mapped at write-back (Sync, age 5 s, or memory pressure)",
	"ext4io.Direct (OpenFile) bypasses the page cache: aligned I/O straight to the device; reads without Direct also go to the device (the cache holds only pages writes touched)",
	"metadata is journaled (jbd2): operations batch into commits (Counters.JournalCommits); Sync waits for a commit",
	"raw = the same backend doing the same offsets with pread/pwrite on a region of the same device; it is the ceiling",
}

// benchReport is the --json document (schema ext4io-bench/1).
type benchReport struct {
	Schema    string           `json:"schema"`
	Started   time.Time        `json:"started"`
	Machine   machineInfo      `json:"machine"`
	Config    reportConfig     `json:"config"`
	Notes     []string         `json:"engine_version_notes"`
	Workloads []workloadResult `json:"workloads"`
	Kernel    kernelInfo       `json:"kernel"`
}

type machineInfo struct {
	OS         string `json:"os"`
	Arch       string `json:"arch"`
	CPUs       int    `json:"cpus"`
	CPUModel   string `json:"cpu_model,omitempty"`
	MemTotal   string `json:"mem_total,omitempty"`
	Kernel     string `json:"kernel_release,omitempty"`
	GoVersion  string `json:"go_version"`
	LoadBefore string `json:"loadavg_before"`
	LoadAfter  string `json:"loadavg_after"`
}

type reportConfig struct {
	Backend        string  `json:"backend"`
	Device         string  `json:"device"`
	DeviceBytes    int64   `json:"device_bytes"`
	RegionBytes    int64   `json:"region_bytes"`
	RuntimeSeconds float64 `json:"runtime_seconds"`
	Rounds         int     `json:"rounds"`
	BlockSize      int     `json:"block_size"`
	Seed           uint64  `json:"seed"`
}

// measure is one side's figures for a workload.
type measure struct {
	Ops     int64   `json:"ops"`
	Seconds float64 `json:"seconds"`
	IOPS    float64 `json:"iops"`
	MBps    float64 `json:"mb_per_s"`
	P50us   float64 `json:"p50_us"`
	P99us   float64 `json:"p99_us"`
	MaxUs   float64 `json:"max_us,omitempty"`
	// Device operations per workload operation (engine and raw sides).
	Device     *devPerOp `json:"device_per_op,omitempty"`
	PrepSecond float64   `json:"prep_seconds,omitempty"`
}

type devPerOp struct {
	Reads, Writes, Flushes, ZeroOuts, Discards float64
	ReadBytes, WriteBytes                      float64
}

type workloadResult struct {
	Name           string             `json:"name"`
	Title          string             `json:"title"`
	Jobs           int                `json:"jobs"`
	IOSize         int                `json:"io_size"`
	Prep           string             `json:"prep"`
	Engine         measure            `json:"engine"`
	Raw            measure            `json:"raw"`
	Kernel         *measure           `json:"kernel,omitempty"`
	EngineOverRaw  float64            `json:"engine_over_raw"`
	EngineOverKern *float64           `json:"engine_over_kernel,omitempty"`
	KernelNote     string             `json:"kernel_note,omitempty"`
	Counters       map[string]float64 `json:"engine_counters,omitempty"`
}

// kernelInfo says whether the --kernel column ran, and why not.
type kernelInfo struct {
	Ran     bool     `json:"ran"`
	Skipped string   `json:"skipped,omitempty"`
	Backing string   `json:"backing,omitempty"`
	Fio     string   `json:"fio_version,omitempty"`
	Notes   []string `json:"notes,omitempty"`
}

func newReport(c *benchConfig, desc string, size, region int64) *benchReport {
	return &benchReport{
		Schema:  benchSchema,
		Started: time.Now().UTC().Truncate(time.Second),
		Machine: machineInfo{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(),
			CPUModel: procField("/proc/cpuinfo", "model name"), MemTotal: procField("/proc/meminfo", "MemTotal"),
			Kernel: strings.TrimSpace(readSmall("/proc/sys/kernel/osrelease")), GoVersion: runtime.Version(), LoadBefore: loadAvg()},
		Config: reportConfig{Backend: c.backend, Device: desc, DeviceBytes: size, RegionBytes: region,
			RuntimeSeconds: c.runtime.Seconds(), Rounds: benchRounds, BlockSize: c.blockSize, Seed: c.seed},
		Notes: notesFor(c),
	}
}

// notesFor returns the engine notes with the split mode the run used.
func notesFor(c *benchConfig) []string {
	split := "direct writes into unwritten extents split them at submission (each in-flight write owns its extent) and convert at completion"
	if c.deferSplits {
		split = "--defer-splits: direct writes into unwritten extents split and convert at I/O completion (Options.DeferSplits)"
	}
	return append(append([]string(nil), engineVersionNotes...), split)
}

func readSmall(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// procField returns the value of the first "key: value" line of a /proc file.
func procField(path, key string) string {
	for _, l := range strings.Split(readSmall(path), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return ""
}

func makeMeasure(t *phaseTotals, ioSize int) measure {
	m := measure{Ops: t.ops, Seconds: t.elapsed.Seconds(), PrepSecond: t.prep.Seconds()}
	if t.elapsed > 0 {
		m.IOPS = float64(t.ops) / t.elapsed.Seconds()
		m.MBps = m.IOPS * float64(ioSize) / 1e6
	}
	m.P50us = float64(t.hist.Quantile(0.5)) / 1e3
	m.P99us = float64(t.hist.Quantile(0.99)) / 1e3
	m.MaxUs = float64(t.hist.Max()) / 1e3
	if t.ops > 0 {
		n := float64(t.ops)
		d := t.dev
		m.Device = &devPerOp{float64(d.Reads) / n, float64(d.Writes) / n, float64(d.Flushes) / n,
			float64(d.ZeroOuts) / n, float64(d.Discards) / n, float64(d.ReadBytes) / n, float64(d.WriteBytes) / n}
	}
	return m
}

func makeResult(w workload, jobs int, eng, raw *phaseTotals) workloadResult {
	r := workloadResult{Name: w.Name, Title: w.Title, Jobs: jobs, IOSize: w.IOSize, Prep: prepNames[w.Prep],
		Engine: makeMeasure(eng, w.IOSize), Raw: makeMeasure(raw, w.IOSize), Counters: eng.counters}
	if r.Raw.IOPS > 0 {
		r.EngineOverRaw = r.Engine.IOPS / r.Raw.IOPS
	}
	return r
}

// unit is the figure a workload is read by.
func (r *workloadResult) unit() string {
	if r.IOSize >= 1<<20 || r.Name == "buffered-4k" {
		return "MB/s"
	}
	return "IOPS"
}

func (m *measure) figure(unit string) float64 {
	if m == nil {
		return math.NaN()
	}
	if unit == "MB/s" {
		return m.MBps
	}
	return m.IOPS
}

func writeBenchText(w io.Writer, rep *benchReport) {
	fmt.Fprintf(w, "ext4io bench (%s)\n", rep.Schema)
	fmt.Fprintf(w, "machine: %s/%s, %d CPUs %s, %s, Linux %s, %s; load %s before, %s after\n",
		rep.Machine.OS, rep.Machine.Arch, rep.Machine.CPUs, rep.Machine.CPUModel, rep.Machine.MemTotal,
		rep.Machine.Kernel, rep.Machine.GoVersion, rep.Machine.LoadBefore, rep.Machine.LoadAfter)
	c := rep.Config
	fmt.Fprintf(w, "device: %s; raw region and file size %d MiB; %s per workload (%d raw/engine alternations); block size %d\n",
		c.Device, c.RegionBytes>>20, time.Duration(c.RuntimeSeconds*float64(time.Second)), c.Rounds, c.BlockSize)
	fmt.Fprintln(w, "engine version notes:")
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "  - %s\n", n)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	kern := rep.Kernel.Ran
	hdr := "workload\tjobs\tunit\tengine\tp50 µs\tp99 µs\traw\tp50 µs\tp99 µs\teng/raw\t"
	if kern {
		hdr += "linux\tp50 µs\tp99 µs\teng/linux\tlinux/raw\t"
	}
	fmt.Fprintln(tw, hdr)
	for i := range rep.Workloads {
		r := &rep.Workloads[i]
		u := r.unit()
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.2f\t", r.Name, r.Jobs, u,
			benchstat.FormatNumber(r.Engine.figure(u)), us(r.Engine.P50us), us(r.Engine.P99us),
			benchstat.FormatNumber(r.Raw.figure(u)), us(r.Raw.P50us), us(r.Raw.P99us), r.EngineOverRaw)
		if kern {
			if r.Kernel != nil {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%.2f\t", benchstat.FormatNumber(r.Kernel.figure(u)), us(r.Kernel.P50us),
					us(r.Kernel.P99us), *r.EngineOverKern, r.Kernel.figure(u)/r.Raw.figure(u))
			} else {
				fmt.Fprintf(tw, "-\t-\t-\t-\t-\t")
			}
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "per operation (device ops issued by the engine / by raw; engine counters per op; prep time):")
	for i := range rep.Workloads {
		r := &rep.Workloads[i]
		fmt.Fprintf(w, "  %-15s %s\n", r.Name, perOpLine(r))
	}
	if kern {
		fmt.Fprintf(w, "\nlinux: fio %s on ext4 over a loop device (direct-io=on) backed by a file in %s\n", rep.Kernel.Fio, rep.Kernel.Backing)
		for _, n := range rep.Kernel.Notes {
			fmt.Fprintf(w, "  - %s\n", n)
		}
		for i := range rep.Workloads {
			if n := rep.Workloads[i].KernelNote; n != "" {
				fmt.Fprintf(w, "  - %s: %s\n", rep.Workloads[i].Name, n)
			}
		}
	} else {
		fmt.Fprintf(w, "\nlinux column skipped: %s\n", rep.Kernel.Skipped)
	}
}

func us(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func perOpLine(r *workloadResult) string {
	var b strings.Builder
	dev := func(d *devPerOp) string {
		if d == nil {
			return "-"
		}
		s := fmt.Sprintf("w%.2f r%.2f", d.Writes, d.Reads)
		if d.Flushes > 0 {
			s += fmt.Sprintf(" f%.2f", d.Flushes)
		}
		return s
	}
	fmt.Fprintf(&b, "dev %s / %s", dev(r.Engine.Device), dev(r.Raw.Device))
	keys := make([]string, 0, len(r.Counters))
	for k, v := range r.Counters {
		if v != 0 && counterIsEvent(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s %.2f", strings.TrimPrefix(k, "Counters."), r.Counters[k]/float64(max(r.Engine.Ops, 1)))
	}
	fmt.Fprintf(&b, "  prep %.1fs/%.1fs", r.Engine.PrepSecond, r.Raw.PrepSecond)
	return b.String()
}

// counterIsEvent hides the esc gauges and bookkeeping from the text
// summary (they stay in the JSON).
func counterIsEvent(k string) bool {
	switch k {
	case "CacheStats.Entries", "CacheStats.Inodes", "CacheStats.Bytes", "CacheStats.Budget":
		return false
	}
	return true
}

func writeBenchSVG(path string, rep *benchReport) error {
	series := []string{"ext4io engine", "raw device"}
	if rep.Kernel.Ran {
		series = append(series, "Linux ext4 (fio, loop)")
	}
	ch := benchstat.Chart{
		Title:  "ext4io bench: engine vs raw" + map[bool]string{true: " vs Linux", false: ""}[rep.Kernel.Ran],
		Note:   fmt.Sprintf("%s; %d CPUs; %s backend; load %s", rep.Started.Format(time.DateTime), rep.Machine.CPUs, rep.Config.Backend, rep.Machine.LoadBefore),
		Series: series,
	}
	for i := range rep.Workloads {
		r := &rep.Workloads[i]
		u := r.unit()
		vals := []float64{r.Engine.figure(u), r.Raw.figure(u)}
		if rep.Kernel.Ran {
			vals = append(vals, r.Kernel.figure(u))
		}
		ch.Groups = append(ch.Groups, benchstat.Group{Label: fmt.Sprintf("%s (%.2f× raw)", r.Name, r.EngineOverRaw), Unit: u, Values: vals})
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := ch.WriteSVG(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// progress draws a carriage-return-updated status line on stderr while a
// phase runs. Its fields are set by the bench goroutine between phases;
// the ticker goroutine reads them under mu.
type progress struct {
	w        io.Writer
	on       bool
	workload string // set by the bench goroutine before a workload starts

	mu struct {
		sync.Mutex
		side, label string
		start       time.Time
		base        int64
		ops         *atomic.Int64
		quit        chan struct{}
		done        chan struct{}
	}
}

func newProgress(w io.Writer, on bool) *progress { return &progress{w: w, on: on} }

func (p *progress) set(side, label string, start time.Time, base int64) {
	if !p.on {
		return
	}
	p.mu.Lock()
	p.mu.side, p.mu.label, p.mu.start, p.mu.base, p.mu.ops = side, label, start, base, nil
	p.mu.Unlock()
	p.draw()
}

func (p *progress) draw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	line := fmt.Sprintf("%s  %s %s", p.workload, p.mu.side, p.mu.label)
	if p.mu.ops != nil {
		el := time.Since(p.mu.start)
		ops := p.mu.base + p.mu.ops.Load()
		line += fmt.Sprintf("  %.1fs  %d ops  %s ops/s", el.Seconds(), ops, benchstat.FormatNumber(float64(ops)/max(el.Seconds(), 1e-3)))
	}
	fmt.Fprintf(p.w, "\r\033[K%s", line)
}

// start begins redrawing every 250 ms with the live op counter ops.
func (p *progress) start(ops *atomic.Int64) {
	if !p.on {
		return
	}
	p.mu.Lock()
	p.mu.ops = ops
	quit, done := make(chan struct{}), make(chan struct{})
	p.mu.quit, p.mu.done = quit, done
	p.mu.Unlock()
	go func() {
		defer close(done)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				p.draw()
			}
		}
	}()
}

func (p *progress) stop() {
	if !p.on {
		return
	}
	p.mu.Lock()
	quit, done := p.mu.quit, p.mu.done
	p.mu.quit, p.mu.done = nil, nil
	p.mu.Unlock()
	if quit != nil {
		close(quit)
		<-done
	}
}

func (p *progress) clear() {
	if p.on {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
