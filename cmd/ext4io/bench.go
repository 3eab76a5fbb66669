package main

// ext4io bench: the command line over internal/bench, which runs the
// workloads and writes the report (see its package doc and docs/bench.md).
// Here: the flags, the profiles of the whole run, GOMAXPROCS, and where
// the report goes.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strings"

	"github.com/ext4io/ext4io/internal/bench"
)

func init() {
	commands["bench"] = command{
		usage: "bench [--backend file|direct|mmap|memory|nbd] [--image PATH|URI] [--size N] [--runtime 5s] [--repeat N] [--goroutines N] [--gomaxprocs N] " +
			"[--block-size N] [--workloads a,b] [--raw-at file|region] [--json] [--svg FILE] [--kernel] [--fast-commit] [--dir DIR] [--eager-conversions] [--defer-splits] [--zeroout-chunk N] [--atomic-journal-max N] [--seed N] [--progress | --no-progress] [--cpuprofile FILE] [--mutexprofile FILE] [--blockprofile FILE] [--trace FILE]",
		help: "Run each I/O workload through the File API and the same I/O on the raw device (the ceiling),\n" +
			"on a temporary image in --dir (or --image, which is overwritten), and print a table of rates,\n" +
			"latencies and their ratio. The full run takes a few minutes; --size, --runtime and --workloads\n" +
			"make it shorter, --backend memory needs no disk (docs/bench.md).",
		run: cmdBench,
	}
}

// benchFlags is the parsed command line: the run's configuration and
// what the command does around it.
type benchFlags struct {
	cfg        bench.Config
	gomaxprocs int // 0 = Go's default (the CPU count)
	json       bool
	svg        string
	cpuprofile string // pprof CPU profile of the whole run
	mutexprof  string // pprof mutex contention profile of the whole run
	blockprof  string // pprof blocking profile of the whole run
	tracefile  string // runtime execution trace of the whole run
}

func parseBenchFlags(args []string) (*benchFlags, error) {
	fs := newFlags("bench")
	f := &benchFlags{}
	c := &f.cfg
	var size, names string
	fs.StringVar(&c.Backend, "backend", "file", strings.Join(bench.Backends, "|"))
	fs.StringVar(&c.Image, "image", "", "image file or block device, or NBD URI for --backend nbd (overwritten!)")
	fs.StringVar(&c.Dir, "dir", os.TempDir(), "directory for the temporary image")
	fs.StringVar(&size, "size", "", "device size (default: a few GiB, less if disk is short)")
	fs.DurationVar(&c.Runtime, "runtime", bench.DefaultRuntime, "time per workload, engine and raw each")
	fs.IntVar(&c.Repeat, "repeat", 1, "run the workload list N times, every other round reversed; report medians")
	fs.IntVar(&c.Goroutines, "goroutines", 0, "override the goroutines of random and fsync workloads")
	fs.IntVar(&f.gomaxprocs, "gomaxprocs", 0, "set GOMAXPROCS for the run (0: Go's default, the CPU count)")
	fs.IntVar(&c.BlockSize, "block-size", bench.DefaultBlockSize, "filesystem block size")
	fs.StringVar(&names, "workloads", "", "comma-separated subset (default all)")
	rawAt := fs.String("raw-at", "file", "where raw does the I/O of workloads on a prepared file: file (the engine file's device blocks) or region (the raw window)")
	fs.BoolVar(&f.json, "json", false, "machine-readable output")
	fs.StringVar(&f.svg, "svg", "", "write an SVG bar chart to FILE")
	fs.BoolVar(&c.DeferSplits, "defer-splits", false, "engine: split unwritten extents at I/O completion (Options.Tuning.DeferSplits)")
	fs.BoolVar(&c.FastCommit, "fast-commit", false, "format the engine's filesystem with fast_commit (fsyncs write fast commits); with --kernel, Linux runs at its defaults and, for fsync-small, also with fast_commit")
	fs.BoolVar(&c.EagerConversions, "eager-conversions", false, "engine: split and convert unwritten extents in each write instead of queueing conversions (Options.Tuning.EagerConversions)")
	fs.Int64Var(&c.AtomicJournalMax, "atomic-journal-max", 0, "engine: journal atomic writes of at most N bytes and write them in place (Options.Tuning.AtomicJournalMax; 0: default, -1: always remap)")
	zeroChunk := fs.String("zeroout-chunk", "", "engine: zero and convert preallocated space in chunks of N bytes (Options.Tuning.ZeroOutChunk)")
	fs.StringVar(&f.cpuprofile, "cpuprofile", "", "write a CPU profile of the run (go tool pprof) to FILE")
	fs.StringVar(&f.mutexprof, "mutexprofile", "", "write a mutex contention profile of the run (go tool pprof) to FILE")
	fs.StringVar(&f.blockprof, "blockprofile", "", "write a profile of where goroutines blocked (locks, channels; go tool pprof) to FILE")
	fs.StringVar(&f.tracefile, "trace", "", "write a runtime execution trace of the run (go tool trace) to FILE")
	fs.BoolVar(&c.Kernel, "kernel", false, "also run the jobs with fio on Linux ext4 (root, fio)")
	fs.Uint64Var(&c.Seed, "seed", 1, "random offset seed")
	noProgress := fs.Bool("no-progress", false, "no progress line on stderr")
	forceProgress := fs.Bool("progress", false, "progress line on stderr even when it is not a terminal")
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() != 0 {
		return nil, fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	switch *rawAt {
	case "file":
	case "region":
		c.RawAtRegion = true
	default:
		return nil, fmt.Errorf("%w: --raw-at %q: want file or region", errUsage, *rawAt)
	}
	if c.Backend == "memory" && c.Image != "" {
		return nil, fmt.Errorf("%w: --image makes no sense with --backend memory", errUsage)
	}
	if size != "" {
		n, err := parseSize(size)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		c.Size = n
	}
	if *zeroChunk != "" && *zeroChunk != "0" {
		zc, err := parseSize(*zeroChunk)
		if err != nil {
			return nil, fmt.Errorf("%w: --zeroout-chunk: %v", errUsage, err)
		}
		c.ZeroOutChunk = zc
	}
	if c.Runtime <= 0 || c.Goroutines < 0 || f.gomaxprocs < 0 || c.Repeat < 1 {
		return nil, fmt.Errorf("%w: --runtime and --repeat must be positive, --goroutines and --gomaxprocs non-negative", errUsage)
	}
	if names != "" {
		c.Workloads = strings.Split(names, ",")
	}
	// The backend and the workloads.
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if !f.json {
		c.Log = stderr
	}
	if *forceProgress || !f.json && !*noProgress && isTerminal(stderr) {
		c.Progress = stderr
	}
	return f, nil
}

// isTerminal reports whether w is a file that is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func cmdBench(args []string, stdout io.Writer) error {
	f, err := parseBenchFlags(args)
	if err != nil {
		return err
	}
	ctx, stop := interruptible()
	defer stop()
	if f.gomaxprocs > 0 {
		// Blocking pread/pwrite keep their P until the runtime hands it
		// on, so with GOMAXPROCS at the CPU count fewer I/Os are in flight
		// than goroutines issue (fio's jobs are processes).
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(f.gomaxprocs))
	}
	if f.cpuprofile != "" {
		pf, err := os.Create(f.cpuprofile)
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
	if f.mutexprof != "" {
		pf, err := os.Create(f.mutexprof)
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
	if f.tracefile != "" {
		tf, err := os.Create(f.tracefile)
		if err != nil {
			return err
		}
		defer tf.Close()
		if err := trace.Start(tf); err != nil {
			return err
		}
		defer trace.Stop()
	}
	if f.blockprof != "" {
		pf, err := os.Create(f.blockprof)
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
	rep, err := bench.Run(ctx, f.cfg)
	if err != nil {
		if ctx.Err() != nil {
			// The run stopped at the interrupt: say so rather than
			// "context canceled".
			return fmt.Errorf("interrupted: %w: no report", context.Cause(ctx))
		}
		return err
	}
	if f.svg != "" {
		if err := writeSVG(f.svg, rep); err != nil {
			return err
		}
	}
	if f.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		rep.WriteText(stdout)
	}
	// The report has been written: the exit status says what its rows say.
	return rep.Err()
}

func writeSVG(path string, rep *bench.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := rep.WriteSVG(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
