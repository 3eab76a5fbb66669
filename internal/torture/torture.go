// Package torture runs randomized crash, fault and full-volume rounds
// against ext4io on an in-memory device and checks every outcome against a
// per-goroutine model and e2fsck.
//
// A round formats a device (half the time filled with random bytes first)
// or continues on the previous round's recovered image, opens it writable and runs random operations (create, buffered
// and Direct writes, truncate, every implemented fallocate mode, rename,
// unlink, mkdir/rmdir, File.Sync, File.Datasync, Volume.Sync, untorn
// writes (WriteAtomic, WriteAtomicBatch; atomic.go), and Setxattr (create,
// replace, plain; values from 0 to about 3000 bytes, in the inode or the
// external block; whole attribute sets the round's workers share, so that
// external blocks get h_refcount > 1), Getxattr, Listxattr, Removexattr)
// from several goroutines, each in its own directory, then closes the
// volume. Beside the workers a contender goroutine opens the device at
// random moments: a second writable open must fail with ErrBusy every time
// and leave the writer undisturbed, and a read-only open (stat of the
// root) must work. Then one of:
//
//   - crash: an errordev.Recorder logged every write, zero-out, discard and
//     flush of the round (the Open and the Close included); CrashPoints
//     points are drawn across that log, half of them just before a flush
//     completes (where a commit block or a log-tail update waits for its
//     flush), half anywhere. At a point, the image holds what the flushes completed by
//     then cover, plus each later write up to the point kept at random, the
//     write at the point itself possibly torn (see Recorder.CrashAt). Each
//     image is recovered by ext4io (Open Writable or Replay) or, one time in
//     four, by e2fsck -fy (when e2fsck 1.47.0's recovery fails on a stale
//     fast-commit HEAD, by ext4io and, as root, Linux's mount instead:
//     stalehead.go); e2fsck -fn must then be clean, every name and
//     content made durable by a sync that had returned by the point (and not
//     touched by an operation begun by then) must read back exactly, and no
//     file may hold a non-zero block that no version of the worker's files
//     had, bytes zeroed aside (stale data). The workers' models are snapshots stamped with the
//     log's length before and after each call. The next round continues on
//     the first point's recovered image;
//   - fault (one round in five): the device fails random writes and flushes;
//     operations must fail with errors wrapping ErrIO (never panic), then the
//     round is treated as a crash;
//   - ENOSPC: the workers fill the volume until ErrNoSpace; after Close the
//     image must be e2fsck-clean and match the model exactly.
//   - file (about one round in twenty): the device is an image file opened
//     with blockdev.OpenFile, and the contender also opens the file
//     through a second blockdev.OpenFile, which must be refused too; after
//     Close the image must be e2fsck-clean and match the model exactly.
//
// Extended attributes are modeled per file: after a crash, Listxattr and
// Getxattr must give one of the sets the file had between its last sync
// (File.Sync or Volume.Sync) and the crash point.
//
// Untorn writes are modeled per atomic step (atomic.go): after a crash,
// each unit (a whole batch) reads entirely new or entirely not new, and
// overlapping concurrent units as some serial order of them.
//
// Invariants checked: a synced state survives a crash at any point, no
// crash exposes stale blocks, and no crash tears an atomic write. Goroutine interleaving is not deterministic,
// so a seed reproduces the operation sequence of each goroutine but not
// their interleaving.
//
// Why crash points span the log: a single image taken when a round's
// operations end has no commit or checkpoint in flight. Every commit ends
// with a flush after its commit block, and every checkpoint with a flush
// after the journal superblock, and a flush makes everything before it
// durable, so a missing flush before the commit block or before the tail
// update leaves no trace by then. The mutation check (mutants_test.go,
// internal/mutant) keeps this honest: each known ordering bug, built in by
// a tag, must make the torture fail within 200 rounds.
package torture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// Config configures Run.
type Config struct {
	Seed       uint64
	Duration   time.Duration
	Goroutines int    // 0: 4
	DeviceSize int64  // 0: 64 MiB
	BlockSize  int    // filesystem block size; 0: 4096
	CrashEvery int    // operations per round (all goroutines); 0: 400
	Dir        string // where failing images and op logs go; "": os.TempDir()
	Log        io.Writer
	// RoundSeed, if not 0, runs exactly one round with this round seed (as
	// printed in the log and the failure report) on a freshly formatted
	// device, ignoring Seed and Duration.
	RoundSeed uint64
	// CrashPoints is the number of crash images checked per crash or
	// fault round; 0: 4.
	CrashPoints int
	// MaxRounds, if not 0, ends the run after this many rounds even if
	// Duration is left (Duration 0: no time limit).
	MaxRounds int
	// FastCommit formats with the fast_commit feature: Syncs write fast
	// commits, and crash images hold them for recovery to replay.
	FastCommit bool
	// NoLinux skips Linux's recovery (mount -o loop, as root) of the crash
	// images e2fsck fails to recover because of a stale fast-commit HEAD
	// (stalehead.go); ext4io's recovery is checked either way.
	NoLinux bool
	// AtomicPercent is the percentage of steps that are atomic steps
	// (WriteAtomic, WriteAtomicBatch: atomic.go), on top of the
	// CrashEvery operations; 0: 10, -1: none.
	AtomicPercent int
}

// Summary counts what Run did.
type Summary struct {
	Rounds, Operations            int
	Crashes, RecoveredByExt4io    int // Crashes: crash images checked
	DeviceOps, CrashPointsAtFlush int
	RecoveredByE2fsck, E2fsckRuns int
	IOErrorsInjected, FaultRounds int
	ENOSPCRounds, Failures        int
	// RefusedOpens counts second writable opens beside a round's writer,
	// each refused with ErrBusy; ReadOnlyOpens the read-only opens beside
	// it that worked.
	RefusedOpens, ReadOnlyOpens int
	FileRounds                  int // rounds on a file-backed device (blockdev.OpenFile)
	XattrOps                    int // Setxattr, Getxattr, Listxattr, Removexattr calls
	// StaleHead counts crash images whose e2fsck -fy recovery failed on a
	// stale fast-commit HEAD and that were recovered and checked with
	// ext4io instead; StaleHeadLinux those of them Linux's mount recovered
	// and that passed the same checks.
	StaleHead, StaleHeadLinux int
	// AtomicWrites counts WriteAtomic and WriteAtomicBatch calls (atomic.go),
	// AtomicBatches the batches of several ranges that succeeded,
	// AtomicRefused the calls refused with ErrUnsupported, and
	// AtomicChecks the units checked untorn in crash images;
	// AtomicJournalled counts the calls written through the journal and
	// in place (ext4io.Counters.AtomicJournalled).
	AtomicWrites, AtomicBatches, AtomicRefused, AtomicChecks, AtomicJournalled int
}

func (s Summary) String() string {
	return fmt.Sprintf("rounds=%d ops=%d xattr-ops=%d device-ops=%d crashes=%d (at a flush %d) recovered(ext4io)=%d recovered(e2fsck)=%d e2fsck-runs=%d fault-rounds=%d io-errors=%d enospc-rounds=%d file-rounds=%d refused-opens=%d ro-opens=%d stale-head(e2fsck failed; ext4io checked)=%d (Linux checked %d) atomic-writes=%d (batches %d, refused %d, journalled %d) atomic-checks=%d failures=%d",
		s.Rounds, s.Operations, s.XattrOps, s.DeviceOps, s.Crashes, s.CrashPointsAtFlush, s.RecoveredByExt4io, s.RecoveredByE2fsck, s.E2fsckRuns,
		s.FaultRounds, s.IOErrorsInjected, s.ENOSPCRounds, s.FileRounds, s.RefusedOpens, s.ReadOnlyOpens, s.StaleHead, s.StaleHeadLinux, s.AtomicWrites, s.AtomicBatches, s.AtomicRefused, s.AtomicJournalled, s.AtomicChecks, s.Failures)
}

// runner is the state of one Run; used by one goroutine.
type runner struct {
	cfg   Config
	sum   Summary
	fsck  string // e2fsck path, "" if missing
	linux bool   // Linux can mount images (root, loop devices) and Config.NoLinux is off
	rng   *rand.Rand
	dev   *memdev.Device // the image the next round starts from; nil: format
	round int
}

// Run tortures ext4io for cfg.Duration and returns what it did. The error
// names the seed, where the image and op log were saved and the command
// line that reruns the seed.
func Run(cfg Config) (Summary, error) { return RunContext(context.Background(), cfg) }

// RunContext is Run that also stops when ctx is done: the round under way
// finishes, with its checks and the removal of its temporary files, and
// no other starts. The error then wraps context.Cause(ctx) and says how
// many rounds ran; the Summary counts them.
func RunContext(ctx context.Context, cfg Config) (Summary, error) {
	if cfg.Goroutines <= 0 {
		cfg.Goroutines = 4
	}
	if cfg.DeviceSize <= 0 {
		cfg.DeviceSize = 64 << 20
	}
	if cfg.BlockSize <= 0 {
		cfg.BlockSize = 4096
	}
	if cfg.CrashEvery <= 0 {
		cfg.CrashEvery = 400
	}
	if cfg.Dir == "" {
		cfg.Dir = os.TempDir()
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.CrashPoints <= 0 {
		cfg.CrashPoints = 4
	}
	switch {
	case cfg.AtomicPercent == 0:
		cfg.AtomicPercent = 10
	case cfg.AtomicPercent < 0:
		cfg.AtomicPercent = 0
	}
	r := &runner{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x70727475))}
	r.fsck, _ = exec.LookPath("e2fsck")
	r.linux = !cfg.NoLinux && linuxAvailable()
	deadline := time.Now().Add(cfg.Duration)
	more := func() bool {
		if cfg.RoundSeed != 0 || cfg.MaxRounds > 0 && r.round >= cfg.MaxRounds {
			return false
		}
		return cfg.Duration <= 0 && cfg.MaxRounds > 0 || time.Now().Before(deadline)
	}
	for r.round == 0 || more() {
		if ctx.Err() != nil {
			rounds := "rounds"
			if r.round == 1 {
				rounds = "round"
			}
			return r.sum, fmt.Errorf("interrupted after %d %s: %w", r.round, rounds, context.Cause(ctx))
		}
		seed := r.rng.Uint64()
		if cfg.RoundSeed != 0 {
			seed = cfg.RoundSeed
		}
		ws, img, err := r.doRound(seed)
		r.round++
		r.sum.Rounds++
		if err != nil {
			r.sum.Failures++
			return r.sum, r.fail(seed, ws, img, err)
		}
	}
	return r.sum, nil
}

func (r *runner) fail(seed uint64, ws []*worker, img *memdev.Device, err error) error {
	base := filepath.Join(r.cfg.Dir, fmt.Sprintf("torture-%d-round%d", r.cfg.Seed, r.round-1))
	var saved []string
	if img != nil {
		if e := saveImage(img, base+".img"); e == nil {
			saved = append(saved, base+".img")
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d round %d round-seed %d\nerror: %v\n", r.cfg.Seed, r.round-1, seed, err)
	for _, w := range ws {
		fmt.Fprintf(&b, "== %s\n%s\n", w.dir, strings.Join(w.log, "\n"))
	}
	if os.WriteFile(base+".log", []byte(b.String()), 0o644) == nil {
		saved = append(saved, base+".log")
	}
	limit := fmt.Sprintf("--duration %s", r.cfg.Duration)
	if r.cfg.MaxRounds > 0 {
		limit = fmt.Sprintf("--duration %s --max-rounds %d", max(r.cfg.Duration, time.Hour), r.cfg.MaxRounds)
	}
	if r.cfg.FastCommit {
		limit += " --fast-commit"
	}
	switch r.cfg.AtomicPercent {
	case 10:
	case 0:
		limit += " --atomic -1"
	default:
		limit += fmt.Sprintf(" --atomic %d", r.cfg.AtomicPercent)
	}
	return fmt.Errorf("torture: seed %d round %d: %w (saved %s); reproduce (goroutine interleaving varies, so the same round may not fail again): ext4io torture --seed %d %s --goroutines %d --size %d --block-size %d --crash-every %d --crash-points %d (this round alone, on a fresh device: --round-seed %d)",
		r.cfg.Seed, r.round-1, err, strings.Join(saved, ", "), r.cfg.Seed, limit, r.cfg.Goroutines, r.cfg.DeviceSize, r.cfg.BlockSize, r.cfg.CrashEvery, r.cfg.CrashPoints, seed)
}

// doRound runs one round; on failure it returns the image to save.
func (r *runner) doRound(seed uint64) ([]*worker, *memdev.Device, error) {
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	formatted := ""
	if r.dev == nil || rng.IntN(4) == 0 {
		// A logical block no larger than the file system's, as Linux
		// requires to mount it: Direct writes are block-aligned.
		r.dev = memdev.NewBlockSize(r.cfg.DeviceSize, min(r.cfg.BlockSize, 4096))
		formatted = " formatted"
		if seed>>40&1 == 0 { // not from rng: its draws stay as they were
			// Random bytes in every block mkfs leaves alone: a stale
			// block (never written, exposed by a mapping) then fails the
			// model's stale-data check instead of reading as zeroes.
			fillGarbage(r.dev, seed)
			formatted += " (garbage-filled)"
		}
		if err := ext4io.Format(r.dev, ext4io.FormatOptions{BlockSize: r.cfg.BlockSize, FastCommit: r.cfg.FastCommit, Rand: rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16)})}); err != nil {
			return nil, nil, fmt.Errorf("format: %w", err)
		}
	}
	kind := "crash"
	switch {
	case rng.IntN(5) == 0:
		kind = "fault"
		r.sum.FaultRounds++
	case rng.IntN(8) == 0:
		kind = "enospc"
		r.sum.ENOSPCRounds++
	case seed>>41&15 == 0: // not from rng, as above
		// On an image file (blockdev.OpenFile), which a second Device on
		// the same file must not open for writing either; no crash
		// points (the Recorder sees no writes), a clean Close instead.
		kind = "file"
		r.sum.FileRounds++
	}
	start, err := r.dev.Clone()
	if err != nil {
		return nil, nil, err
	}
	rec, err := errordev.NewRecorder(r.dev)
	if err != nil {
		return nil, start, err
	}
	toggle := errordev.NewToggle(errordev.Kinds(errordev.Random(seed, 0.002+rng.Float64()*0.02), errordev.Write, errordev.Flush, errordev.ZeroOut))
	counter := errordev.NewCounter(toggle)
	var dev blockdev.Device = rec
	var fdev *blockdev.File
	var imgPath string
	switch kind {
	case "fault":
		dev = errordev.New(rec, counter)
	case "file":
		if fdev, imgPath, err = fileDevice(r.dev); err != nil {
			return nil, start, err
		}
		defer os.Remove(imgPath)
		defer fdev.Close()
		dev = fdev
	}
	// The write paths for preallocated space: conversions queued for the
	// next commit (the default), made in the write (split at submission,
	// convert at completion), split at completion, or whole zeroed chunks.
	opts, label := ext4io.Options{Writable: true}, kind
	switch rng.IntN(5) {
	case 0:
		opts.Tuning.DeferSplits = true
		label += " defer-splits"
	case 1:
		opts.Tuning.ZeroOutChunk = 16 << 10 << rng.IntN(3)
		label += fmt.Sprintf(" zeroout-chunk=%d", opts.Tuning.ZeroOutChunk)
	case 2:
		opts.Tuning.EagerConversions = true
		label += " eager-conversions"
	}
	v, err := ext4io.Open(dev, opts)
	if err != nil {
		return nil, start, fmt.Errorf("open writable: %w", err)
	}
	ws := make([]*worker, r.cfg.Goroutines)
	shared := sharedSets(rand.New(rand.NewPCG(seed, 0x78617474)), 2, r.cfg.BlockSize)
	for i := range ws {
		ws[i] = newWorker(v, fmt.Sprintf("/r%dg%d", r.round, i), rng.Uint64(), r.cfg.BlockSize)
		ws[i].shared = shared
		ws[i].atomicPct = r.cfg.AtomicPercent
		ws[i].clock = rec.Len
		if err := v.Mkdir(ws[i].dir, 0o755); err != nil {
			if errors.Is(err, ext4io.ErrNoSpace) {
				r.dev = nil // full from earlier rounds: format next time
				v.Close()
				return ws, nil, nil
			}
			return ws, start, fmt.Errorf("mkdir %s: %w", ws[i].dir, err)
		}
	}
	if err := v.Sync(); err != nil {
		return ws, start, fmt.Errorf("sync: %w", err)
	}
	for _, w := range ws {
		w.volSync = true
		w.syncAll()
		w.hist = append(w.hist, w.snapshot(false, "round start"))
	}
	fmt.Fprintf(r.cfg.Log, "round %d seed %d: %s%s\n", r.round, seed, label, formatted)
	if kind == "fault" {
		toggle.Enable()
	}
	// A second writer at random moments of the round must be refused,
	// and read-only opens beside the writer must work.
	c := &contender{dev: dev, path: imgPath, rng: rand.New(rand.NewPCG(seed, 0x636f6e74))}
	err = contend(c, func() error { return runWorkers(ws, r.cfg.CrashEvery/r.cfg.Goroutines, kind == "fault") })
	r.sum.RefusedOpens += c.refused
	r.sum.ReadOnlyOpens += c.readOnly
	fmt.Fprintf(r.cfg.Log, "round %d: refused-opens=%d ro-opens=%d\n", r.round, c.refused, c.readOnly)
	for _, w := range ws {
		r.sum.Operations += w.ops
		r.sum.XattrOps += w.xops
		r.sum.AtomicWrites += w.aops
		r.sum.AtomicBatches += w.abatches
		r.sum.AtomicRefused += w.arefused
	}
	r.sum.AtomicJournalled += int(v.Counters().AtomicJournalled)
	r.sum.IOErrorsInjected += int(counter.Failed(errordev.Write) + counter.Failed(errordev.Flush) + counter.Failed(errordev.ZeroOut))
	if err != nil {
		img, _, _ := rec.CrashAt(rec.Len()-1, errordev.CrashAtOptions{KeepProb: 1})
		v.Close()
		return ws, img, err
	}
	if kind == "enospc" {
		return ws, nil, r.enospc(v, ws)
	}
	if kind == "file" {
		return ws, nil, r.fileRound(v, ws, imgPath)
	}
	// Close is part of the log: its commit, checkpoint and journal
	// superblock update are crash points too.
	if err := v.Close(); err != nil && kind != "fault" && !errors.Is(err, ext4io.ErrNoSpace) {
		img, _, _ := rec.CrashAt(rec.Len()-1, errordev.CrashAtOptions{KeepProb: 1})
		return ws, img, fmt.Errorf("close: %w", err)
	}
	// Crash points cover the whole log, the Open and the round's first
	// transaction (into a log the last recovery emptied) included: only
	// there can replay not mask a transaction's blocks written home
	// before their commit, as older copies of the hot blocks are always
	// in the log later on. Before the round's first Sync the workers'
	// models are not checked (their directories may not exist yet); e2fsck is.
	n := rec.Len()
	r.sum.DeviceOps += n
	flushes := rec.Flushes()
	var next *memdev.Device
	for k := range r.cfg.CrashPoints {
		p := -1 + rng.IntN(n+1)
		at := ""
		if len(flushes) > 0 && rng.IntN(2) == 0 {
			// Just before a flush completes: what it would have made
			// durable may or may not be there.
			p = flushes[rng.IntN(len(flushes))] - 1
			at = " (before a flush)"
			r.sum.CrashPointsAtFlush++
		}
		copts := errordev.CrashAtOptions{Seed: seed + uint64(k), KeepProb: rng.Float64(), Tear: rng.IntN(2) == 0, TearUnit: int64(r.cfg.BlockSize)}
		img, rep, err := rec.CrashAt(p, copts)
		if err != nil {
			return ws, nil, err
		}
		r.sum.Crashes++
		saved, _ := img.Clone()
		where := fmt.Sprintf("crash point %d of %d%s: %v", p, n, at, rep)
		if err := r.recoverAndCheck(img, ws, p, rng); err != nil {
			return ws, saved, fmt.Errorf("%s: %w", where, err)
		}
		if next == nil {
			next = img
		}
	}
	r.dev = next
	return ws, nil, nil
}

// enospc fills the volume, closes it cleanly and checks it.
func (r *runner) enospc(v *ext4io.Volume, ws []*worker) error {
	full := false
	for _, w := range ws {
		got, err := w.fillPhase()
		if err != nil {
			v.Close()
			return err
		}
		full = full || got
	}
	if !full {
		v.Close()
		return fmt.Errorf("filling the volume never returned ErrNoSpace")
	}
	if err := v.Close(); err != nil {
		return fmt.Errorf("close after ENOSPC: %w", err)
	}
	img, err := r.dev.Clone() // everything: Close flushed
	if err != nil {
		return err
	}
	if err := r.fsckN(img); err != nil {
		return err
	}
	v2, err := ext4io.Open(img, ext4io.Options{})
	if err != nil {
		return fmt.Errorf("reopen after ENOSPC: %w", err)
	}
	defer v2.Close()
	for _, w := range ws {
		if err := w.check(v2, false); err != nil {
			return err
		}
	}
	r.dev = nil // full: format next round
	return nil
}

// fileDevice saves img to a temporary file and opens it as a Device.
func fileDevice(img *memdev.Device) (*blockdev.File, string, error) {
	f, err := os.CreateTemp("", "torture-file-*.img")
	if err != nil {
		return nil, "", err
	}
	name := f.Name()
	f.Close()
	if err := saveImage(img, name); err != nil {
		os.Remove(name)
		return nil, "", err
	}
	fdev, err := blockdev.OpenFile(name, false)
	if err != nil {
		os.Remove(name)
		return nil, "", fmt.Errorf("blockdev.OpenFile: %w", err)
	}
	return fdev, name, nil
}

// fileRound closes a file-backed round's volume, copies the image back
// into r.dev (the Device on it stays open: pwrite went to the host's
// page cache, which reads see) and checks it: e2fsck-clean and equal to the model.
func (r *runner) fileRound(v *ext4io.Volume, ws []*worker, name string) error {
	if err := v.Close(); err != nil && !errors.Is(err, ext4io.ErrNoSpace) {
		return fmt.Errorf("close: %w", err)
	}
	if err := loadImage(r.dev, name); err != nil {
		return err
	}
	img, err := r.dev.Clone()
	if err != nil {
		return err
	}
	if err := r.fsckN(img); err != nil {
		return fmt.Errorf("file-backed round: %w", err)
	}
	v2, err := ext4io.Open(img, ext4io.Options{})
	if err != nil {
		return fmt.Errorf("reopen after a file-backed round: %w", err)
	}
	defer v2.Close()
	for _, w := range ws {
		if err := w.check(v2, false); err != nil {
			return fmt.Errorf("file-backed round: %w", err)
		}
	}
	return nil
}

// recoverAndCheck recovers an image crashed after log entry p and checks it
// against the model's state at p.
func (r *runner) recoverAndCheck(img *memdev.Device, ws []*worker, p int, rng *rand.Rand) error {
	check := func(v *ext4io.Volume) error {
		for _, w := range ws {
			s, ok := w.at(p)
			if !ok {
				continue // before the round's first sync: nothing is promised
			}
			if err := w.checkAt(v, s); err != nil {
				return fmt.Errorf("%s: %s operation %q, log %d: %w", w.dir, map[bool]string{true: "in flight", false: "after"}[s.pre], s.op, s.idx, err)
			}
			n, err := w.checkAtomic(v, p)
			r.sum.AtomicChecks += n
			if err != nil {
				return fmt.Errorf("%s: %w", w.dir, err)
			}
		}
		return nil
	}
	return r.recoverAndCheckFn(img, rng, check)
}

// recoverAndCheckFn recovers img, by e2fsck one time in four, else by
// ext4io, and checks the result: e2fsck -fn clean, then check.
func (r *runner) recoverAndCheckFn(img *memdev.Device, rng *rand.Rand, check func(*ext4io.Volume) error) error {
	how := "e2fsck -fy"
	if r.fsck != "" && rng.IntN(4) == 0 {
		var err error
		if how, err = r.recoverByE2fsck(img, check); err != nil {
			return err
		}
		r.sum.RecoveredByE2fsck++
	} else {
		opts := ext4io.Options{Writable: true}
		how = "ext4io Open(Writable)"
		if rng.IntN(2) == 0 {
			opts = ext4io.Options{Replay: true}
			how = "ext4io Open(Replay)"
		}
		v, err := ext4io.Open(img, opts)
		if err != nil {
			return fmt.Errorf("recovery (%+v): %w", opts, err)
		}
		if err := v.Close(); err != nil {
			return fmt.Errorf("close after recovery: %w", err)
		}
		if opts.Replay {
			// A replay leaves orphans for the mount to release, as the
			// kernel's journal_only recovery does: mount writable.
			if v, err = ext4io.Open(img, ext4io.Options{Writable: true}); err != nil {
				return fmt.Errorf("writable open after replay: %w", err)
			}
			if err := v.Close(); err != nil {
				return fmt.Errorf("close after replay: %w", err)
			}
		}
		r.sum.RecoveredByExt4io++
	}
	if err := r.fsckN(img); err != nil {
		return fmt.Errorf("after recovery by %s: %w", how, err)
	}
	v, err := ext4io.Open(img, ext4io.Options{})
	if err != nil {
		return fmt.Errorf("open image recovered by %s: %w", how, err)
	}
	defer v.Close()
	if err := check(v); err != nil {
		return fmt.Errorf("after recovery by %s (%w)", how, err)
	}
	return nil
}

// fsckN runs e2fsck -fn on the image; it must exit 0.
func (r *runner) fsckN(img *memdev.Device) error {
	if r.fsck == "" {
		return nil
	}
	out, code, err := r.e2fsck(img, "-fn", false)
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("e2fsck -fn exit %d:\n%s", code, out)
	}
	return nil
}

func (r *runner) e2fsck(img *memdev.Device, flag string, writeBack bool) (string, int, error) {
	f, err := os.CreateTemp("", "torture-*.img")
	if err != nil {
		return "", 0, err
	}
	name := f.Name()
	f.Close()
	defer os.Remove(name)
	if err := saveImage(img, name); err != nil {
		return "", 0, err
	}
	r.sum.E2fsckRuns++
	out, err := exec.Command(r.fsck, flag, name).CombinedOutput()
	code := 0
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		return "", 0, err
	}
	if writeBack {
		if err := loadImage(img, name); err != nil {
			return "", 0, err
		}
	}
	return string(out), code, nil
}

const chunk = 1 << 20

// fillGarbage writes random bytes over all of dev.
func fillGarbage(dev *memdev.Device, seed uint64) {
	rng := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), byte(seed >> 24), 'g'})
	buf := make([]byte, chunk)
	for off := int64(0); off < dev.Size(); off += chunk {
		n := min(chunk, dev.Size()-off)
		rng.Read(buf[:n])
		dev.WriteAt(buf[:n], off)
	}
}

// saveImage writes dev to a sparse file.
func saveImage(dev *memdev.Device, name string) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(dev.Size()); err != nil {
		return err
	}
	buf := make([]byte, chunk)
	for off := int64(0); off < dev.Size(); off += chunk {
		n := min(chunk, dev.Size()-off)
		if _, err := dev.ReadAt(buf[:n], off); err != nil {
			return err
		}
		if !allZero(buf[:n]) {
			if _, err := f.WriteAt(buf[:n], off); err != nil {
				return err
			}
		}
	}
	return f.Close()
}

// loadImage copies the file back into dev.
func loadImage(dev *memdev.Device, name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, chunk)
	for off := int64(0); off < dev.Size(); off += chunk {
		n := min(chunk, dev.Size()-off)
		if _, err := f.ReadAt(buf[:n], off); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if _, err := dev.WriteAt(buf[:n], off); err != nil {
			return err
		}
	}
	return nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
