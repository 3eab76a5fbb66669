package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/blockdevtest"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// mem is the Config of a short run on a memory device of size bytes.
func mem(size int64, runtime time.Duration, workloads ...string) Config {
	return Config{Backend: "memory", Size: size, Runtime: runtime, Seed: 1, Workloads: workloads}
}

// run runs c and returns the report, which it checks has no failed
// workload, and its text form.
func run(t *testing.T, c Config) (*Report, string) {
	t.Helper()
	rep, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	rep.WriteText(&b)
	return rep, b.String()
}

// viaJSON encodes rep as JSON and decodes it again, every field known.
func viaJSON(t *testing.T, rep *Report) *Report {
	t.Helper()
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var out Report
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("decoding JSON: %v\n%s", err, b)
	}
	return &out
}

// TestBenchMemoryJSON runs every workload briefly on the memory backend
// and checks the JSON document and the SVG chart.
func TestBenchMemoryJSON(t *testing.T) {
	r0, _ := run(t, mem(128<<20, 100*time.Millisecond))
	rep := *viaJSON(t, r0)
	var svg bytes.Buffer
	if err := r0.WriteSVG(&svg); err != nil {
		t.Fatal(err)
	}
	if rep.Schema != Schema || rep.Config.Backend != "memory" || rep.Config.RegionBytes != 32<<20 || len(rep.Notes) == 0 {
		t.Fatalf("header: %+v %+v", rep.Schema, rep.Config)
	}
	if rep.Kernel.Ran || rep.Kernel.Skipped == "" {
		t.Fatalf("kernel: %+v", rep.Kernel)
	}
	if len(rep.Workloads) != len(allWorkloads) {
		t.Fatalf("%d workloads, want %d", len(rep.Workloads), len(allWorkloads))
	}
	for i, r := range rep.Workloads {
		if r.Name != allWorkloads[i].Name || r.Jobs != allWorkloads[i].Jobs {
			t.Fatalf("workload %d: %s/%d", i, r.Name, r.Jobs)
		}
		for side, m := range map[string]Measure{"engine": r.Engine, "raw": r.Raw} {
			if m.Ops <= 0 || m.Seconds <= 0 || m.IOPS <= 0 || m.MBps <= 0 || m.P50us <= 0 || m.P99us < m.P50us || m.MaxUs < m.P99us || m.Device == nil {
				t.Fatalf("%s %s: %+v", r.Name, side, m)
			}
			// Every op costs some CPU; a figure of 0 means processCPU failed.
			if runtime.GOOS == "linux" && m.CPUus <= 0 {
				t.Fatalf("%s %s: %v µs of CPU per op", r.Name, side, m.CPUus)
			}
			wantW := allWorkloads[i].Op != opRandRead && allWorkloads[i].Op != opSeqRead
			if side == "engine" && r.Name == "buffered-4k" {
				// Delayed allocation: the page cache writes the pages back
				// in runs of up to 1 MiB, far fewer writes than ops.
				if w := m.Device.Writes; w <= 0 || w >= 0.5 {
					t.Fatalf("%s %s: %.2f device writes per op; want batched write-back", r.Name, side, w)
				}
			} else if got := m.Device.Writes >= 1; got != wantW {
				t.Fatalf("%s %s: %.2f device writes per op", r.Name, side, m.Device.Writes)
			}
		}
		if r.EngineOverRaw <= 0 || r.Kernel != nil || r.EngineOverKern != nil {
			t.Fatalf("%s: ratio %v kernel %v", r.Name, r.EngineOverRaw, r.Kernel)
		}
		// The engine's counters: every write workload counts its writes.
		if _, ok := r.Counters["CacheStats.Hits"]; !ok {
			t.Fatalf("%s: no cache counters: %v", r.Name, r.Counters)
		}
	}
	// Raw sides issue exactly one device op per operation (+ a flush for fsync).
	for _, r := range rep.Workloads {
		d := r.Raw.Device
		if r.Name == "fsync-small" && (d.Writes != 1 || d.Flushes != 1) || r.Name == "randread-2" && d.Reads != 1 {
			t.Fatalf("%s raw: %+v", r.Name, d)
		}
	}
	// Background, legend, two bars per workload and its engine/raw ratio.
	checkSVG(t, svg.Bytes(), 1+2+3*len(allWorkloads))
}

// TestBenchRepeatJSON runs three rounds of three workloads and checks the
// order of the rounds, the per-round records and that the report's figures
// are their medians.
func TestBenchRepeatJSON(t *testing.T) {
	names := []string{"overwrite-2", "fallocated-2", "fsync-small"}
	c := mem(128<<20, 50*time.Millisecond, names...)
	c.Repeat = 3
	r0, _ := run(t, c)
	rep := viaJSON(t, r0)
	if rep.Config.Repeat != 3 || rep.Config.Rounds != benchRounds {
		t.Fatalf("config: %+v", rep.Config)
	}
	if len(rep.Workloads) != len(names) {
		t.Fatalf("%d workloads, want each of %v once", len(rep.Workloads), names)
	}
	byName := map[string]*WorkloadResult{}
	for i := range rep.Workloads {
		r := &rep.Workloads[i]
		if r.Name != names[i] {
			t.Fatalf("workload %d is %s, want %s (listed order)", i, r.Name, names[i])
		}
		byName[r.Name] = r
		if len(r.Rounds) != 3 {
			t.Fatalf("%s: %d rounds, want 3", r.Name, len(r.Rounds))
		}
		// Rounds 1 and 3 as listed, round 2 reversed.
		for k, rr := range r.Rounds {
			want := i + 1
			if k == 1 {
				want = len(names) - i
			}
			if rr.Round != k+1 || rr.Position != want {
				t.Fatalf("%s round %d: round %d position %d, want position %d", r.Name, k+1, rr.Round, rr.Position, want)
			}
			if rr.EngineIOPS <= 0 || rr.RawIOPS <= 0 || rr.EngineOverRaw != rr.EngineIOPS/rr.RawIOPS || rr.KernelIOPS != nil {
				t.Fatalf("%s round %d: %+v", r.Name, k+1, rr)
			}
		}
		var eng, raw, eor []float64
		for _, rr := range r.Rounds {
			eng, raw, eor = append(eng, rr.EngineIOPS), append(raw, rr.RawIOPS), append(eor, rr.EngineOverRaw)
		}
		if r.Engine.IOPS != median(eng) || r.Raw.IOPS != median(raw) || r.EngineOverRaw != median(eor) {
			t.Fatalf("%s: engine %v raw %v eng/raw %v; want the medians of %v %v %v",
				r.Name, r.Engine.IOPS, r.Raw.IOPS, r.EngineOverRaw, eng, raw, eor)
		}
		for side, m := range map[string]Measure{"engine": r.Engine, "raw": r.Raw} {
			if m.Ops <= 0 || m.Seconds < 3*0.05*0.9 || m.P99us < m.P50us || m.MaxUs < m.P99us || m.Device == nil {
				t.Fatalf("%s %s: %+v", r.Name, side, m)
			}
		}
	}
	if d := byName["fsync-small"].Raw.Device; d.Writes != 1 || d.Flushes != 1 {
		t.Fatalf("fsync-small raw device ops per op over the rounds: %+v", d)
	}
	if len(rep.Ratios) != 1 || rep.Ratios[0].Name != "fallocated-2/overwrite-2" {
		t.Fatalf("workload ratios: %+v", rep.Ratios)
	}
	wr := rep.Ratios[0]
	if len(wr.EngineRounds) != 3 || len(wr.RawRounds) != 3 || wr.KernelRounds != nil || wr.Kernel != nil {
		t.Fatalf("workload ratio: %+v", wr)
	}
	var per []float64
	for k := range 3 {
		x := byName["fallocated-2"].Rounds[k].EngineIOPS / byName["overwrite-2"].Rounds[k].EngineIOPS
		if wr.EngineRounds[k] == nil || *wr.EngineRounds[k] != x {
			t.Fatalf("round %d: fallocated/overwrite %v, want %v", k+1, wr.EngineRounds[k], x)
		}
		per = append(per, x)
	}
	if wr.Engine != median(per) {
		t.Fatalf("fallocated/overwrite %v, want the median of %v", wr.Engine, per)
	}
}

// TestBenchRepeatText: the ratio section appears with --repeat only, for
// the pairs selected.
func TestBenchRepeatText(t *testing.T) {
	c := mem(128<<20, 50*time.Millisecond, "overwrite-2", "writezeroes-2")
	c.Repeat = 2
	_, out := run(t, c)
	for _, want := range []string{"repeat: 2 rounds", "medians of the per-round ratios", "ratios between workloads (median of per-round ratios"} {
		if !strings.Contains(out, want) {
			t.Fatalf("report lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`(?m)^  writezeroes-2/overwrite-2 +engine [0-9.]+ \[[0-9.]+ [0-9.]+\] +raw [0-9.]+ \[[0-9.]+ [0-9.]+\] +eng/raw [0-9.]+ \[[0-9.]+ [0-9.]+\]$`).MatchString(out) {
		t.Fatalf("no writezeroes-2/overwrite-2 line with two rounds:\n%s", out)
	}
	if regexp.MustCompile(`(?m)^ +fallocated-`).MatchString(out) || len(regexp.MustCompile(`(?m)^ +overwrite-2 +2 +IOPS `).FindAllString(out, -1)) != 1 {
		t.Fatalf("workloads not reported once each, or a pair not selected:\n%s", out)
	}
	c.Repeat = 1
	_, out = run(t, c)
	if strings.Contains(out, "repeat:") || strings.Contains(out, "ratios between workloads") {
		t.Fatalf("repeat section without --repeat:\n%s", out)
	}
}

// TestBenchPrepAnyOrder runs every workload in reversed, then listed order
// on one benchRun and checks that each finds its file and raw side as its
// prep says: reusing a written file must never hand over one that a
// previous workload changed into something else. Raw runs at the file's
// blocks and, with --raw-at region, in its own window.
func TestBenchPrepAnyOrder(t *testing.T) {
	for _, atRegion := range []bool{false, true} {
		t.Run(fmt.Sprintf("rawAtRegion=%v", atRegion), func(t *testing.T) { testBenchPrepAnyOrder(t, atRegion) })
	}
}

func testBenchPrepAnyOrder(t *testing.T, atRegion bool) {
	// One goroutine for a short while: random writes leave blocks of the
	// region untouched, which a wrongly reused file or region shows.
	c := &config{Config: Config{Backend: "memory", Runtime: 10 * time.Millisecond, Goroutines: 1, BlockSize: 4096, Seed: 1, Repeat: 1,
		RawAtRegion: atRegion}}
	dev := memdev.New(128 << 20)
	defer dev.Close()
	r := newBenchRun(c, dev, 128<<20, regionFor(128<<20), mustPlan(t, 128<<20, c.BlockSize))
	defer r.closeEngine()
	// sample reports whether every 4 KiB block of the region has data
	// (written) or every one reads as zeroes (zero).
	sample := func(ra io.ReaderAt) (written, zero bool) {
		written, zero = true, true
		buf := make([]byte, 1<<20)
		for off := int64(0); off < r.region; off += int64(len(buf)) {
			if _, err := ra.ReadAt(buf, off); err != nil {
				t.Fatalf("read at %d: %v", off, err)
			}
			for b := range slices.Chunk(buf, 4096) {
				nz := slices.ContainsFunc(b, func(x byte) bool { return x != 0 })
				written, zero = written && nz, zero && !nz
			}
		}
		return written, zero
	}
	n := len(allWorkloads)
	for round := range 2 {
		for _, i := range roundOrder(n, 1-round) {
			w := allWorkloads[i]
			eng, err := r.prepareEngine(w)
			if err != nil {
				t.Fatal(err)
			}
			raw, _, err := r.prepareRaw(w, eng)
			eng.f.Close()
			if err != nil {
				t.Fatal(err)
			}
			// Page batches move the file's blocks (atomic.go); sequential
			// direct writer of a new file takes the warmed file's blocks again.
			if onFile := raw.ext != nil; onFile != (!atRegion && (w.Prep != prepFresh || rawAtWarm(w)) && w.Op != opPageBatch) {
				t.Fatalf("%s: raw at the file's blocks %v", w.Name, onFile)
			}
			f, err := r.v.OpenFile(benchFile, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			size := f.Size()
			var ew, ez bool
			if w.Prep != prepFresh {
				ew, ez = sample(f)
			}
			f.Close()
			rw, rz := sample(raw)
			var ok bool
			switch w.Prep {
			case prepFresh:
				// Sequential writers' blocks are written once first
				// (warmsDevice): raw's blocks (the warmed file's, or its
				// region with rawAtRegion) hold the fill pattern.
				ok = size == 0 && (warmsDevice(w) && rw || !warmsDevice(w) && rz)
			case prepWritten:
				ok = size == r.region && ew && rw
			case prepFallocated:
				// Raw overwrites (rawPrepFor): at the file's blocks, the
				// stale data fillPreallocated put under its extents.
				ok = size == r.region && ez && rw
			case prepWriteZeroes:
				ok = size == r.region && ez && rz
			}
			if !ok {
				t.Fatalf("round %d, %s wants a %s: file size %d written %v zero %v; raw written %v zero %v",
					round+1, w.Name, prepNames[w.Prep], size, ew, ez, rw, rz)
			}
			zeroOuts := r.rawFileWin.c.zeroOuts.Load()
			if _, err := r.runWorkload(context.Background(), w); err != nil {
				t.Fatalf("%s: %v", w.Name, err)
			}
			// Raw sharing a write-zeroes file's blocks zeroes them again
			// before each phase (rezero), raw's and the engine's.
			want := uint64(0)
			if w.Prep == prepWriteZeroes && !atRegion {
				want = uint64(2 * benchRounds * len(raw.ext))
			}
			if got := r.rawFileWin.c.zeroOuts.Load() - zeroOuts; got != want {
				t.Fatalf("%s: %d zero-outs of the file's blocks, want %d", w.Name, got, want)
			}
		}
	}
}

// TestBenchRawAtFile checks that raw at the file's blocks writes where the
// engine's file reads: every byte raw writes at an offset, the file reads
// back at that offset, across extents that are not contiguous on the
// device (1 KiB blocks: the file crosses groups), and neither the raw
// window nor the engine's window counts the writes.
func TestBenchRawAtFile(t *testing.T) {
	for _, bs := range []int{1024, 4096} {
		t.Run(fmt.Sprint(bs), func(t *testing.T) {
			c := &config{Config: Config{Backend: "memory", Runtime: 10 * time.Millisecond, Goroutines: 1, BlockSize: bs, Seed: 1, Repeat: 1}}
			dev := memdev.New(128 << 20)
			defer dev.Close()
			r := newBenchRun(c, dev, 128<<20, regionFor(128<<20), mustPlan(t, 128<<20, c.BlockSize))
			defer r.closeEngine()
			w := allWorkloads[0]
			eng, err := r.prepareEngine(w)
			if err != nil {
				t.Fatal(err)
			}
			defer eng.f.Close()
			raw, win, err := r.prepareRaw(w, eng)
			if err != nil {
				t.Fatal(err)
			}
			if win != r.rawFileWin || raw.ext == nil {
				t.Fatalf("raw not at the file's blocks: window %p ext %v", win, raw.ext)
			}
			if bs == 1024 && len(raw.ext) < 2 {
				t.Fatalf("1 KiB blocks: want the file in several device runs, have %v", raw.ext)
			}
			fsBefore, rawBefore := r.fsWin.c.snap(), r.rawWin.c.snap()
			// Writes of 3 KiB (not a divisor of the runs, so some cross
			// from one run into the next), each with its own bytes.
			buf := make([]byte, 3<<10)
			var want []byte
			for off, k := int64(0), 0; off+int64(len(buf)) <= r.region; off, k = off+int64(len(buf)), k+1 {
				for i := range buf {
					buf[i] = byte(k*13 + i*7 + 1)
				}
				if _, err := raw.WriteAt(buf, off); err != nil {
					t.Fatalf("raw write at %d: %v", off, err)
				}
				want = append(want, buf...)
			}
			if got := r.rawFileWin.c.snap().Writes; got < uint64(len(want)/len(buf)) {
				t.Fatalf("raw file window counted %d writes for %d", got, len(want)/len(buf))
			}
			if r.fsWin.c.snap() != fsBefore || r.rawWin.c.snap() != rawBefore {
				t.Fatal("raw's writes were counted on the engine's or the raw region's window")
			}
			f, err := r.v.OpenFile(benchFile, os.O_RDWR|ext4io.O_DIRECT, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got := make([]byte, len(want))
			if _, err := f.ReadAt(got, 0); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				for i := range got {
					if got[i] != want[i] {
						t.Fatalf("file byte %d reads %#x, raw wrote %#x", i, got[i], want[i])
					}
				}
			}
			if _, err := raw.WriteAt(buf, r.region-1024); err == nil {
				t.Fatal("raw write past the file's extents succeeded")
			}
		})
	}
}

// TestCombineRounds checks the reduction of rounds on made-up figures
// where medians of ratios and ratios of medians differ, pooled and
// median per-op values too, and one round lacks the kernel.
func TestCombineRounds(t *testing.T) {
	mk := func(round, pos int, name string, eng, raw float64, kern *float64, note string) roundSample {
		r := WorkloadResult{Name: name, IOSize: 4096,
			Engine: Measure{Ops: int64(eng), Seconds: 1, IOPS: eng, MBps: eng * 4096 / 1e6, P50us: eng / 100, P99us: eng / 10, MaxUs: eng,
				dev: devSnap{Writes: uint64(eng) * uint64(round)}, Device: &DevPerOp{Writes: float64(round)}, PrepSecond: 0.5,
				cpu: time.Duration(round) * time.Millisecond, faults: int64(round) * 30,
				disk: diskSnap{WriteBytes: uint64(round) * 4096}, Disk: &DiskPerOp{}},
			Raw:      Measure{Ops: 10, Seconds: 1, IOPS: raw, MBps: raw * 4096 / 1e6, dev: devSnap{Writes: 10}, Device: &DevPerOp{Writes: 1}},
			Counters: map[string]float64{"Counters.Overwrites": eng, "CacheStats.Entries": float64(round)},
			gauges:   map[string]bool{"CacheStats.Entries": true}, KernelNote: note}
		r.EngineOverRaw = eng / raw
		if kern != nil {
			r.Kernel = &Measure{Ops: 1, Seconds: 1, IOPS: *kern, MBps: *kern * 4096 / 1e6, P50us: 1, P99us: 2}
		}
		return roundSample{round: round, pos: pos, res: r}
	}
	k := func(x float64) *float64 { return &x }
	// Engine 100, 200, 300 over raw 100, 400, 150: per-round ratios 1, 0.5,
	// 2 (median 1), medians 200/150.
	ow := []roundSample{
		mk(1, 1, "overwrite-2", 100, 100, k(50), ""),
		mk(2, 2, "overwrite-2", 200, 400, nil, "failed: fio died"),
		mk(3, 1, "overwrite-2", 300, 150, k(200), ""),
	}
	// Over overwrite-2, round by round: 2, 0.75, 0.5 (median 0.75);
	// medians 200/200 = 1.
	fa := []roundSample{
		mk(1, 2, "fallocated-2", 200, 100, k(25), ""),
		mk(2, 1, "fallocated-2", 150, 100, k(10), ""),
		mk(3, 2, "fallocated-2", 150, 100, k(400), ""),
	}
	res, ratios := combineRounds([][]roundSample{ow, fa})
	r := res[0]
	if r.Engine.IOPS != 200 || r.Raw.IOPS != 150 || r.EngineOverRaw != 1 {
		t.Fatalf("engine %v raw %v eng/raw %v; want 200, 150, 1", r.Engine.IOPS, r.Raw.IOPS, r.EngineOverRaw)
	}
	if r.Engine.P50us != 2 || r.Engine.P99us != 20 || r.Engine.MaxUs != 300 || r.Engine.Ops != 600 || r.Engine.Seconds != 3 || r.Engine.PrepSecond != 1.5 {
		t.Fatalf("engine: %+v", r.Engine)
	}
	// Writes per op 1, 2, 3 over 100, 200, 300 ops: pooled 1400/600.
	if got := r.Engine.Device.Writes; math.Abs(got-1400.0/600) > 1e-12 {
		t.Fatalf("pooled writes per op %v, want %v", got, 1400.0/600)
	}
	// The fixture's rounds: CPU 1, 2, 3 ms over 100, 200, 300 ops, pooled
	// as total CPU over total ops.
	if got := r.Engine.CPUus; math.Abs(got-10) > 1e-9 {
		t.Fatalf("pooled CPU per op %v µs, want 10", got)
	}
	// Faults 30, 60, 90 over 100, 200, 300 ops: pooled 180 / 600.
	if got := r.Engine.Faults; math.Abs(got-0.3) > 1e-12 {
		t.Fatalf("pooled faults per op %v, want 0.3", got)
	}
	// Host disk bytes 4096, 8192, 12288 over 100, 200, 300 ops: pooled
	// 24576 / 600. Raw's rounds have no disk figure: none pooled.
	if d := r.Engine.Disk; d == nil || math.Abs(d.WriteBytes-24576.0/600) > 1e-9 {
		t.Fatalf("pooled disk per op %+v, want %v bytes written", d, 24576.0/600)
	}
	if r.Raw.Disk != nil {
		t.Fatalf("raw disk per op %+v from rounds without one", r.Raw.Disk)
	}
	if r.Counters["Counters.Overwrites"] != 600 || r.Counters["CacheStats.Entries"] != 3 {
		t.Fatalf("counters: %v", r.Counters)
	}
	// Kernel in rounds 1 and 3: 50 and 200, a median of an even count.
	if r.Kernel == nil || r.Kernel.IOPS != 125 || r.Kernel.Ops != 2 || r.EngineOverKern == nil || *r.EngineOverKern != 1.75 ||
		r.KernelOverRaw == nil || *r.KernelOverRaw != (0.5+200.0/150)/2 {
		t.Fatalf("kernel %+v eng/linux %v linux/raw %v", r.Kernel, r.EngineOverKern, r.KernelOverRaw)
	}
	if r.KernelNote != "round 2 failed: fio died" {
		t.Fatalf("kernel note %q", r.KernelNote)
	}
	if len(r.Rounds) != 3 || r.Rounds[1].Position != 2 || r.Rounds[1].KernelIOPS != nil || *r.Rounds[2].KernelIOPS != 200 || r.Rounds[1].EngineOverRaw != 0.5 {
		t.Fatalf("rounds: %+v", r.Rounds)
	}
	if len(ratios) != 1 || ratios[0].Name != "fallocated-2/overwrite-2" {
		t.Fatalf("ratios: %+v", ratios)
	}
	wr := ratios[0]
	// Raw 100 each over 100, 400, 150; kernel 25, 10, 400 over 50, -, 200.
	if wr.Engine != 0.75 || wr.Raw != 100.0/150 || wr.Kernel == nil || *wr.Kernel != 1.25 {
		t.Fatalf("fallocated/overwrite: engine %v raw %v kernel %v; want 0.75, 0.67, 1.25", wr.Engine, wr.Raw, wr.Kernel)
	}
	if len(wr.KernelRounds) != 3 || wr.KernelRounds[1] != nil || *wr.KernelRounds[0] != 0.5 || *wr.KernelRounds[2] != 2 {
		t.Fatalf("kernel rounds: %v", wr.KernelRounds)
	}
	// One round gives back that round's figures.
	one, _ := combineRounds([][]roundSample{ow[:1]})
	if one[0].Engine.IOPS != 100 || one[0].Engine.Device.Writes != 1 || one[0].EngineOverRaw != 1 || *one[0].EngineOverKern != 2 {
		t.Fatalf("one round: %+v", one[0])
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{7}, 7},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5}, // even: the mean of the middle two
		{[]float64{2, 9, 2, 1}, 2},
		{[]float64{0.9, 0.77, 0.92, 0.8, 1.2}, 0.9},
	} {
		in := slices.Clone(c.in)
		if got := median(in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
		if !slices.Equal(in, c.in) {
			t.Errorf("median reordered its input: %v", in)
		}
	}
	if !math.IsNaN(median(nil)) {
		t.Error("median of nothing is not NaN")
	}
}

func TestRoundOrder(t *testing.T) {
	for _, c := range []struct {
		n, round int
		want     []int
	}{
		{3, 0, []int{0, 1, 2}},
		{3, 1, []int{2, 1, 0}},
		{3, 2, []int{0, 1, 2}},
		{4, 3, []int{3, 2, 1, 0}},
		{1, 1, []int{0}},
	} {
		if got := roundOrder(c.n, c.round); !slices.Equal(got, c.want) {
			t.Errorf("roundOrder(%d, %d) = %v, want %v", c.n, c.round, got, c.want)
		}
	}
}

func checkSVG(t *testing.T, b []byte, wantRects int) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	rects := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not valid XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
			rects++
		}
	}
	if rects != wantRects {
		t.Fatalf("SVG has %d rects, want %d", rects, wantRects)
	}
}

// TestBenchTempImageRemoved runs on the file backend with the embedded
// temporary image and checks the text report and that the image is gone.
func TestBenchTempImageRemoved(t *testing.T) {
	dir := t.TempDir()
	_, out := run(t, Config{Dir: dir, Size: 128 << 20, Runtime: 100 * time.Millisecond, Seed: 1,
		Workloads: []string{"overwrite-2", "seqwrite-1m", "fsync-small"}})
	for _, want := range []string{"engine version notes", "overwrite-2", "seqwrite-1m", "fsync-small", "eng/raw", "temporary image file", "linux column skipped"} {
		if !strings.Contains(out, want) {
			t.Fatalf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "randread-2") {
		t.Fatalf("workload subset not honoured:\n%s", out)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 0 {
		t.Fatalf("temporary image left behind: %v", ents)
	}
}

// TestBenchUserImageKept: an --image the bench creates is kept.
func TestBenchUserImageKept(t *testing.T) {
	img := filepath.Join(t.TempDir(), "my.img")
	run(t, Config{Image: img, Size: 96 << 20, Runtime: 50 * time.Millisecond, Workloads: []string{"randread-2"}})
	if st, err := os.Stat(img); err != nil || st.Size() != 96<<20 {
		t.Fatalf("image: %v %v", st, err)
	}
}

// TestConfigRefused: Run refuses what Validate does, and a device too
// small for the space plan.
func TestConfigRefused(t *testing.T) {
	for _, c := range []Config{
		mem(128<<20, time.Second, "nope"),
		mem(128<<20, time.Second, ","),
		{Backend: "tape", Runtime: time.Second},
		{Backend: "memory", Image: "x", Runtime: time.Second},
		mem(128<<20, 0),
		{Backend: "memory", Runtime: time.Second, Repeat: -1},
		{Backend: "memory", Runtime: time.Second, Goroutines: -1},
	} {
		if c.Validate() == nil {
			t.Errorf("%+v: valid", c)
		}
		if _, err := Run(context.Background(), c); err == nil {
			t.Errorf("%+v: ran", c)
		}
	}
	if err := mem(128<<20, time.Second, "overwrite-2", " randread-2").Validate(); err != nil {
		t.Errorf("valid config refused: %v", err)
	}
	if _, err := Run(context.Background(), mem(32<<20, 10*time.Millisecond)); err == nil || !strings.Contains(err.Error(), "too small") {
		t.Errorf("tiny device: %v", err)
	}
}

func TestWindowConformance(t *testing.T) {
	blockdevtest.Run(t, func(t *testing.T, size int64) blockdev.Device {
		base := memdev.New(size + 3*4096)
		t.Cleanup(func() { base.Close() })
		_, d := newWindow(base, 4096, size)
		return d
	})
}

func TestWindowBoundsAndCounts(t *testing.T) {
	base := memdev.New(1 << 20)
	w, d := newWindow(base, 8192, 4096)
	if _, err := d.WriteAt(make([]byte, 4097), 0); !errors.Is(err, blockdev.ErrInvalid) {
		t.Fatalf("write past window: %v", err)
	}
	if _, err := d.WriteAt([]byte{1, 2, 3}, 4093); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 3)
	base.ReadAt(got, 8192+4093)
	if !bytes.Equal(got, []byte{1, 2, 3}) {
		t.Fatalf("window offset wrong: %v", got)
	}
	if n, err := d.ReadAt(make([]byte, 10), 4090); n != 6 || err != io.EOF {
		t.Fatalf("read at end: %d %v", n, err)
	}
	if s := w.c.snap(); s.Writes != 1 || s.WriteBytes != 3 || s.Reads != 1 || s.ReadBytes != 6 {
		t.Fatalf("counts %+v", s)
	}
}

func TestProgressLine(t *testing.T) {
	var buf lockedBuffer
	p := newProgress(&buf)
	p.workload = "[1/1] demo"
	var ops atomic.Int64
	p.set("engine", "round 1/2", time.Now(), 0)
	p.start(&ops)
	ops.Add(1234)
	time.Sleep(300 * time.Millisecond)
	p.stop()
	p.clear()
	s := buf.String()
	if !strings.Contains(s, "\r\033[K[1/1] demo  engine round 1/2") || !strings.Contains(s, "1234 ops") {
		t.Fatalf("progress output %q", s)
	}
	// Without a writer it draws nothing, and does not fail.
	q := newProgress(nil)
	q.set("x", "y", time.Now(), 0)
	q.start(&ops)
	q.stop()
	q.clear()
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestFillPreallocated: the engine's fallocated file keeps reading as
// zeroes while the device blocks under it hold the fill pattern.
func TestFillPreallocated(t *testing.T) {
	dev := memdev.NewBlockSize(64<<20, 4096)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	f, err := v.Create("f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const size = 3<<20 + 8192
	if err := f.Fallocate(ext4io.FallocAllocate, 0, size); err != nil {
		t.Fatal(err)
	}
	bs := int64(v.BlockSize())
	if err := fillPreallocated(f, dev, bs); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, size)
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, make([]byte, size)) {
		t.Fatal("the fallocated file no longer reads as zeroes")
	}
	exts, err := f.Extents()
	if err != nil {
		t.Fatal(err)
	}
	var blocks int64
	for _, e := range exts {
		if !e.Unwritten {
			t.Fatalf("extent %+v is written", e)
		}
		raw := make([]byte, int64(e.Length)*bs)
		if _, err := dev.ReadAt(raw, int64(e.Physical)*bs); err != nil {
			t.Fatal(err)
		}
		if bytes.Count(raw, []byte{0}) > len(raw)/64 {
			t.Fatalf("extent %+v: device blocks not filled", e)
		}
		blocks += int64(e.Length)
	}
	if blocks*bs != size {
		t.Fatalf("extents cover %d blocks, want %d", blocks, size/bs)
	}
}

// TestBenchPhasesABBA reads a workload's phase order off the progress
// line: raw, engine, engine, raw.
func TestBenchPhasesABBA(t *testing.T) {
	var buf lockedBuffer
	c := &config{Config: Config{Backend: "memory", Runtime: 20 * time.Millisecond, Goroutines: 1, BlockSize: 4096, Seed: 1, Repeat: 1}}
	dev := memdev.New(128 << 20)
	defer dev.Close()
	r := newBenchRun(c, dev, 128<<20, regionFor(128<<20), mustPlan(t, 128<<20, c.BlockSize))
	defer r.closeEngine()
	r.prog = newProgress(&buf)
	w := allWorkloads[slices.IndexFunc(allWorkloads, func(w workload) bool { return w.Name == "overwrite-2" })]
	if _, err := r.runWorkload(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, m := range regexp.MustCompile(`(raw|engine) (round \d/\d)`).FindAllStringSubmatch(buf.String(), -1) {
		if p := m[1] + " " + m[2]; len(order) == 0 || order[len(order)-1] != p {
			order = append(order, p)
		}
	}
	want := []string{"raw round 1/2", "engine round 1/2", "engine round 2/2", "raw round 2/2"}
	if !slices.Equal(order, want) {
		t.Fatalf("phase order %q, want %q", order, want)
	}
}

// BenchmarkRawSideAt is raw's extent search per I/O (--raw-at file) on a
// 1 GiB file in 8 device runs and in 1024.
//
//	go test -run XXX -bench RawSideAt ./internal/bench
func BenchmarkRawSideAt(b *testing.B) {
	for _, runs := range []int64{8, 1024} {
		b.Run(strconv.FormatInt(runs, 10), func(b *testing.B) {
			const size = 1 << 30
			r := rawSide{region: size}
			n := size / runs
			for i := range runs {
				r.ext = append(r.ext, rawExtent{off: i * n, dev: (runs - i) * 2 * n, n: n})
			}
			off, sink := int64(0), int64(0)
			for b.Loop() {
				d, _ := r.at(off)
				sink += d
				off = (off + 7<<20 + 4096) % size
			}
			if sink == 0 {
				b.Fatal("no device address")
			}
		})
	}
}
