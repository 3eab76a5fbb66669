package main

// ext4io bench: the seed threads' workloads through the File API, each
// beside the raw device doing the same I/O pattern in the same run, and
// optionally beside Linux's ext4 (fio over a loop device, --kernel).
//
// Layout of the backing device (a temporary image file by default):
//
//	[0, size-region)      filesystem window: formatted by ext4io before
//	                      each workload (Format discards it first)
//	[size-region, size)   raw window: the raw side's pread/pwrite region
//
// Both windows are the same backend over the same file, so "raw" is the
// ceiling for any engine that does pread/pwrite on the image. By default
// (--raw-at file) raw does not use its window for workloads on a prepared
// file (written, fallocated, write-zeroes): it does its I/O at the device
// addresses of the engine's file, each offset through the file's extents,
// so both sides hit the same device blocks (write-zeroes blocks are zeroed
// again before each phase: see rezero). The host disk under an image is
// not equally fast everywhere: fio's 4 KiB random O_DIRECT writes with 16
// jobs on an earlier VM's 8 GiB bench image measured 68-94k IOPS in its
// first GiB against 96-107k in its last (the raw window), five
// alternations, which --raw-at region counts against the engine.
// Fresh-file workloads use the raw window. Each workload runs
// benchRounds phases per side, raw, engine, engine, raw (ABBA), the
// runtime split between them, so that load drifting on a shared machine
// hits both sides alike, and the same goroutine seeds give both the same
// offsets.
//
// --repeat N runs the workload list N times, odd rounds in the listed
// order and even rounds reversed, so that a disk slowing down over the run
// does not favour the workloads that come first. The report gives each
// workload once: medians over the rounds, and ratios (engine/raw, between
// workloads, against Linux) as medians of ratios taken within one round.
// With --kernel, each round ends with the fio pass in that round's order.
//
// Every workload keeps to the space plan (bench_space.go), whatever its
// runtime and the disk's speed: the plan is checked and printed before
// the first workload. A workload that fails anyway is reported in its row
// and the run goes on; the exit status is then non-zero.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"syscall"
	"time"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

func init() {
	commands["bench"] = command{
		usage: "bench [--backend file|direct|mmap|memory] [--image PATH] [--size N] [--runtime 5s] [--repeat N] [--goroutines N] [--gomaxprocs N] " +
			"[--block-size N] [--workloads a,b] [--raw-at file|region] [--json] [--svg FILE] [--kernel] [--dir DIR] [--eager-conversions] [--defer-splits] [--zeroout-chunk N] [--cpuprofile FILE] [--mutexprofile FILE] [--blockprofile FILE] [--trace FILE]",
		run: cmdBench,
	}
}

const (
	benchSchema        = "ext4io-bench/1"
	benchRounds        = 2       // phases per side and workload, run ABBA
	defaultImageSize   = 4 << 30 // embedded image, when disk allows
	minImageSize       = 64 << 20
	defaultMemoryImage = 2 << 30
)

// benchConfig is the parsed command line.
type benchConfig struct {
	backend     string
	image       string // user's image or device; "" = temporary
	dir         string // where the temporary image (and kernel backing file) go
	size        int64  // 0 = choose
	runtime     time.Duration
	repeat      int // rounds over the workload list, alternating order
	goroutines  int // 0 = per workload
	gomaxprocs  int // 0 = Go's default (the CPU count)
	blockSize   int
	workloads   []workload
	json        bool
	svg         string
	cpuprofile  string // pprof CPU profile of the whole run
	mutexprof   string // pprof mutex contention profile of the whole run
	blockprof   string // pprof blocking profile of the whole run
	tracefile   string // runtime execution trace of the whole run
	rawAtRegion bool   // --raw-at region: raw always uses its own window
	deferSplits bool   // ext4io.Options.Tuning.DeferSplits for the engine
	eagerConv   bool   // ext4io.Options.Tuning.EagerConversions for the engine
	zeroChunk   int64  // ext4io.Options.Tuning.ZeroOutChunk for the engine
	kernel      bool
	seed        uint64
	progress    bool
	stderr      io.Writer
}

func parseBenchFlags(args []string) (*benchConfig, error) {
	fs := newFlags("bench")
	c := &benchConfig{stderr: os.Stderr}
	var size, names string
	fs.StringVar(&c.backend, "backend", "file", "file|direct|mmap|memory")
	fs.StringVar(&c.image, "image", "", "image file or block device (overwritten!)")
	fs.StringVar(&c.dir, "dir", os.TempDir(), "directory for the temporary image")
	fs.StringVar(&size, "size", "", "device size (default: a few GiB, less if disk is short)")
	fs.DurationVar(&c.runtime, "runtime", 5*time.Second, "time per workload, engine and raw each")
	fs.IntVar(&c.repeat, "repeat", 1, "run the workload list N times, every other round reversed; report medians")
	fs.IntVar(&c.goroutines, "goroutines", 0, "override the goroutines of random and fsync workloads")
	fs.IntVar(&c.gomaxprocs, "gomaxprocs", 0, "set GOMAXPROCS for the run (0: Go's default, the CPU count)")
	fs.IntVar(&c.blockSize, "block-size", 4096, "filesystem block size")
	fs.StringVar(&names, "workloads", "", "comma-separated subset (default all)")
	rawAt := fs.String("raw-at", "file", "where raw does the I/O of workloads on a prepared file: file (the engine file's device blocks) or region (the raw window)")
	fs.BoolVar(&c.json, "json", false, "machine-readable output")
	fs.StringVar(&c.svg, "svg", "", "write an SVG bar chart to FILE")
	fs.BoolVar(&c.deferSplits, "defer-splits", false, "engine: split unwritten extents at I/O completion (Options.Tuning.DeferSplits)")
	fs.BoolVar(&c.eagerConv, "eager-conversions", false, "engine: split and convert unwritten extents in each write instead of queueing conversions (Options.Tuning.EagerConversions)")
	zeroChunk := fs.String("zeroout-chunk", "", "engine: zero and convert preallocated space in chunks of N bytes (Options.Tuning.ZeroOutChunk)")
	fs.StringVar(&c.cpuprofile, "cpuprofile", "", "write a CPU profile of the run (go tool pprof) to FILE")
	fs.StringVar(&c.mutexprof, "mutexprofile", "", "write a mutex contention profile of the run (go tool pprof) to FILE")
	fs.StringVar(&c.blockprof, "blockprofile", "", "write a profile of where goroutines blocked (locks, channels; go tool pprof) to FILE")
	fs.StringVar(&c.tracefile, "trace", "", "write a runtime execution trace of the run (go tool trace) to FILE")
	fs.BoolVar(&c.kernel, "kernel", false, "also run the jobs with fio on Linux ext4 (root, fio)")
	fs.Uint64Var(&c.seed, "seed", 1, "random offset seed")
	noProgress := fs.Bool("no-progress", false, "no progress line on stderr")
	forceProgress := fs.Bool("progress", false, "progress line on stderr even when it is not a terminal")
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() != 0 {
		return nil, fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	switch c.backend {
	case "file", "direct", "mmap", "memory":
	default:
		return nil, fmt.Errorf("%w: unknown backend %q", errUsage, c.backend)
	}
	switch *rawAt {
	case "file":
	case "region":
		c.rawAtRegion = true
	default:
		return nil, fmt.Errorf("%w: --raw-at %q: want file or region", errUsage, *rawAt)
	}
	if c.backend == "memory" && c.image != "" {
		return nil, fmt.Errorf("%w: --image makes no sense with --backend memory", errUsage)
	}
	if size != "" {
		n, err := parseSize(size)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		c.size = n
	}
	if *zeroChunk != "" && *zeroChunk != "0" {
		zc, err := parseSize(*zeroChunk)
		if err != nil {
			return nil, fmt.Errorf("%w: --zeroout-chunk: %v", errUsage, err)
		}
		c.zeroChunk = zc
	}
	if c.runtime <= 0 || c.goroutines < 0 || c.gomaxprocs < 0 || c.repeat < 1 {
		return nil, fmt.Errorf("%w: --runtime and --repeat must be positive, --goroutines and --gomaxprocs non-negative", errUsage)
	}
	ws, err := selectWorkloads(names)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	c.workloads = ws
	c.progress = *forceProgress || !c.json && !*noProgress && isTerminal(os.Stderr)
	return c, nil
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func cmdBench(args []string, stdout io.Writer) error {
	c, err := parseBenchFlags(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if c.gomaxprocs > 0 {
		// Blocking pread/pwrite keep their P until the runtime hands it
		// on, so with GOMAXPROCS at the CPU count fewer I/Os are in flight
		// than goroutines issue (fio's jobs are processes).
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(c.gomaxprocs))
	}
	if c.cpuprofile != "" {
		pf, err := os.Create(c.cpuprofile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			pf.Close()
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			pf.Close()
		}()
	}
	if c.mutexprof != "" {
		pf, err := os.Create(c.mutexprof)
		if err != nil {
			return err
		}
		defer pf.Close()
		runtime.SetMutexProfileFraction(1)
		defer func() {
			pprof.Lookup("mutex").WriteTo(pf, 0)
			runtime.SetMutexProfileFraction(0)
		}()
	}
	if c.tracefile != "" {
		tf, err := os.Create(c.tracefile)
		if err != nil {
			return err
		}
		defer tf.Close()
		if err := trace.Start(tf); err != nil {
			return err
		}
		defer trace.Stop()
	}
	if c.blockprof != "" {
		pf, err := os.Create(c.blockprof)
		if err != nil {
			return err
		}
		defer pf.Close()
		runtime.SetBlockProfileRate(10_000) // one sample per ~10 µs blocked
		defer func() {
			pprof.Lookup("block").WriteTo(pf, 0)
			runtime.SetBlockProfileRate(0)
		}()
	}
	rep, err := runBench(ctx, c)
	if err != nil {
		return err
	}
	if c.svg != "" {
		if err := writeBenchSVG(c.svg, rep); err != nil {
			return err
		}
	}
	if c.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
		return failures(rep)
	}
	writeBenchText(stdout, rep)
	return failures(rep)
}

// failures returns an error naming the failed workloads, nil if none: the
// report has been written by then, so the exit status says what the rows
// say.
func failures(rep *benchReport) error {
	var names []string
	for _, r := range rep.Workloads {
		if r.Failed != "" {
			names = append(names, r.Name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d workloads failed: %s", len(names), len(rep.Workloads), strings.Join(names, ", "))
}

// backing is the device under the bench and how to get rid of it.
type backing struct {
	dev       blockdev.Device
	path      string // "" for memory
	temporary bool   // path is ours: removed by close
	desc      string
}

func (b *backing) close() error {
	err := b.dev.Close()
	if b.temporary {
		if rerr := os.Remove(b.path); err == nil {
			err = rerr
		}
	}
	return err
}

// chooseSize picks the device size: the user's, else defaultImageSize
// shrunk to a third of the free space (the run writes at most about two
// regions plus metadata, a region being a quarter of the device: the
// space plan bounds each workload's files by the region).
func chooseSize(c *benchConfig) (int64, error) {
	if c.size > 0 {
		return c.size, nil
	}
	if c.backend == "memory" {
		return defaultMemoryImage, nil
	}
	free, err := freeBytes(c.dir)
	if err != nil {
		return 0, fmt.Errorf("statfs %s: %w", c.dir, err)
	}
	size := min(int64(defaultImageSize), free/3) &^ (64<<20 - 1)
	if size < minImageSize {
		return 0, fmt.Errorf("only %d MiB free in %s: the bench needs at least %d MiB (use --dir or --size)", free>>20, c.dir, 3*minImageSize>>20)
	}
	return size, nil
}

func openBacking(c *benchConfig) (*backing, error) {
	if c.backend == "memory" {
		size, err := chooseSize(c)
		if err != nil {
			return nil, err
		}
		return &backing{dev: memdev.New(size), desc: fmt.Sprintf("memdev, %d MiB", size>>20)}, nil
	}
	b := &backing{path: c.image}
	if b.path == "" {
		size, err := chooseSize(c)
		if err != nil {
			return nil, err
		}
		f, err := os.CreateTemp(c.dir, "ext4io-bench-*.img")
		if err != nil {
			return nil, err
		}
		b.path, b.temporary = f.Name(), true
		f.Close()
		d, err := blockdev.CreateFile(b.path, size)
		if err != nil {
			os.Remove(b.path)
			return nil, err
		}
		d.Close()
	} else if _, err := os.Stat(b.path); errors.Is(err, os.ErrNotExist) {
		size, err := chooseSize(c)
		if err != nil {
			return nil, err
		}
		d, err := blockdev.CreateFile(b.path, size)
		if err != nil {
			return nil, err
		}
		d.Close()
	}
	var err error
	switch c.backend {
	case "file":
		b.dev, err = blockdev.OpenFile(b.path, false)
	case "direct":
		b.dev, err = blockdev.OpenDirect(b.path, false)
	case "mmap":
		b.dev, err = openMmap(b.path)
	}
	if err != nil {
		if b.temporary {
			os.Remove(b.path)
		}
		return nil, err
	}
	kind := "image file"
	if b.temporary {
		kind = "temporary image file"
	}
	b.desc = fmt.Sprintf("%s %s (%d MiB, %s backend)", kind, b.path, b.dev.Size()>>20, c.backend)
	return b, nil
}

// regionFor returns the raw region size (also each workload's file size)
// for a device of size bytes: a quarter, at most 1 GiB, in whole MiB.
func regionFor(size int64) int64 {
	return min(size/4, 1<<30) &^ (1<<20 - 1)
}

func runBench(ctx context.Context, c *benchConfig) (*benchReport, error) {
	b, err := openBacking(c)
	if err != nil {
		return nil, err
	}
	defer b.close()
	size := b.dev.Size()
	if c.size > 0 && c.size < size {
		size = c.size
	}
	region := regionFor(size)
	if region < 16<<20 {
		return nil, fmt.Errorf("device of %d bytes is too small for the bench: need at least %d MiB", size, minImageSize>>20)
	}
	plan, err := planSpace(size, region, c.blockSize)
	if err != nil {
		return nil, err
	}
	// A name is reused only once its last holder is done: at most
	// jobs-1 other files are in flight.
	plan.SmallFiles = max(plan.SmallFiles, 2*int64(c.goroutines))
	if err := plan.check(c.workloads); err != nil {
		return nil, err
	}
	if !c.json {
		// At the start, before minutes of workloads.
		fmt.Fprintln(c.stderr, plan.summary(c.workloads))
	}
	r := newBenchRun(c, b.dev, size, region, plan)
	defer r.closeEngine()
	desc := b.desc
	if b.path != "" {
		if r.disk = openHostDisk(b.path); r.disk != nil {
			desc += "; host disk " + r.disk.name
		} else {
			desc += "; no host block device"
		}
	}
	rep := newReport(c, desc, size, region)
	rep.Config.Space = plan.summary(c.workloads)
	rep.Kernel = kernelInfo{Skipped: "not requested (--kernel)"}
	var kenv *kernelEnv
	defer func() {
		if kenv != nil {
			kenv.teardown()
		}
	}()
	n := len(c.workloads)
	samples := make([][]roundSample, n) // per workload, one per round
	for round := range c.repeat {
		order := roundOrder(n, round)
		for pos, i := range order {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			w := c.workloads[i]
			r.prog.workload = fmt.Sprintf("[%s%d/%d] %s", roundTag(c, round), pos+1, n, w.Name)
			res, err := r.runWorkload(ctx, w)
			if err != nil {
				if cerr := ctx.Err(); cerr != nil {
					r.prog.clear()
					return nil, cerr
				}
				// The others' results stand: this one's row says why it
				// has none, and the next workload starts on a fresh
				// filesystem and raw region.
				res = failedResult(w, c.jobs(w), err)
				r.abandon()
			}
			samples[i] = append(samples[i], roundSample{round: round + 1, pos: pos + 1, res: res})
		}
		if err := r.closeEngine(); err != nil {
			// The volume last held the round's last workload.
			if s := &samples[order[n-1]][round]; s.res.Failed == "" {
				s.res.Failed = "closing the volume: " + oneLine(err)
			}
			r.abandon()
		}
		r.prog.clear()
		if !c.kernel {
			continue
		}
		if round == 0 {
			kenv, rep.Kernel = startKernel(ctx, kernelDir(c, b), region)
		}
		if kenv == nil {
			continue
		}
		for pos, i := range order {
			s := &samples[i][round]
			r.prog.workload = fmt.Sprintf("[linux %s%d/%d] %s", roundTag(c, round), pos+1, n, s.res.Name)
			r.prog.set("fio", "", time.Now(), 0)
			m, note, err := kenv.run(ctx, c, c.workloads[i], s.res.Jobs)
			if err != nil {
				s.res.KernelNote = "failed: " + oneLine(err)
				continue
			}
			s.res.Kernel, s.res.KernelNote = m, note
		}
		r.prog.clear()
	}
	rep.Workloads, rep.Ratios = combineRounds(samples)
	rep.Machine.LoadAfter = loadAvg()
	return rep, nil
}

// newBenchRun splits the first size bytes of dev into the filesystem's
// window and the raw region (the last region bytes), and opens a second
// window on the filesystem's bytes for raw I/O at the engine file's
// blocks, counted apart from the engine's.
func newBenchRun(c *benchConfig, dev blockdev.Device, size, region int64, plan *spacePlan) *benchRun {
	fsWin, fsDev := newWindow(dev, 0, size-region)
	rawWin, rawDev := newWindow(dev, size-region, region)
	rawFileWin, rawFileDev := newWindow(dev, 0, size-region)
	return &benchRun{cfg: c, fsWin: fsWin, fsDev: fsDev, rawWin: rawWin, rawDev: rawDev,
		rawFileWin: rawFileWin, rawFileDev: rawFileDev, region: region, plan: plan, prog: newProgress(c.stderr, c.progress)}
}

// roundOrder returns the indexes of n workloads in the order round (from
// 0) runs them: as listed in even rounds, reversed in odd ones.
func roundOrder(n, round int) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
		if round%2 == 1 {
			order[i] = n - 1 - i
		}
	}
	return order
}

// roundTag is the progress line's round prefix ("r2/3 "), empty without
// --repeat.
func roundTag(c *benchConfig, round int) string {
	if c.repeat == 1 {
		return ""
	}
	return fmt.Sprintf("r%d/%d ", round+1, c.repeat)
}

// kernelDir is where --kernel puts its backing file: beside the bench's
// image, in /dev/shm for the memory backend.
func kernelDir(c *benchConfig, b *backing) string {
	switch {
	case c.backend == "memory":
		return "/dev/shm"
	case b.path != "" && !b.temporary:
		return filepath.Dir(b.path)
	}
	return c.dir
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
