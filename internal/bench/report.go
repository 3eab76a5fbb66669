package bench

import (
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
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
	"ext4io.O_DIRECT (OpenFile) bypasses the page cache: aligned I/O straight to the device; reads without Direct also go to the device (the cache holds only pages writes touched), through a 128 KiB read-ahead window of the File when sequential",
	"metadata is journaled (jbd2): operations batch into commits (Counters.JournalCommits); Sync waits for a commit",
}

// Report is a run's results. Its JSON form (schema ext4io-bench/1) is
// what "ext4io bench --json" writes. It is not safe for concurrent use.
type Report struct {
	Schema    string           `json:"schema"`
	Started   time.Time        `json:"started"`
	Machine   MachineInfo      `json:"machine"`
	Config    ReportConfig     `json:"config"`
	Notes     []string         `json:"engine_version_notes"`
	Workloads []WorkloadResult `json:"workloads"`
	Ratios    []WorkloadRatio  `json:"workload_ratios,omitempty"`
	// Kernel is the Linux column: ext4 at mkfs.ext4's defaults.
	Kernel KernelInfo `json:"kernel"`
	// KernelFC is the second Linux column, ext4 with fast_commit, for
	// runs with Config.FastCommit and Config.Kernel (nil otherwise).
	KernelFC *KernelInfo `json:"kernel_fast_commit,omitempty"`
}

// MachineInfo is the machine a run measured, and its load before and
// after.
type MachineInfo struct {
	OS         string `json:"os"`
	Arch       string `json:"arch"`
	CPUs       int    `json:"cpus"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	CPUModel   string `json:"cpu_model,omitempty"`
	MemTotal   string `json:"mem_total,omitempty"`
	Kernel     string `json:"kernel_release,omitempty"`
	GoVersion  string `json:"go_version"`
	LoadBefore string `json:"loadavg_before"`
	LoadAfter  string `json:"loadavg_after"`
}

// ReportConfig is the run's configuration as the report gives it.
type ReportConfig struct {
	Backend        string  `json:"backend"`
	Device         string  `json:"device"`
	DeviceBytes    int64   `json:"device_bytes"`
	RegionBytes    int64   `json:"region_bytes"`
	RawAt          string  `json:"raw_at"` // "file" or "region" (--raw-at)
	RuntimeSeconds float64 `json:"runtime_seconds"`
	Rounds         int     `json:"rounds"` // phases per side within a workload (run raw, engine, engine, raw)
	Repeat         int     `json:"repeat"` // rounds over the workload list (--repeat)
	BlockSize      int     `json:"block_size"`
	Seed           uint64  `json:"seed"`
	Space          string  `json:"space_plan"` // spacePlan.summary
}

// Measure is one side's figures for a workload.
type Measure struct {
	Ops     int64   `json:"ops"`
	Seconds float64 `json:"seconds"`
	IOPS    float64 `json:"iops"`
	MBps    float64 `json:"mb_per_s"`
	P50us   float64 `json:"p50_us"`
	P99us   float64 `json:"p99_us"`
	MaxUs   float64 `json:"max_us,omitempty"`
	// Device operations per workload operation (engine and raw sides).
	Device     *DevPerOp `json:"device_per_op,omitempty"`
	PrepSecond float64   `json:"prep_seconds,omitempty"`
	// CPUus is the process's CPU time (user and system, every thread)
	// per operation during the phases: the I/O path's own CPU and the
	// kernel's for the syscalls it makes, plus anything running beside it
	// (the engine's background work; raw has none). Zero where the
	// platform does not report it.
	CPUus float64 `json:"cpu_us_per_op,omitempty"`
	// Faults is the process's page faults (minor and major) per
	// operation during the phases. On the mmap backend and wherever the
	// host's page cache holds the image, they are part of the device's
	// cost, and the engine's and raw's regions can be in different
	// states. Zero where the platform does not report it.
	Faults float64 `json:"faults_per_op,omitempty"`
	// Disk is the I/O the host's block device under the image completed
	// per operation during the phases, from every process on the host
	// (Linux, image on a block device; nil otherwise). With the file and
	// mmap backends it tells whether the phases reached the disk or ran
	// in the host's page cache, whose own write-back it also counts.
	Disk *DiskPerOp `json:"host_disk_per_op,omitempty"`
	// ImageGrowth is the bytes per operation by which the image file's
	// allocation grew during the phases: the holes of a sparse image the
	// side wrote into, which the host allocated (holes.go). Zero on
	// block devices, the memory and NBD backends, and where the platform
	// has no st_blocks.
	ImageGrowth float64 `json:"image_growth_bytes_per_op,omitempty"`
	// Wraps counts the times the side started its file over at the
	// space plan's budget (sequential writes) or reused a small file's
	// name (fsync-small).
	Wraps int64 `json:"wraps,omitempty"`
	// WrapSeconds is the time the side spent starting its sequential
	// file over (the engine: truncate and commit; raw: a flush), part of
	// Seconds.
	WrapSeconds float64       `json:"wrap_seconds,omitempty"`
	disk        diskSnap      // the I/O behind Disk
	dev         devSnap       // the device operations behind Device
	cpu         time.Duration // the CPU time behind CPUus
	faults      int64         // the page faults behind Faults
	growth      int64         // the bytes behind ImageGrowth
}

// DevPerOp is the device operations (and bytes) a side issued per
// workload operation, counted by its window.
type DevPerOp struct {
	Reads, Writes, Flushes, ZeroOuts, Discards float64
	ReadBytes, WriteBytes                      float64
}

// WorkloadResult is one workload's row: each side's figures combined
// over the rounds, their ratios, and each round's figures.
type WorkloadResult struct {
	Name           string   `json:"name"`
	Title          string   `json:"title"`
	Jobs           int      `json:"jobs"`
	IOSize         int      `json:"io_size"`
	Prep           string   `json:"prep"`
	Engine         Measure  `json:"engine"`
	Raw            Measure  `json:"raw"`
	Kernel         *Measure `json:"kernel,omitempty"`
	EngineOverRaw  float64  `json:"engine_over_raw"`
	EngineOverKern *float64 `json:"engine_over_kernel,omitempty"`
	KernelOverRaw  *float64 `json:"kernel_over_raw,omitempty"`
	KernelNote     string   `json:"kernel_note,omitempty"`
	// KernelFC and its ratios are Linux's figures with fast_commit
	// (Report.KernelFC), for the workloads fastCommitMatters selects.
	KernelFC         *Measure           `json:"kernel_fast_commit,omitempty"`
	EngineOverKernFC *float64           `json:"engine_over_kernel_fast_commit,omitempty"`
	KernelFCOverRaw  *float64           `json:"kernel_fast_commit_over_raw,omitempty"`
	KernelFCNote     string             `json:"kernel_fast_commit_note,omitempty"`
	Failed           string             `json:"failed,omitempty"` // the error, one line; the figures are of the rounds that did not fail
	Counters         map[string]float64 `json:"engine_counters,omitempty"`
	Rounds           []RoundResult      `json:"rounds"`
	gauges           map[string]bool    // the keys of Counters that are gauges
}

// RoundResult is a workload's figures in one round (Config.Repeat). Ratios
// between workloads divide figures of the same round.
type RoundResult struct {
	Round          int      `json:"round"`    // from 1
	Position       int      `json:"position"` // from 1, in the order the round ran
	EngineIOPS     float64  `json:"engine_iops"`
	EngineMBps     float64  `json:"engine_mb_per_s"`
	RawIOPS        float64  `json:"raw_iops"`
	RawMBps        float64  `json:"raw_mb_per_s"`
	KernelIOPS     *float64 `json:"kernel_iops,omitempty"`
	KernelMBps     *float64 `json:"kernel_mb_per_s,omitempty"`
	EngineOverRaw  float64  `json:"engine_over_raw"`
	EngineOverKern *float64 `json:"engine_over_kernel,omitempty"`
	KernelOverRaw  *float64 `json:"kernel_over_raw,omitempty"`
	// Linux with fast_commit (WorkloadResult.KernelFC).
	KernelFCIOPS     *float64 `json:"kernel_fast_commit_iops,omitempty"`
	KernelFCMBps     *float64 `json:"kernel_fast_commit_mb_per_s,omitempty"`
	EngineOverKernFC *float64 `json:"engine_over_kernel_fast_commit,omitempty"`
	KernelFCOverRaw  *float64 `json:"kernel_fast_commit_over_raw,omitempty"`
}

// WorkloadRatio is one workload's figure over another's, per side: the
// median of the per-round ratios, and those (null where a side did not
// measure both in that round).
type WorkloadRatio struct {
	Name         string     `json:"name"` // "num/den"
	Engine       float64    `json:"engine"`
	Raw          float64    `json:"raw"`
	Kernel       *float64   `json:"kernel,omitempty"`
	EngineRounds []*float64 `json:"engine_rounds"`
	RawRounds    []*float64 `json:"raw_rounds"`
	KernelRounds []*float64 `json:"kernel_rounds,omitempty"`
	// OverRaw divides the two workloads' eng/raw round by round: the
	// engine ratio with the device's drift between the two workloads'
	// minutes taken out, when both raw sides do the same I/O (fallocated
	// and overwrite workloads both overwrite the raw region).
	OverRaw       float64    `json:"eng_over_raw"`
	OverRawRounds []*float64 `json:"eng_over_raw_rounds"`
}

// workloadPairs are the ratios between workloads the report gives: writes
// into a fallocated or write-zeroed file against overwrites of a written one.
var workloadPairs = [][2]string{
	{"fallocated-16", "overwrite-16"},
	{"fallocated-2", "overwrite-2"},
	{"writezeroes-16", "overwrite-16"},
	{"writezeroes-2", "overwrite-2"},
}

// KernelInfo says whether the Linux column (Config.Kernel) ran, and why not.
type KernelInfo struct {
	Ran     bool     `json:"ran"`
	Skipped string   `json:"skipped,omitempty"`
	Backing string   `json:"backing,omitempty"`
	Fio     string   `json:"fio_version,omitempty"`
	Notes   []string `json:"notes,omitempty"`
}

func newReport(c *config, desc string, size, region int64) *Report {
	return &Report{
		Schema:  Schema,
		Started: time.Now().UTC().Truncate(time.Second),
		Machine: MachineInfo{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
			CPUModel: procField("/proc/cpuinfo", "model name"), MemTotal: procField("/proc/meminfo", "MemTotal"),
			Kernel: strings.TrimSpace(readSmall("/proc/sys/kernel/osrelease")), GoVersion: runtime.Version(), LoadBefore: loadAvg()},
		Config: ReportConfig{Backend: c.Backend, Device: desc, DeviceBytes: size, RegionBytes: region, RawAt: rawAtName(c),
			RuntimeSeconds: c.Runtime.Seconds(), Rounds: benchRounds, Repeat: c.Repeat, BlockSize: c.BlockSize, Seed: c.Seed},
		Notes: notesFor(c),
	}
}

// notesFor returns the engine notes with the split mode the run used.
func notesFor(c *config) []string {
	split := "direct writes into unwritten extents leave the extent tree alone: the completion marks the blocks written beside the extent-status cache and queues the conversion, which the tree takes in sorted batches (at the latest with the next journal commit)"
	if c.EagerConversions {
		split = "--eager-conversions: direct writes into unwritten extents split them at submission (each in-flight write owns its extent) and convert at completion (Options.Tuning.EagerConversions)"
	}
	if c.DeferSplits {
		split = "--defer-splits: direct writes into unwritten extents split and convert at I/O completion (Options.Tuning.DeferSplits)"
	}
	if c.AtomicJournalMax != 0 {
		split += fmt.Sprintf("; --atomic-journal-max %d (Options.Tuning.AtomicJournalMax)", c.AtomicJournalMax)
	}
	if c.ZeroOutChunk > 0 {
		split += fmt.Sprintf("; --zeroout-chunk %d: the first direct write into each %d-byte chunk of preallocated space zeroes and converts the chunk, later ones are overwrites (Options.Tuning.ZeroOutChunk)", c.ZeroOutChunk, c.ZeroOutChunk)
	}
	raw := "raw = the same backend doing the same offsets with pread/pwrite on the same device, at the device blocks of the engine's file for workloads on a prepared file (a binary search of its extents per I/O, 5-14 ns in BenchmarkRawSideAt; a write-zeroes file's blocks are zeroed again before each phase, raw's and the engine's) and for the direct sequential writer of a new file (at the blocks of the file its preparation wrote, which the engine's passes take again), in a region of its own for the other fresh-file workloads; it is the ceiling"
	if c.RawAtRegion {
		raw = "raw = the same backend doing the same offsets with pread/pwrite on a region of the same device (--raw-at region); it is the ceiling"
	}
	raw = strings.Replace(raw, "; it is the ceiling", "; each phase starts with the device flushed, and a sequential writer flushes it when it starts over, as the engine's commit does; it is the ceiling", 1)
	if c.Backend == "nbd" {
		// Not pread/pwrite: NBD requests, on the connections the engine uses.
		raw = strings.Replace(raw, "with pread/pwrite on", "with NBD reads and writes over the same connections to", 1)
	}
	return append(append([]string(nil), engineVersionNotes...), raw, split)
}

func rawAtName(c *config) string {
	if c.RawAtRegion {
		return "region"
	}
	return "file"
}

// oneLine is err's message on one line.
func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", " ")
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

func makeMeasure(t *phaseTotals, ioSize int) Measure {
	m := Measure{Ops: t.ops, Seconds: t.elapsed.Seconds(), PrepSecond: t.prep.Seconds(), Wraps: t.wraps, WrapSeconds: t.wrapTime.Seconds(), dev: t.dev, cpu: t.cpu, faults: t.faults}
	m.CPUus = cpuPerOp(t.cpu, t.ops)
	m.Faults = faultsPerOp(t.faults, t.ops)
	if t.diskOK {
		m.disk, m.Disk = t.disk, diskPer(t.disk, t.ops)
	}
	if t.imageOK {
		m.growth, m.ImageGrowth = t.imageGrowth, faultsPerOp(t.imageGrowth, t.ops)
	}
	if t.elapsed > 0 {
		m.IOPS = float64(t.ops) / t.elapsed.Seconds()
		m.MBps = m.IOPS * float64(ioSize) / 1e6
	}
	m.P50us = float64(t.hist.Quantile(0.5)) / 1e3
	m.P99us = float64(t.hist.Quantile(0.99)) / 1e3
	m.MaxUs = float64(t.hist.Max()) / 1e3
	m.Device = perOp(t.dev, t.ops)
	return m
}

// faultsPerOp is n per operation; 0 for no operations.
func faultsPerOp(n, ops int64) float64 {
	if ops <= 0 {
		return 0
	}
	return float64(n) / float64(ops)
}

// cpuPerOp is d per operation in µs; 0 for no operations or no CPU figure.
func cpuPerOp(d time.Duration, ops int64) float64 {
	if ops <= 0 {
		return 0
	}
	return float64(d.Nanoseconds()) / 1e3 / float64(ops)
}

// perOp divides device operations by workload operations; nil for none.
func perOp(d devSnap, ops int64) *DevPerOp {
	if ops <= 0 {
		return nil
	}
	n := float64(ops)
	return &DevPerOp{float64(d.Reads) / n, float64(d.Writes) / n, float64(d.Flushes) / n,
		float64(d.ZeroOuts) / n, float64(d.Discards) / n, float64(d.ReadBytes) / n, float64(d.WriteBytes) / n}
}

func makeResult(w workload, jobs int, eng, raw *phaseTotals) WorkloadResult {
	r := WorkloadResult{Name: w.Name, Title: w.Title, Jobs: jobs, IOSize: w.IOSize, Prep: prepNames[w.Prep],
		Engine: makeMeasure(eng, w.IOSize), Raw: makeMeasure(raw, w.IOSize), Counters: eng.counters, gauges: eng.gauges}
	if r.Raw.IOPS > 0 {
		r.EngineOverRaw = r.Engine.IOPS / r.Raw.IOPS
	}
	return r
}

// failedResult is w's result when it failed with err: no figures.
func failedResult(w workload, jobs int, err error) WorkloadResult {
	return WorkloadResult{Name: w.Name, Title: w.Title, Jobs: jobs, IOSize: w.IOSize, Prep: prepNames[w.Prep],
		Failed: oneLine(err)}
}

// roundSample is a workload's result in one round (from 1) and its
// position (from 1) in that round's order.
type roundSample struct {
	round, pos int
	res        WorkloadResult
}

// combineRounds reduces each workload's rounds (samples[i], in round
// order) to one result, and computes workloadPairs over the same rounds.
func combineRounds(samples [][]roundSample) ([]WorkloadResult, []WorkloadRatio) {
	out := make([]WorkloadResult, len(samples))
	byName := map[string][]roundSample{}
	for i, ss := range samples {
		out[i] = combineWorkload(ss)
		byName[out[i].Name] = ss
	}
	var ratios []WorkloadRatio
	for _, p := range workloadPairs {
		if num, den := byName[p[0]], byName[p[1]]; num != nil && den != nil {
			ratios = append(ratios, pairRatio(p[0]+"/"+p[1], num, den))
		}
	}
	return out, ratios
}

// combineWorkload: rates and latency percentiles are medians over the
// rounds, max latency the max, ops, seconds and prep time sums; device ops
// and engine counters are summed (gauges: the last round's), so their per-op
// values are pooled over the rounds. The ratios are medians of the ratios
// within each round, not ratios of the medians.
func combineWorkload(ss []roundSample) WorkloadResult {
	f := &ss[0].res
	out := WorkloadResult{Name: f.Name, Title: f.Title, Jobs: f.Jobs, IOSize: f.IOSize, Prep: f.Prep}
	u := f.unit()
	var eng, raw, kern, kernFC []Measure
	var eor []float64
	var eok, kor, eokFC, kforFC []*float64
	var notes, notesFC, failed []string
	for _, s := range ss {
		r := &s.res
		if r.Failed != "" {
			f := r.Failed
			if len(ss) > 1 {
				f = fmt.Sprintf("round %d: %s", s.round, f)
			}
			failed = append(failed, f)
			continue
		}
		rr := RoundResult{Round: s.round, Position: s.pos, EngineIOPS: r.Engine.IOPS, EngineMBps: r.Engine.MBps,
			RawIOPS: r.Raw.IOPS, RawMBps: r.Raw.MBps, EngineOverRaw: r.EngineOverRaw}
		eng, raw = append(eng, r.Engine), append(raw, r.Raw)
		if r.Raw.IOPS > 0 {
			eor = append(eor, r.EngineOverRaw)
		}
		if k := r.Kernel; k != nil {
			kern = append(kern, *k)
			iops, mbps := k.IOPS, k.MBps
			rr.KernelIOPS, rr.KernelMBps = &iops, &mbps
			rr.EngineOverKern = ratioOf(r.Engine.figure(u), k.figure(u))
			rr.KernelOverRaw = ratioOf(k.figure(u), r.Raw.figure(u))
			eok, kor = append(eok, rr.EngineOverKern), append(kor, rr.KernelOverRaw)
		}
		if k := r.KernelFC; k != nil {
			kernFC = append(kernFC, *k)
			iops, mbps := k.IOPS, k.MBps
			rr.KernelFCIOPS, rr.KernelFCMBps = &iops, &mbps
			rr.EngineOverKernFC = ratioOf(r.Engine.figure(u), k.figure(u))
			rr.KernelFCOverRaw = ratioOf(k.figure(u), r.Raw.figure(u))
			eokFC, kforFC = append(eokFC, rr.EngineOverKernFC), append(kforFC, rr.KernelFCOverRaw)
		}
		notes = addNote(notes, r.KernelNote, s.round, len(ss))
		notesFC = addNote(notesFC, r.KernelFCNote, s.round, len(ss))
		for k, v := range r.Counters {
			if out.Counters == nil {
				out.Counters, out.gauges = map[string]float64{}, map[string]bool{}
			}
			if r.gauges[k] {
				out.Counters[k], out.gauges[k] = v, true
			} else {
				out.Counters[k] += v
			}
		}
		out.Rounds = append(out.Rounds, rr)
	}
	out.Engine, out.Raw = combineMeasures(eng), combineMeasures(raw)
	if len(eor) > 0 {
		out.EngineOverRaw = median(eor)
	}
	if len(kern) > 0 {
		k := combineMeasures(kern)
		out.Kernel = &k
	}
	if x, ok := medianOf(eok); ok {
		out.EngineOverKern = &x
	}
	if x, ok := medianOf(kor); ok {
		out.KernelOverRaw = &x
	}
	if len(kernFC) > 0 {
		k := combineMeasures(kernFC)
		out.KernelFC = &k
	}
	if x, ok := medianOf(eokFC); ok {
		out.EngineOverKernFC = &x
	}
	if x, ok := medianOf(kforFC); ok {
		out.KernelFCOverRaw = &x
	}
	out.KernelNote = strings.Join(notes, "; ")
	out.KernelFCNote = strings.Join(notesFC, "; ")
	out.Failed = strings.Join(failed, "; ")
	return out
}

// addNote appends a round's Linux note n to notes unless it is there
// already; a failure says its round when there are several.
func addNote(notes []string, n string, round, rounds int) []string {
	if n == "" {
		return notes
	}
	if rounds > 1 && strings.HasPrefix(n, "failed: ") {
		n = fmt.Sprintf("round %d %s", round, n)
	}
	if slices.Contains(notes, n) {
		return notes
	}
	return append(notes, n)
}

// combineMeasures reduces one side's rounds as combineWorkload says.
func combineMeasures(ms []Measure) Measure {
	var c Measure
	if len(ms) == 0 {
		return c // every round failed
	}
	var iops, mbps, p50, p99 []float64
	pooled, diskPooled := true, len(ms) > 0
	for _, m := range ms {
		c.Ops += m.Ops
		c.Seconds += m.Seconds
		c.PrepSecond += m.PrepSecond
		c.Wraps += m.Wraps
		c.WrapSeconds += m.WrapSeconds
		c.MaxUs = max(c.MaxUs, m.MaxUs)
		c.dev = c.dev.add(m.dev)
		c.cpu += m.cpu
		c.faults += m.faults
		c.growth += m.growth
		c.disk = c.disk.add(m.disk)
		pooled = pooled && m.Device != nil
		diskPooled = diskPooled && m.Disk != nil
		iops, mbps = append(iops, m.IOPS), append(mbps, m.MBps)
		p50, p99 = append(p50, m.P50us), append(p99, m.P99us)
	}
	c.IOPS, c.MBps, c.P50us, c.P99us = median(iops), median(mbps), median(p50), median(p99)
	if pooled {
		c.Device = perOp(c.dev, c.Ops)
	}
	c.CPUus = cpuPerOp(c.cpu, c.Ops)
	c.Faults = faultsPerOp(c.faults, c.Ops)
	c.ImageGrowth = faultsPerOp(c.growth, c.Ops)
	if diskPooled {
		c.Disk = diskPer(c.disk, c.Ops)
	} else {
		c.disk = diskSnap{}
	}
	return c
}

// pairRatio divides num's figures by den's round by round, per side.
func pairRatio(name string, num, den []roundSample) WorkloadRatio {
	wr := WorkloadRatio{Name: name}
	kernel := false
	for k := range min(len(num), len(den)) {
		a, b := &num[k].res, &den[k].res
		u := a.unit()
		wr.EngineRounds = append(wr.EngineRounds, ratioOf(a.Engine.figure(u), b.Engine.figure(u)))
		wr.RawRounds = append(wr.RawRounds, ratioOf(a.Raw.figure(u), b.Raw.figure(u)))
		var or *float64
		if e, r := wr.EngineRounds[k], wr.RawRounds[k]; e != nil && r != nil {
			or = ratioOf(*e, *r)
		}
		wr.OverRawRounds = append(wr.OverRawRounds, or)
		var kr *float64
		if a.Kernel != nil && b.Kernel != nil {
			kr = ratioOf(a.Kernel.figure(u), b.Kernel.figure(u))
			kernel = kernel || kr != nil
		}
		wr.KernelRounds = append(wr.KernelRounds, kr)
	}
	wr.Engine, _ = medianOf(wr.EngineRounds)
	wr.Raw, _ = medianOf(wr.RawRounds)
	wr.OverRaw, _ = medianOf(wr.OverRawRounds)
	if kernel {
		x, _ := medianOf(wr.KernelRounds)
		wr.Kernel = &x
	} else {
		wr.KernelRounds = nil
	}
	return wr
}

// ratioOf returns num/den, nil unless both are positive.
func ratioOf(num, den float64) *float64 {
	if !(num > 0 && den > 0) {
		return nil
	}
	x := num / den
	return &x
}

// medianOf is the median of the non-nil values; false when there are none.
func medianOf(ps []*float64) (float64, bool) {
	var xs []float64
	for _, p := range ps {
		if p != nil {
			xs = append(xs, *p)
		}
	}
	if len(xs) == 0 {
		return 0, false
	}
	return median(xs), true
}

// median returns the median of xs: the middle value, or for an even count
// the mean of the two middle values; NaN for none. xs is not modified.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// unit is the figure a workload is read by.
func (r *WorkloadResult) unit() string {
	if r.IOSize >= 1<<20 || r.Name == "buffered-4k" || r.Name == "seqread-4k" {
		return "MB/s"
	}
	return "IOPS"
}

func (m *Measure) figure(unit string) float64 {
	if m == nil {
		return math.NaN()
	}
	if unit == "MB/s" {
		return m.MBps
	}
	return m.IOPS
}

// WriteText writes the report for people: header, engine notes, the
// table, per-operation figures, the Linux column's notes and the verdict.
func (rep *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "ext4io bench (%s)\n", rep.Schema)
	fmt.Fprintf(w, "machine: %s/%s, %d CPUs %s, %s, Linux %s, %s, GOMAXPROCS %d; load %s before, %s after\n",
		rep.Machine.OS, rep.Machine.Arch, rep.Machine.CPUs, rep.Machine.CPUModel, rep.Machine.MemTotal,
		rep.Machine.Kernel, rep.Machine.GoVersion, rep.Machine.GOMAXPROCS, rep.Machine.LoadBefore, rep.Machine.LoadAfter)
	c := rep.Config
	fmt.Fprintf(w, "device: %s; raw at %s; raw region and file size %d MiB; %s per workload (%d phases per side, ABBA); block size %d\n",
		c.Device, c.RawAt, c.RegionBytes>>20, time.Duration(c.RuntimeSeconds*float64(time.Second)), c.Rounds, c.BlockSize)
	fmt.Fprintln(w, c.Space)
	if c.Repeat > 1 {
		fmt.Fprintf(w, "repeat: %d rounds over the workloads, odd rounds as listed, even rounds reversed; figures are medians over the rounds "+
			"(max µs: the max; ops, seconds, prep: sums; device ops, CPU and counters per op: pooled); eng/raw, %s: "+
			"medians of the per-round ratios, not ratios of the medians\n", c.Repeat, rep.ratioNames())
	}
	fmt.Fprintln(w, "engine version notes:")
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "  - %s\n", n)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	kern, kernFC, lk := rep.Kernel.Ran, rep.KernelFC != nil && rep.KernelFC.Ran, rep.linuxLabel()
	hdr := "workload\tjobs\tunit\tengine\tp50 µs\tp99 µs\traw\tp50 µs\tp99 µs\teng/raw\t"
	if kern {
		hdr += lk + "\tp50 µs\tp99 µs\teng/" + lk + "\t" + lk + "/raw\t"
	}
	if kernFC {
		hdr += "linux-fc\tp50 µs\tp99 µs\teng/linux-fc\tlinux-fc/raw\t"
	}
	fmt.Fprintln(tw, hdr)
	for i := range rep.Workloads {
		r := &rep.Workloads[i]
		u := r.unit()
		if r.Failed != "" && r.Engine.Ops == 0 {
			// Unterminated last cell: the message does not widen a column.
			fmt.Fprintf(tw, "%s\t%d\t%s\tFAILED: %s\n", r.Name, r.Jobs, u, r.Failed)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.2f\t", r.Name, r.Jobs, u,
			benchstat.FormatNumber(r.Engine.figure(u)), us(r.Engine.P50us), us(r.Engine.P99us),
			benchstat.FormatNumber(r.Raw.figure(u)), us(r.Raw.P50us), us(r.Raw.P99us), r.EngineOverRaw)
		if kern {
			if r.Kernel != nil {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t", benchstat.FormatNumber(r.Kernel.figure(u)), us(r.Kernel.P50us),
					us(r.Kernel.P99us), ratioText(r.EngineOverKern), ratioText(r.KernelOverRaw))
			} else {
				fmt.Fprintf(tw, "-\t-\t-\t-\t-\t")
			}
		}
		if kernFC {
			if k := r.KernelFC; k != nil {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t", benchstat.FormatNumber(k.figure(u)), us(k.P50us),
					us(k.P99us), ratioText(r.EngineOverKernFC), ratioText(r.KernelFCOverRaw))
			} else {
				fmt.Fprintf(tw, "-\t-\t-\t-\t-\t")
			}
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintln(w)
	if c.Repeat > 1 && len(rep.Ratios) > 0 {
		writeRatios(w, rep.Ratios, kern, lk)
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "per operation (device ops issued by the engine / by raw; process CPU time per op, engine / raw; page faults per op; KiB the host disk under the image wrote and read per op, all processes; holes: KiB of the image file's holes the side wrote into per op, engine / raw; engine counters per op; wraps: files started over at the space plan's budget, engine / raw, and the time the sequential writers' restarts took inside the phases; prep time):")
	for i := range rep.Workloads {
		r := &rep.Workloads[i]
		fmt.Fprintf(w, "  %-15s %s\n", r.Name, perOpLine(r))
	}
	if kern {
		fmt.Fprintf(w, "\n%s: fio %s on ext4 over a loop device (direct-io=on) backed by a file in %s\n", lk, rep.Kernel.Fio, rep.Kernel.Backing)
		for _, n := range rep.Kernel.Notes {
			fmt.Fprintf(w, "  - %s\n", n)
		}
		for i := range rep.Workloads {
			if n := rep.Workloads[i].KernelNote; n != "" {
				fmt.Fprintf(w, "  - %s: %s\n", rep.Workloads[i].Name, n)
			}
		}
	} else {
		fmt.Fprintf(w, "\n%s column skipped: %s\n", lk, rep.Kernel.Skipped)
	}
	if kfc := rep.KernelFC; kfc != nil && kfc.Ran {
		fmt.Fprintf(w, "linux-fc: fio %s on ext4 with fast_commit over a second loop device (direct-io=on) backed by a file in %s\n", kfc.Fio, kfc.Backing)
		for _, n := range kfc.Notes {
			fmt.Fprintf(w, "  - %s\n", n)
		}
		for i := range rep.Workloads {
			r := &rep.Workloads[i]
			if r.KernelFC != nil {
				fmt.Fprintf(w, "  - %s: eng/%s %s, eng/linux-fc %s (medians: linux-fc/%s %s)\n", r.Name, lk, ratioText(r.EngineOverKern),
					ratioText(r.EngineOverKernFC), lk, ratioText(ratioOf(r.KernelFC.figure(r.unit()), r.Kernel.figure(r.unit()))))
			}
			if n := r.KernelFCNote; n != "" {
				fmt.Fprintf(w, "  - %s (linux-fc): %s\n", r.Name, n)
			}
		}
	} else if kfc != nil {
		fmt.Fprintf(w, "linux-fc column skipped: %s\n", kfc.Skipped)
	}
	fmt.Fprintln(w)
	writeVerdict(w, rep)
}

// linuxLabel names the Linux column: "linux", or "linux-default" when
// the run has a second one with fast_commit (Report.KernelFC).
func (rep *Report) linuxLabel() string {
	if rep.KernelFC != nil {
		return "linux-default"
	}
	return "linux"
}

// ratioNames lists the ratios of the table's columns, for the header.
func (rep *Report) ratioNames() string {
	lk := rep.linuxLabel()
	s := "eng/" + lk + ", " + lk + "/raw"
	if rep.KernelFC != nil {
		s += ", eng/linux-fc, linux-fc/raw"
	}
	return s
}

// onPar is the band around 1.0 that writeVerdict calls on par.
const onPar = 0.05

// verdictWord reads a ratio of the engine's figure over another's
// (higher is better for both IOPS and MB/s).
func verdictWord(x float64) string {
	switch {
	case !(x > 0):
		return "not measured"
	case x > 1+onPar:
		return "faster"
	case x < 1-onPar:
		return "slower"
	}
	return "on par (within 5%)"
}

// writeVerdict ends the report with one line per workload: the engine
// against raw (the ceiling) and against Linux when measured.
func writeVerdict(w io.Writer, rep *Report) {
	head := "verdict (engine against raw, the ceiling, and against Linux when measured; on par = within 5%):"
	if rep.KernelFC != nil {
		head = "verdict (engine against raw, the ceiling, and against Linux when measured: linux-default at mkfs.ext4's defaults, linux-fc with fast_commit; on par = within 5%):"
	}
	fmt.Fprintln(w, head)
	lk := rep.linuxLabel()
	for i := range rep.Workloads {
		r := &rep.Workloads[i]
		fmt.Fprintf(w, "  %-15s ", r.Name)
		if r.Failed != "" && r.Engine.Ops == 0 {
			fmt.Fprintf(w, "FAILED: %s\n", r.Failed)
			continue
		}
		fmt.Fprintf(w, "%.2f× raw: %s", r.EngineOverRaw, verdictWord(r.EngineOverRaw))
		if r.EngineOverKern != nil {
			fmt.Fprintf(w, "; %.2f× %s: %s", *r.EngineOverKern, lk, verdictWord(*r.EngineOverKern))
		}
		if r.EngineOverKernFC != nil {
			fmt.Fprintf(w, "; %.2f× linux-fc: %s", *r.EngineOverKernFC, verdictWord(*r.EngineOverKernFC))
		}
		if r.Failed != "" {
			fmt.Fprintf(w, "; FAILED in some rounds: %s", r.Failed)
		}
		fmt.Fprintln(w)
	}
}

// writeRatios prints the ratios between workloads, each round's in brackets.
func writeRatios(w io.Writer, ratios []WorkloadRatio, kern bool, lk string) {
	fmt.Fprintln(w, "ratios between workloads (median of per-round ratios; rounds 1, 2, ... in brackets; eng/raw: the engine's ratio over raw's, which takes out the device's drift between the two workloads):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range ratios {
		fmt.Fprintf(tw, "  %s\tengine %.2f %s\traw %.2f %s\teng/raw %.2f %s", r.Name, r.Engine, roundsText(r.EngineRounds),
			r.Raw, roundsText(r.RawRounds), r.OverRaw, roundsText(r.OverRawRounds))
		if kern {
			fmt.Fprintf(tw, "\t%s %s %s", lk, ratioText(r.Kernel), roundsText(r.KernelRounds))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

func roundsText(ps []*float64) string {
	f := make([]string, len(ps))
	for i, p := range ps {
		f[i] = ratioText(p)
	}
	return "[" + strings.Join(f, " ") + "]"
}

func ratioText(p *float64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *p)
}

func us(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func perOpLine(r *WorkloadResult) string {
	var b strings.Builder
	dev := func(d *DevPerOp) string {
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
	if r.Engine.CPUus > 0 && r.Raw.CPUus > 0 {
		fmt.Fprintf(&b, "  cpu %.2f / %.2f µs", r.Engine.CPUus, r.Raw.CPUus)
	}
	if r.Engine.Faults > 0 || r.Raw.Faults > 0 {
		fmt.Fprintf(&b, "  faults %.3f / %.3f", r.Engine.Faults, r.Raw.Faults)
	}
	if e, w := r.Engine.Disk, r.Raw.Disk; e != nil && w != nil {
		fmt.Fprintf(&b, "  disk KiB w%.1f r%.1f / w%.1f r%.1f", e.WriteBytes/1024, e.ReadBytes/1024, w.WriteBytes/1024, w.ReadBytes/1024)
	}
	if math.Abs(r.Engine.ImageGrowth) >= 51.2 || math.Abs(r.Raw.ImageGrowth) >= 51.2 { // 0.05 KiB: what %.1f shows
		fmt.Fprintf(&b, "  holes KiB %.1f / %.1f", r.Engine.ImageGrowth/1024, r.Raw.ImageGrowth/1024)
	}
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
	if r.Engine.Wraps > 0 || r.Raw.Wraps > 0 {
		// Started over at the space plan's budget (see space.go).
		fmt.Fprintf(&b, "  wraps %d/%d", r.Engine.Wraps, r.Raw.Wraps)
		if r.Engine.WrapSeconds > 0 || r.Raw.WrapSeconds > 0 {
			fmt.Fprintf(&b, " in %.1f/%.1f ms", r.Engine.WrapSeconds*1e3, r.Raw.WrapSeconds*1e3)
		}
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

// WriteSVG writes the report as an SVG bar chart: each workload's
// figures, and its ratios to raw on one scale.
func (rep *Report) WriteSVG(w io.Writer) error {
	series := []string{"ext4io engine", "raw device"}
	kernFC := rep.KernelFC != nil && rep.KernelFC.Ran
	if rep.Kernel.Ran {
		if rep.KernelFC != nil {
			series = append(series, "Linux ext4, defaults (fio, loop)")
		} else {
			series = append(series, "Linux ext4 (fio, loop)")
		}
	}
	if kernFC {
		series = append(series, "Linux ext4, fast_commit (fio, loop)")
	}
	ch := benchstat.Chart{
		Title:  "ext4io bench: engine vs raw" + map[bool]string{true: " vs Linux", false: ""}[rep.Kernel.Ran],
		Note:   fmt.Sprintf("%s; %d CPUs; %s backend; load %s", rep.Started.Format(time.DateTime), rep.Machine.CPUs, rep.Config.Backend, rep.Machine.LoadBefore),
		Series: series,
		// The ratios to raw, the ceiling, on one scale.
		RatioTitle:  "ratio to the raw device (the ceiling)",
		RatioSeries: []string{"engine / raw"},
		RatioColors: []int{0},
		RefLabel:    "raw = 1.0",
	}
	if rep.Kernel.Ran {
		ch.RatioSeries, ch.RatioColors = append(ch.RatioSeries, "Linux / raw"), append(ch.RatioColors, 2)
	}
	for i := range rep.Workloads {
		r := &rep.Workloads[i]
		u := r.unit()
		vals := []float64{r.Engine.figure(u), r.Raw.figure(u)}
		ratios := []float64{r.EngineOverRaw}
		if rep.Kernel.Ran {
			vals = append(vals, r.Kernel.figure(u))
			ratios = append(ratios, math.NaN())
			if r.KernelOverRaw != nil {
				ratios[1] = *r.KernelOverRaw
			}
		}
		if kernFC {
			vals = append(vals, r.KernelFC.figure(u))
		}
		label := fmt.Sprintf("%s (%.2f× raw)", r.Name, r.EngineOverRaw)
		if r.Failed != "" && r.Engine.Ops == 0 {
			label = r.Name + " (FAILED)"
			ratios[0] = math.NaN()
		}
		ch.Groups = append(ch.Groups, benchstat.Group{Label: label, Unit: u, Values: vals})
		ch.Ratios = append(ch.Ratios, benchstat.Group{Label: fmt.Sprintf("%s: %s", r.Name, verdictWord(ratios[0])), Values: ratios})
	}
	return ch.WriteSVG(w)
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

// newProgress returns the progress line on w; nil draws nothing.
func newProgress(w io.Writer) *progress { return &progress{w: w, on: w != nil} }

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
