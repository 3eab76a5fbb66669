package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/ext4io/ext4io/internal/torture"
)

func init() {
	commands["torture"] = command{
		usage: "torture [--duration 30s] [--seed N] [--goroutines N] [--size 64M] [--block-size 4096] [--crash-every N] [--crash-points N] [--max-rounds N] [--dir DIR] [--round-seed N] [--fast-commit] [--atomic PCT] [-v]",
		help: "Run random rounds of file, namespace and xattr operations against a model, with crashes at\n" +
			"device operations, injected I/O errors and ENOSPC, checking crash images against the model\n" +
			"and e2fsck. A failing round's image and operation log are saved in --dir, and --round-seed\n" +
			"reruns that round alone (docs/testing.md).",
		run: cmdTorture,
	}
}

// cmdTorture runs the crash/fault/ENOSPC/file-backed torture harness
// (internal/torture): data, namespace and xattr operations, with a second
// writer that must be refused (ErrBusy) and read-only opens beside each
// round's writable Volume. The summary counts them (refused-opens,
// ro-opens, xattr-ops), and untorn writes checked after crashes
// (atomic-writes, atomic-checks).
func cmdTorture(args []string, w io.Writer) error {
	fs := newFlags("torture")
	dur := fs.Duration("duration", 30*time.Second, "how long to run")
	seed := fs.Uint64("seed", 0, "seed (0: from the clock)")
	gor := fs.Int("goroutines", 4, "concurrent workers")
	size := fs.String("size", "64M", "device size")
	bs := fs.Int("block-size", 4096, "filesystem block size")
	every := fs.Int("crash-every", 400, "operations per round")
	points := fs.Int("crash-points", 4, "crash images checked per round, drawn across the round's device-operation log")
	maxRounds := fs.Int("max-rounds", 0, "stop after this many rounds (0: no limit)")
	dir := fs.String("dir", os.TempDir(), "where failing images and op logs are saved")
	roundSeed := fs.Uint64("round-seed", 0, "run only the round with this round seed, on a fresh device")
	verbose := fs.Bool("v", false, "log each round")
	fastCommit := fs.Bool("fast-commit", false, "format with fast_commit: fsyncs write fast commits")
	atomicPct := fs.Int("atomic", 0, "percentage of steps that are untorn writes (WriteAtomic, WriteAtomicBatch); 0: 10, -1: none")
	if _, err := parseArgs(fs, args, 0, 0); err != nil {
		return err
	}
	if *gor <= 0 || *every <= 0 || *dur <= 0 || *points <= 0 || *maxRounds < 0 || *atomicPct < -1 || *atomicPct > 100 {
		return fmt.Errorf("%w: --goroutines, --crash-every, --duration and --crash-points must be positive, --max-rounds not negative, --atomic from -1 to 100", errUsage)
	}
	n, err := parseSize(*size)
	if err != nil {
		return fmt.Errorf("%w: --size: %w", errUsage, err)
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	fmt.Fprintf(w, "torture: seed %d duration %s\n", *seed, *dur)
	cfg := torture.Config{Seed: *seed, Duration: *dur, Goroutines: *gor, DeviceSize: n, BlockSize: *bs,
		CrashEvery: *every, CrashPoints: *points, MaxRounds: *maxRounds, Dir: *dir, RoundSeed: *roundSeed, FastCommit: *fastCommit, AtomicPercent: *atomicPct}
	if *verbose {
		cfg.Log = w
	}
	// An interrupt ends the run after the round under way, which removes
	// its temporary images; a second one kills the process.
	ctx, stop := interruptible()
	defer stop()
	go func() {
		<-ctx.Done()
		stop()
		if context.Cause(ctx) != context.Canceled {
			fmt.Fprintln(os.Stderr, "ext4io torture: interrupted: stopping after this round (interrupt again to quit at once)")
		}
	}()
	sum, err := torture.RunContext(ctx, cfg)
	fmt.Fprintf(w, "torture: %v\n", sum)
	return err
}
