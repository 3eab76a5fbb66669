package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/blockdev/nbd"
)

const (
	// Schema names the JSON form of a Report.
	Schema = "ext4io-bench/1"
	// DefaultRuntime is the time per workload the command runs by
	// default, for the engine and for raw.
	DefaultRuntime = 5 * time.Second
	// DefaultBlockSize is the filesystem block size when
	// Config.BlockSize is 0.
	DefaultBlockSize = 4096

	benchRounds        = 2       // phases per side and workload, run ABBA
	defaultImageSize   = 4 << 30 // embedded image, when disk allows
	minImageSize       = 64 << 20
	defaultMemoryImage = 2 << 30
)

// Backends are the values of Config.Backend.
var Backends = []string{"file", "direct", "mmap", "memory", "nbd"}

// Config is what a run does. Zero fields take the defaults their
// comments give; Runtime has none and must be positive.
type Config struct {
	// Backend is the device backend: "file" (pread/pwrite, the
	// default), "direct" (O_DIRECT), "mmap", "memory" (a memdev) or
	// "nbd" (a blockdev/nbd client on the export Image names).
	Backend string
	// Image is the image file or block device to use; the run
	// overwrites it, and creates it at the chosen size if it does not
	// exist. "" uses a temporary image file in Dir, removed at the end.
	// It must be "" for the memory backend, and an NBD URI
	// (nbd://host/export, nbd+unix:///export?socket=PATH) for nbd, whose
	// export the run overwrites.
	Image string
	// Dir is where the temporary image and the Kernel column's backing
	// file go (default os.TempDir()).
	Dir string
	// Size is the device size in bytes; 0 chooses: 4 GiB or a third of
	// Dir's free space, whichever is less (2 GiB for memory).
	Size int64
	// Runtime is the time per workload, split between its phases, for
	// the engine and for raw each.
	Runtime time.Duration
	// Repeat is the number of rounds over the workload list, odd rounds
	// in list order and even rounds reversed (default 1).
	Repeat int
	// Goroutines overrides the jobs of the random and fsync workloads
	// (0: each workload's own).
	Goroutines int
	// BlockSize is the filesystem block size (default 4096).
	BlockSize int
	// Workloads names the workloads to run (WorkloadNames); they run in
	// that list's order whatever the order here. nil runs all.
	Workloads []string
	// RawAtRegion makes raw use its own window for every workload, not
	// the engine file's device blocks for those on a prepared file.
	RawAtRegion bool
	// DeferSplits, EagerConversions and ZeroOutChunk set the engine's
	// ext4io.Options of the same names.
	DeferSplits      bool
	EagerConversions bool
	ZeroOutChunk     int64
	// AtomicJournalMax sets the engine's Options.Tuning.AtomicJournalMax
	// (0: the default; negative: atomic writes always remap).
	AtomicJournalMax int64
	// FastCommit formats the engine's filesystem with the fast_commit
	// feature: fsyncs write fast commits. With Kernel, Linux runs the
	// jobs at its defaults (no fast_commit) and, for the workloads whose
	// Linux path fast_commit changes (fastCommitMatters), also on a
	// second filesystem with fast_commit, in the same rounds.
	FastCommit bool
	// Kernel also runs each round's jobs with fio on Linux's ext4 over a
	// loop device (root, fio); the report says why when it cannot.
	Kernel bool
	// Seed seeds the random offsets of both sides.
	Seed uint64
	// Log receives the space plan's line before the first workload (nil:
	// not written).
	Log io.Writer
	// Progress receives a carriage-return-updated status line while
	// phases run (nil: none).
	Progress io.Writer
}

// config is a Config with its defaults filled in and its workloads
// resolved.
type config struct {
	Config
	workloads []workload
	// keepHoles leaves the image's holes before page-batch and
	// fsync-small workloads (no warmFree), for the tests that show what
	// they cost.
	keepHoles bool
	// fresh gives every workload new host files (freshHost, fresh.go).
	fresh bool
}

// newConfig checks c and fills in its defaults.
func newConfig(c Config) (*config, error) {
	if c.Backend == "" {
		c.Backend = "file"
	}
	if c.Dir == "" {
		c.Dir = os.TempDir()
	}
	if c.BlockSize == 0 {
		c.BlockSize = DefaultBlockSize
	}
	if c.Repeat == 0 {
		c.Repeat = 1
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	ws, err := selectWorkloads(c.Workloads)
	if err != nil {
		return nil, err
	}
	return &config{Config: c, workloads: ws}, nil
}

// Validate reports the first field of c that Run would refuse. Zero
// fields with a default are valid.
func (c Config) Validate() error {
	if c.Backend != "" && !slices.Contains(Backends, c.Backend) {
		return fmt.Errorf("unknown backend %q", c.Backend)
	}
	if c.Backend == "memory" && c.Image != "" {
		return errors.New("an image makes no sense with the memory backend")
	}
	if c.Backend == "nbd" && !nbd.IsURI(c.Image) {
		return fmt.Errorf("the nbd backend needs an NBD URI as its image (nbd://HOST/EXPORT or nbd+unix:///EXPORT?socket=PATH), not %q", c.Image)
	}
	if c.Runtime <= 0 || c.Repeat < 0 || c.Goroutines < 0 || c.Size < 0 || c.BlockSize < 0 || c.ZeroOutChunk < 0 {
		return errors.New("the runtime must be positive, and the repeat count, goroutines, sizes and zero-out chunk non-negative")
	}
	_, err := selectWorkloads(c.Workloads)
	return err
}

// Run runs the workloads c selects and returns the report. A workload
// that fails is reported in its row (Report.Err names them) and the run
// goes on; the error is for a run that could not start or was cancelled
// through ctx.
func Run(ctx context.Context, c Config) (*Report, error) {
	cfg, err := newConfig(c)
	if err != nil {
		return nil, err
	}
	return runBench(ctx, cfg)
}

// Err returns an error naming the failed workloads, nil if none.
func (rep *Report) Err() error {
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
	path      string // "" for memory and nbd
	temporary bool   // path is ours: removed by close
	desc      string
}

// replace makes b hold nb's device and file, and returns a backing
// holding b's previous ones, for the caller to close.
func (b *backing) replace(nb *backing) *backing {
	old := *b
	*b = *nb
	return &old
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
func chooseSize(c *config) (int64, error) {
	if c.Size > 0 {
		return c.Size, nil
	}
	if c.Backend == "memory" {
		return defaultMemoryImage, nil
	}
	free, err := freeBytes(c.Dir)
	if err != nil {
		return 0, fmt.Errorf("statfs %s: %w", c.Dir, err)
	}
	size := min(int64(defaultImageSize), free/3) &^ (64<<20 - 1)
	if c.fresh {
		// Two images at once, and the Linux columns' backing files, in
		// RAM: the peak stays within three quarters of what tmpfs and
		// the host's memory have available (fresh.go).
		limit := min(free, memAvailable()) / 4 * 3
		for size >= minImageSize && freshPeak(c, size) > limit {
			size -= 64 << 20
		}
		if size < minImageSize {
			return 0, fmt.Errorf("only %d MiB free in %s (tmpfs, %d MiB of memory available): a new image file per workload needs room for two at once and the Linux backing files (use --dir or --size)",
				free>>20, c.Dir, memAvailable()>>20)
		}
		return size, nil
	}
	if size < minImageSize {
		return 0, fmt.Errorf("only %d MiB free in %s: the bench needs at least %d MiB (use --dir or --size)", free>>20, c.Dir, 3*minImageSize>>20)
	}
	return size, nil
}

func openBacking(c *config) (*backing, error) {
	if c.Backend == "memory" {
		size, err := chooseSize(c)
		if err != nil {
			return nil, err
		}
		return &backing{dev: memdev.New(size), desc: fmt.Sprintf("memdev, %d MiB", size>>20)}, nil
	}
	if c.Backend == "nbd" {
		// Both windows go through the same connections: engine and raw
		// pay the same round trips.
		d, err := nbd.Open(c.Image, nbd.Options{})
		if err != nil {
			return nil, err
		}
		conns := fmt.Sprintf("%d connections", d.Conns())
		if d.Conns() == 1 {
			conns = "1 connection"
		}
		return &backing{dev: d, desc: fmt.Sprintf("NBD export %s (%d MiB, %s)", c.Image, d.Size()>>20, conns)}, nil
	}
	b := &backing{path: c.Image}
	if b.path == "" {
		size, err := chooseSize(c)
		if err != nil {
			return nil, err
		}
		return tempBacking(c, size)
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
	if b.dev, err = openImage(c.Backend, b.path); err != nil {
		return nil, err
	}
	b.desc = fmt.Sprintf("image file %s (%d MiB, %s backend)", b.path, b.dev.Size()>>20, c.Backend)
	return b, nil
}

// tempBacking creates a temporary image file of size bytes in c.Dir
// (sparse) and opens it with c's backend.
func tempBacking(c *config, size int64) (*backing, error) {
	f, err := os.CreateTemp(c.Dir, "ext4io-bench-*.img")
	if err != nil {
		return nil, err
	}
	b := &backing{path: f.Name(), temporary: true}
	f.Close()
	d, err := blockdev.CreateFile(b.path, size)
	if err != nil {
		os.Remove(b.path)
		return nil, err
	}
	d.Close()
	if b.dev, err = openImage(c.Backend, b.path); err != nil {
		os.Remove(b.path)
		return nil, err
	}
	b.desc = fmt.Sprintf("temporary image file %s (%d MiB, %s backend)", b.path, b.dev.Size()>>20, c.Backend)
	if c.fresh {
		b.desc = fmt.Sprintf("temporary image files in %s, a new one per workload (tmpfs: fresh host pages) (%d MiB, %s backend)", c.Dir, b.dev.Size()>>20, c.Backend)
	}
	return b, nil
}

// openImage opens the image file at path with the file-based backend.
func openImage(backend, path string) (blockdev.Device, error) {
	switch backend {
	case "direct":
		return blockdev.OpenDirect(path, false)
	case "mmap":
		return openMmap(path)
	}
	return blockdev.OpenFile(path, false)
}

// regionFor returns the raw region size (also each workload's file size)
// for a device of size bytes: a quarter, at most 1 GiB, in whole MiB.
func regionFor(size int64) int64 {
	return min(size/4, 1<<30) &^ (1<<20 - 1)
}

func runBench(ctx context.Context, c *config) (*Report, error) {
	c.fresh = freshHost(c)
	b, err := openBacking(c)
	if err != nil {
		return nil, err
	}
	defer b.close() // the current image: fresh images replace b's contents
	size := b.dev.Size()
	if c.Size > 0 && c.Size < size {
		size = c.Size
	}
	region := regionFor(size)
	if region < 16<<20 {
		return nil, fmt.Errorf("device of %d bytes is too small for the bench: need at least %d MiB", size, minImageSize>>20)
	}
	plan, err := planSpace(size, region, c.BlockSize)
	if err != nil {
		return nil, err
	}
	// A name is reused only once its last holder is done: at most
	// jobs-1 other files are in flight.
	plan.SmallFiles = max(plan.SmallFiles, 2*int64(c.Goroutines))
	if err := plan.check(c.workloads); err != nil {
		return nil, err
	}
	if c.Log != nil {
		// At the start, before minutes of workloads.
		fmt.Fprintln(c.Log, plan.summary(c.workloads))
		if c.fresh {
			fmt.Fprintln(c.Log, freshSummary(c, size))
		}
	}
	r := newBenchRun(c, b.dev, size, region, plan)
	r.back = b
	defer r.closeEngine()
	defer r.retireImage()
	desc := b.desc
	if b.path != "" {
		if st, err := os.Stat(b.path); err == nil && st.Mode().IsRegular() {
			r.image.path = b.path
		}
		if r.disk = openHostDisk(b.path); r.disk != nil {
			desc += "; host disk " + r.disk.name
		} else {
			desc += "; no host block device"
		}
	}
	rep := newReport(c, desc, size, region)
	rep.Config.Space = plan.summary(c.workloads)
	rep.Kernel = KernelInfo{Skipped: "not requested (--kernel)"}
	var kenv, kenvFC *kernelEnv // Linux at its defaults, and with fast_commit
	defer func() {
		if kenv != nil {
			kenv.teardown()
		}
		if kenvFC != nil {
			kenvFC.teardown()
		}
	}()
	n := len(c.workloads)
	samples := make([][]roundSample, n) // per workload, one per round
	for round := range c.Repeat {
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
		if !c.Kernel {
			continue
		}
		if round == 0 {
			kenv, rep.Kernel = startKernel(ctx, kernelDir(c, b), region, false)
			if c.fresh && rep.Kernel.Ran {
				rep.Kernel.Notes = append(rep.Kernel.Notes, freshKernelNote)
			}
			if c.FastCommit {
				rep.Kernel.Notes = append(rep.Kernel.Notes, "linux-default: mkfs.ext4's default features, no fast_commit")
				info := KernelInfo{Skipped: "no workload selected whose Linux path fast_commit changes (" + strings.Join(fastCommitWorkloads(), ", ") + ")"}
				if slices.ContainsFunc(c.workloads, fastCommitMatters) {
					kenvFC, info = startKernel(ctx, kernelDir(c, b), region, true)
					if c.fresh && info.Ran {
						info.Notes = append(info.Notes, freshKernelNote)
					}
					info.Notes = append(info.Notes, "linux-fc: mkfs.ext4 -O fast_commit, run for "+strings.Join(fastCommitWorkloads(), ", ")+
						" only (the other jobs do not fsync per operation: fast_commit does not change their path), "+
						"interleaved with linux-default, which goes first in odd rounds and second in even ones")
				}
				rep.KernelFC = &info
			}
		}
		if kenv == nil && kenvFC == nil {
			continue
		}
		for pos, i := range order {
			s := &samples[i][round]
			w := c.workloads[i]
			if w.Op == opPageBatch {
				// WriteAtomic and its emulations have no fio job.
				s.res.KernelNote = "no Linux run: ext4io's own API, measured against its emulations"
				continue
			}
			// Each of the two Linux runs of a workload goes first in
			// every other round.
			sides := []bool{false, true}
			if round%2 == 1 {
				sides = []bool{true, false}
			}
			for _, fc := range sides {
				env, label := kenv, "linux"
				if fc {
					if !fastCommitMatters(w) {
						continue
					}
					env, label = kenvFC, "linux-fc"
				}
				if env == nil {
					continue
				}
				r.prog.workload = fmt.Sprintf("[%s %s%d/%d] %s", label, roundTag(c, round), pos+1, n, s.res.Name)
				r.prog.set("fio", "", time.Now(), 0)
				var m *Measure
				var note string
				t0 := time.Now()
				nenv, err := freshKernel(ctx, c, env)
				if err == nil {
					if fc {
						kenvFC = nenv
					} else {
						kenv = nenv
					}
					swap := time.Since(t0)
					if m, note, err = nenv.run(ctx, c, w, s.res.Jobs); m != nil {
						m.PrepSecond += swap.Seconds()
					}
				}
				if err != nil {
					note, m = "failed: "+oneLine(err), nil
				}
				if fc {
					s.res.KernelFC, s.res.KernelFCNote = m, note
				} else {
					s.res.Kernel, s.res.KernelNote = m, note
				}
			}
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
func newBenchRun(c *config, dev blockdev.Device, size, region int64, plan *spacePlan) *benchRun {
	r := &benchRun{cfg: c, size: size, region: region, plan: plan, prog: newProgress(c.Progress)}
	r.setDevice(dev)
	return r
}

// setDevice makes the bench's windows views of dev.
func (r *benchRun) setDevice(dev blockdev.Device) {
	r.fsWin, r.fsDev = newWindow(dev, 0, r.size-r.region)
	r.rawWin, r.rawDev = newWindow(dev, r.size-r.region, r.region)
	r.rawFileWin, r.rawFileDev = newWindow(dev, 0, r.size-r.region)
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

// roundTag is the progress line's round prefix ("r2/3 "), empty for a
// single round.
func roundTag(c *config, round int) string {
	if c.Repeat == 1 {
		return ""
	}
	return fmt.Sprintf("r%d/%d ", round+1, c.Repeat)
}

// fastCommitMatters reports whether fast_commit changes Linux's path for
// w: fast commits replace the jbd2 commits that fsync, fdatasync and
// O_SYNC writes wait for, and of the fio jobs only fsync-small waits for
// one per operation. The others commit on the journal's timer (every 5
// s) either way, or fsync once at the end (buffered-4k, whose time is the
// write-back of the data before it).
func fastCommitMatters(w workload) bool { return w.Op == opSmallFsync }

// fastCommitWorkloads names the workloads fastCommitMatters selects.
func fastCommitWorkloads() []string {
	var names []string
	for _, w := range allWorkloads {
		if fastCommitMatters(w) {
			names = append(names, w.Name)
		}
	}
	return names
}

// kernelDir is where Config.Kernel puts its backing file: beside the
// bench's image, in /dev/shm for the memory backend.
func kernelDir(c *config, b *backing) string {
	switch {
	case c.Backend == "memory":
		return "/dev/shm"
	case b.path != "" && !b.temporary:
		return filepath.Dir(b.path)
	}
	return c.Dir
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
