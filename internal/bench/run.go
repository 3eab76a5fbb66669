package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/internal/benchstat"
)

// prepKind is the state a workload's file (and the raw region) starts in.
type prepKind int

const (
	prepFresh       prepKind = iota // new empty file; raw region discarded (written for warmsDevice)
	prepWritten                     // file fully written; raw region written
	prepFallocated                  // FallocAllocate: unwritten extents; raw region written (rawPrepFor)
	prepWriteZeroes                 // FallocWriteZeroes: written zeroes; raw region ZeroOut
)

var prepNames = [...]string{"fresh file", "fully written file", "fallocated (unwritten) file", "write-zeroes file"}

// opKind is what each operation does.
type opKind int

const (
	opRandWrite  opKind = iota // IOSize at a uniform aligned offset in the region
	opRandRead                 // same, reading
	opSeqWrite                 // IOSize sequential; a new file when the region is full
	opSmallFsync               // create a file, write IOSize, Sync (raw: write + flush)
	opSeqRead                  // IOSize sequential reads, from the start again at the region's end
)

// workload is one of the bench's jobs.
type workload struct {
	Name   string
	Title  string
	Jobs   int // goroutines (--goroutines overrides for random and fsync ops)
	IOSize int
	Prep   prepKind
	Op     opKind
	Direct bool // open the file with ext4io.O_DIRECT
	Sync   bool // a final Sync, timed (buffered writes)
}

// allWorkloads in run order; neighbours sharing prepWritten reuse the
// prepared file.
var allWorkloads = []workload{
	{Name: "overwrite-16", Title: "4k random direct overwrite", Jobs: 16, IOSize: 4096, Prep: prepWritten, Op: opRandWrite, Direct: true},
	{Name: "overwrite-2", Title: "4k random direct overwrite", Jobs: 2, IOSize: 4096, Prep: prepWritten, Op: opRandWrite, Direct: true},
	{Name: "randread-16", Title: "4k random direct read", Jobs: 16, IOSize: 4096, Prep: prepWritten, Op: opRandRead, Direct: true},
	{Name: "randread-2", Title: "4k random direct read", Jobs: 2, IOSize: 4096, Prep: prepWritten, Op: opRandRead, Direct: true},
	{Name: "fallocated-16", Title: "4k random direct write into fallocated", Jobs: 16, IOSize: 4096, Prep: prepFallocated, Op: opRandWrite, Direct: true},
	{Name: "fallocated-2", Title: "4k random direct write into fallocated", Jobs: 2, IOSize: 4096, Prep: prepFallocated, Op: opRandWrite, Direct: true},
	{Name: "writezeroes-16", Title: "4k random direct write after write-zeroes", Jobs: 16, IOSize: 4096, Prep: prepWriteZeroes, Op: opRandWrite, Direct: true},
	{Name: "writezeroes-2", Title: "4k random direct write after write-zeroes", Jobs: 2, IOSize: 4096, Prep: prepWriteZeroes, Op: opRandWrite, Direct: true},
	{Name: "seqwrite-1m", Title: "1 MiB sequential direct write, new file", Jobs: 1, IOSize: 1 << 20, Prep: prepFresh, Op: opSeqWrite, Direct: true},
	{Name: "buffered-4k", Title: "4k buffered sequential write + final sync", Jobs: 1, IOSize: 4096, Prep: prepFresh, Op: opSeqWrite, Sync: true},
	{Name: "seqread-4k", Title: "4k buffered sequential read", Jobs: 1, IOSize: 4096, Prep: prepWritten, Op: opSeqRead},
	{Name: "fsync-small", Title: "small files: create, 4k write, fsync", Jobs: 4, IOSize: 4096, Prep: prepFresh, Op: opSmallFsync},
}

// WorkloadNames returns the names of the workloads, in run order.
func WorkloadNames() []string {
	names := make([]string, len(allWorkloads))
	for i, w := range allWorkloads {
		names[i] = w.Name
	}
	return names
}

// selectWorkloads returns the workloads named (blank names ignored) in
// run order; nil names all of them.
func selectWorkloads(names []string) ([]workload, error) {
	if names == nil {
		return append([]workload(nil), allWorkloads...), nil
	}
	want := map[string]bool{}
	for _, n := range names {
		if n = strings.TrimSpace(n); n != "" {
			want[n] = true
		}
	}
	var out []workload
	for _, w := range allWorkloads {
		if want[w.Name] {
			out = append(out, w)
			delete(want, w.Name)
		}
	}
	if len(want) > 0 {
		var bad []string
		for n := range want {
			bad = append(bad, n)
		}
		sort.Strings(bad)
		return nil, fmt.Errorf("unknown workload %s (have %s)", strings.Join(bad, ","), strings.Join(WorkloadNames(), ","))
	}
	if len(out) == 0 {
		return nil, errors.New("empty workload list")
	}
	return out, nil
}

// jobs returns the goroutines w runs with. Sequential workloads always
// use one: a single stream is what they measure.
func (c *config) jobs(w workload) int {
	if c.Goroutines > 0 && w.Op != opSeqWrite && w.Op != opSeqRead {
		return c.Goroutines
	}
	return w.Jobs
}

// side is what a phase does I/O through: the engine's file or the raw
// region. Both see the same offsets.
type side interface {
	io.ReaderAt
	io.WriterAt
	// Sync makes written data durable (File.Sync, Device.Flush).
	Sync() error
	// Reset starts over on a new, empty file (sequential writes that
	// reached spacePlan.SeqBudget), its old blocks allocatable again.
	// Raw regions just wrap.
	Reset() error
	// SmallFile creates file n (from 1), writes p into it and syncs it.
	// Beyond spacePlan.SmallFiles files it reuses the name (and place) of
	// file n-SmallFiles, deleting that file first.
	SmallFile(n int64, p []byte) error
}

// rawSide is raw I/O on a device window: at the same offsets in the raw
// window, or, with ext set, at the device addresses the engine's file
// maps those offsets to (the default; not Config.RawAtRegion).
type rawSide struct {
	dev    blockdev.Device
	region int64
	files  int64       // spacePlan.SmallFiles
	ext    []rawExtent // sorted by off, covering [0, region); nil: identity
}

// rawExtent maps the file bytes [off, off+n) to the device bytes at dev.
type rawExtent struct{ off, dev, n int64 }

// at returns the device address of file offset off and how many bytes
// from there are contiguous on the device (r.ext is set).
func (r rawSide) at(off int64) (int64, int64) {
	lo, hi := 0, len(r.ext)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if r.ext[m].off+r.ext[m].n <= off {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(r.ext) || off < r.ext[lo].off {
		return -1, 0
	}
	e := r.ext[lo]
	return e.dev + off - e.off, e.off + e.n - off
}

// io runs op on the device pieces of [off, off+len(p)).
func (r rawSide) io(op func([]byte, int64) (int, error), p []byte, off int64) (int, error) {
	done := 0
	for done < len(p) {
		d, n := r.at(off + int64(done))
		if n <= 0 {
			return done, fmt.Errorf("raw: offset %d outside the file's extents: %w", off+int64(done), blockdev.ErrInvalid)
		}
		k, err := op(p[done:done+int(min(n, int64(len(p)-done)))], d)
		done += k
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

func (r rawSide) ReadAt(p []byte, off int64) (int, error) {
	if r.ext == nil {
		return r.dev.ReadAt(p, off)
	}
	return r.io(r.dev.ReadAt, p, off)
}

func (r rawSide) WriteAt(p []byte, off int64) (int, error) {
	if r.ext == nil {
		return r.dev.WriteAt(p, off)
	}
	return r.io(r.dev.WriteAt, p, off)
}

func (r rawSide) Sync() error { return r.dev.Flush() }

// Reset flushes the device: raw starts over as the engine's side does,
// whose Reset commits the truncate, and a commit flushes the device. In an
// image file that flush writes back the pass the side has just written,
// so each side pays the host's write-back of its own passes, at the same
// points (docs/bench.md).
func (r rawSide) Reset() error { return r.dev.Flush() }
func (r rawSide) SmallFile(n int64, p []byte) error {
	slot := (n - 1) % min(r.files, r.region/int64(len(p)))
	if _, err := r.dev.WriteAt(p, slot*int64(len(p))); err != nil {
		return err
	}
	return r.dev.Flush()
}

// rawExtents maps f's bytes [0, size) to device bytes, merging runs
// contiguous on the device. It fails unless every block is mapped.
func rawExtents(f *ext4io.File, bs, size int64) ([]rawExtent, error) {
	exts, err := f.Extents()
	if err != nil {
		return nil, err
	}
	var out []rawExtent
	next := int64(0)
	for _, e := range exts {
		off, dev, n := int64(e.Logical)*bs, int64(e.Physical)*bs, int64(e.Length)*bs
		if off != next {
			break
		}
		next = off + n
		if k := len(out) - 1; k >= 0 && out[k].dev+out[k].n == dev {
			out[k].n += n
			continue
		}
		out = append(out, rawExtent{off: off, dev: dev, n: n})
	}
	if next < size {
		return nil, fmt.Errorf("raw at the file's blocks: %s maps only [0, %d) of [0, %d) contiguously from 0", benchFile, next, size)
	}
	return out, nil
}

type engineSide struct {
	v     *ext4io.Volume
	f     *ext4io.File // the workload's file (nil for fsync-small)
	files int64        // spacePlan.SmallFiles
}

func (e engineSide) ReadAt(p []byte, off int64) (int, error)  { return e.f.ReadAt(p, off) }
func (e engineSide) WriteAt(p []byte, off int64) (int, error) { return e.f.WriteAt(p, off) }
func (e engineSide) Sync() error                              { return e.f.Sync() }

// Reset truncates the file and commits: blocks freed by a transaction
// are allocatable only once it has committed, and the delayed write-back
// of a fast buffered writer could otherwise want them first (ENOSPC). It
// is the volume's Sync, a full commit: with fast commits the file's Sync
// would log the truncate as a fast commit, which leaves the freed blocks
// busy until the next full commit, and the next pass would allocate past
// them.
func (e engineSide) Reset() error {
	if err := e.f.Truncate(0); err != nil {
		return err
	}
	return e.v.Sync()
}

func (e engineSide) SmallFile(n int64, p []byte) error {
	name := fmt.Sprintf("/small-%d", (n-1)%e.files)
	if n > e.files {
		if err := e.v.Unlink(name); err != nil {
			return err
		}
	}
	f, err := e.v.Create(name)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(p, 0); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// benchRun is the state of a bench across workloads. It is used by one
// goroutine (phases start their own workers).
type benchRun struct {
	cfg           *config
	fsWin, rawWin *window
	fsDev, rawDev blockdev.Device
	rawFileWin    *window         // the filesystem's bytes, for raw at the file's blocks
	rawFileDev    blockdev.Device // (--raw-at file)
	size, region  int64           // the device's bytes the bench uses; the raw window's
	// back is the bench's backing; with config.fresh each workload
	// replaces its image file (fresh.go), and retired holds the previous
	// one until the new one is prepared.
	back      *backing
	retired   *backing
	imageUsed bool // back's image has served a workload
	prog      *progress
	v         *ext4io.Volume
	vPrep     prepKind // what the volume's /bench.dat holds
	// warmExt maps the bytes of the file warmFile wrote for the direct
	// sequential writer to their device bytes: the blocks the writer's
	// passes take again, where raw writes too (rawAtWarm); nil otherwise.
	warmExt      []rawExtent
	rawPrep      prepKind
	rawPrepValid bool
	disk         *hostDisk  // the host block device under the image; nil if none
	image        imageState // the image file, when it can have holes (holes.go)
	plan         *spacePlan // budgets every workload keeps to
	// atomicSplits counts the atomic batches split in two because one
	// journal transaction could not take them (pageBatch; reported and
	// reset by pageBatchDone).
	atomicSplits atomic.Int64
}

const benchFile = "/bench.dat"

// abandon drops the volume after a failed workload (its close error is
// moot: the next workload formats afresh) and forgets the raw region's
// state.
func (r *benchRun) abandon() {
	r.prog.clear()
	if r.v != nil {
		r.v.Close()
		r.v = nil
	}
	r.vPrep = prepFresh
	r.rawPrepValid = false
}

func (r *benchRun) closeEngine() error {
	if r.v == nil {
		return nil
	}
	err := r.v.Close()
	r.v = nil
	return err
}

// prepareEngine formats a fresh filesystem and prepares /bench.dat for w,
// unless the current one already holds a fully written file and w wants
// one. It returns the side to measure.
func (r *benchRun) prepareEngine(w workload) (engineSide, error) {
	// A page-batch workload that fills the image's holes formats afresh
	// even after a workload that left a written file: the fill runs
	// before a format, never under a mounted volume (holes.go).
	if r.v == nil || w.Prep != prepWritten || r.vPrep != prepWritten || r.warms(w) {
		if err := r.closeEngine(); err != nil {
			return engineSide{}, err
		}
		r.warmExt = nil
		if r.warms(w) {
			n, err := r.warmFree() // holes.go
			if err != nil {
				return engineSide{}, err
			}
			if n > 0 && r.cfg.Log != nil {
				fmt.Fprintf(r.cfg.Log, "%s: wrote %d MiB into the holes of the image's filesystem window first\n", w.Name, n>>20)
			}
		}
		if err := ext4io.Format(r.formatDev(w), ext4io.FormatOptions{BlockSize: r.cfg.BlockSize, NoDiscard: true, FastCommit: r.cfg.FastCommit}); err != nil {
			return engineSide{}, fmt.Errorf("format: %w", err)
		}
		v, err := ext4io.Open(r.fsDev, ext4io.Options{Writable: true, Tuning: ext4io.Tuning{DeferSplits: r.cfg.DeferSplits, ZeroOutChunk: r.cfg.ZeroOutChunk, EagerConversions: r.cfg.EagerConversions, AtomicJournalMax: r.cfg.AtomicJournalMax}})
		if err != nil {
			return engineSide{}, err
		}
		r.v = v
		f, err := v.Create(benchFile)
		if err != nil {
			return engineSide{}, err
		}
		switch w.Prep {
		case prepWritten:
			err = fillSeq(f, r.region)
		case prepFallocated:
			if err = f.Fallocate(ext4io.FallocAllocate, 0, r.region); err == nil {
				err = fillPreallocated(f, r.fsDev, int64(v.BlockSize()))
			}
		case prepWriteZeroes:
			err = f.Fallocate(ext4io.FallocWriteZeroes, 0, r.region)
		case prepFresh:
			if warmsDevice(w) {
				var ext []rawExtent
				ext, err = warmFile(v, r.plan.SeqBudget)
				if rawAtWarm(w) {
					r.warmExt = ext
				}
			}
		}
		if err == nil {
			err = v.Sync() // a full commit: the warmed file's truncate frees its blocks (Reset)
		}
		f.Close()
		if err != nil {
			return engineSide{}, fmt.Errorf("preparing %s: %w", prepNames[w.Prep], err)
		}
		r.vPrep = w.Prep
	}
	flags := os.O_RDWR
	if w.Direct {
		flags |= ext4io.O_DIRECT
	}
	f, err := r.v.OpenFile(benchFile, flags, 0)
	if err != nil {
		return engineSide{}, err
	}
	return engineSide{v: r.v, f: f, files: r.plan.SmallFiles}, nil
}

// fillSeq writes n bytes of a non-zero pattern with 1 MiB writes.
func fillSeq(w io.WriterAt, n int64) error {
	buf := pattern(1<<20, 0x5a)
	for off := int64(0); off < n; off += int64(len(buf)) {
		if _, err := w.WriteAt(buf[:min(int64(len(buf)), n-off)], off); err != nil {
			return err
		}
	}
	return nil
}

// fillPreallocated writes fillSeq's pattern to the device blocks under
// f's unwritten extents, which stay unwritten: the blocks then hold stale
// data, as reused blocks of a disk do, and the device holds them as it
// holds raw's region, which is written. Otherwise a RAM-backed image (a
// sparse file in /dev/shm) faults in each block on the engine's first
// write into it while raw's region is resident (docs/bench.md has the
// figures).
func fillPreallocated(f *ext4io.File, dev io.WriterAt, bs int64) error {
	exts, err := f.Extents()
	if err != nil {
		return err
	}
	buf := pattern(1<<20, 0x5a)
	for _, e := range exts {
		if !e.Unwritten {
			continue
		}
		for off, end := int64(e.Physical)*bs, int64(e.Physical+e.Length)*bs; off < end; off += int64(len(buf)) {
			if _, err := dev.WriteAt(buf[:min(int64(len(buf)), end-off)], off); err != nil {
				return err
			}
		}
	}
	return nil
}

// warmsDevice reports whether w's device blocks are written once before
// its phases, on both sides: sequential writers of a new file. They
// measure writes to a device whose blocks exist, as a disk's do; in a
// sparse image file the first write into a hole pays the host's
// allocation (in tmpfs, 3-4 times the copy), and the engine's blocks and
// raw's region would pay it or not depending on what earlier workloads
// and passes wrote (docs/bench.md).
func warmsDevice(w workload) bool { return w.Prep == prepFresh && w.Op == opSeqWrite }

// rawAtWarm reports whether raw writes w's warmed blocks (rawAtFile): the
// direct sequential writer of a new file, whose writes allocate as they
// come and so take the warmed file's blocks again in the same order. A
// buffered writer's blocks are allocated at write-back, whose timing
// decides where each run goes, so raw keeps its own region there.
func rawAtWarm(w workload) bool { return warmsDevice(w) && w.Direct }

// warmFile writes n bytes of benchFile with 1 MiB direct writes and
// truncates it to 0: its blocks, freed, are where the workload's writes
// will go, the file's allocation starting again from its inode's goal.
// The caller's Sync commits the truncate, which makes them allocatable.
// It returns the device extents the file had, for raw (rawAtFile).
func warmFile(v *ext4io.Volume, n int64) ([]rawExtent, error) {
	f, err := v.OpenFile(benchFile, os.O_RDWR|ext4io.O_DIRECT, 0)
	if err != nil {
		return nil, err
	}
	err = fillSeq(f, n)
	var ext []rawExtent
	if err == nil {
		ext, err = rawExtents(f, int64(v.BlockSize()), n)
	}
	if err == nil {
		err = f.Truncate(0)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return ext, err
}

// checkWarmBlocks returns an error unless every block f maps is where the
// warmed file (ext) had the same offset: raw writes the warmed file's
// blocks between the engine's phases, which is safe while the engine's
// file holds them (its data) and they are otherwise free, so a writer that
// allocated elsewhere stops the workload instead of raw writing over what
// the filesystem may have put there.
func checkWarmBlocks(f *ext4io.File, bs int64, ext []rawExtent) error {
	exts, err := f.Extents()
	if err != nil {
		return err
	}
	r := rawSide{ext: ext}
	for _, e := range exts {
		off, dev, n := int64(e.Logical)*bs, int64(e.Physical)*bs, int64(e.Length)*bs
		for done := int64(0); done < n; {
			d, k := r.at(off + done)
			if k <= 0 || d != dev+done {
				return fmt.Errorf("raw at the warmed blocks: %s maps offset %d to device byte %d, not where the warmed file had it: %w",
					benchFile, off+done, dev+done, blockdev.ErrInvalid)
			}
			done += k
		}
	}
	return nil
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// prepareRaw returns the raw side for w and the window that counts its
// device operations: the engine file's blocks (prepared by prepareEngine,
// which runs first) when rawAtFile(w), else the raw window, prepared as
// rawPrepFor says.
func (r *benchRun) prepareRaw(w workload, eng engineSide) (rawSide, *window, error) {
	if r.rawAtFile(w) {
		ext := r.warmExt
		if !rawAtWarm(w) {
			var err error
			if ext, err = rawExtents(eng.f, int64(r.v.BlockSize()), r.region); err != nil {
				return rawSide{}, nil, err
			}
		}
		return rawSide{dev: r.rawFileDev, region: r.region, files: r.plan.SmallFiles, ext: ext}, r.rawFileWin, nil
	}
	s := rawSide{dev: r.rawDev, region: r.region, files: r.plan.SmallFiles}
	prep := rawPrepFor(w.Prep)
	if warmsDevice(w) || (w.Op == opSmallFsync && r.warms(w)) {
		// Over written blocks, as the engine's side writes after
		// warmFree (holes.go).
		prep = prepWritten
	}
	if r.rawPrepValid && prep == prepWritten && r.rawPrep == prepWritten {
		return s, r.rawWin, nil
	}
	var err error
	switch prep {
	case prepWritten:
		err = fillSeq(r.rawDev, r.region)
	case prepFresh:
		err = r.rawDev.Discard(0, r.region)
	case prepWriteZeroes:
		err = r.rawDev.ZeroOut(0, r.region)
	}
	if err == nil {
		err = r.rawDev.Flush()
	}
	if err != nil {
		return s, nil, fmt.Errorf("preparing raw region: %w", err)
	}
	r.rawPrep, r.rawPrepValid = prep, true
	return s, r.rawWin, nil
}

// rawAtFile reports whether raw does w's I/O at the engine file's blocks:
// unless Config.RawAtRegion, for every workload on a prepared file, and
// for the direct sequential writer of a new file at the blocks of the
// file warmFile wrote, which its passes take again (rawAtWarm,
// checkWarmBlocks). Other fresh files have no blocks before the run. On
// the same blocks both sides write into the same host pages or extents
// of an image file, whose layout earlier workloads leave behind
// (docs/bench.md).
func (r *benchRun) rawAtFile(w workload) bool {
	if r.cfg.RawAtRegion || w.Op == opPageBatch {
		return false
	}
	return w.Prep != prepFresh || rawAtWarm(w) && r.warmExt != nil
}

// rezero zeroes the device blocks under a write-zeroes file again before
// each phase when raw shares them. In an image file the blocks are then
// unwritten in the host's file system until first written, and the first
// write into each pays the host's conversion: without this, whichever side
// ran first would pay for both. The engine's file reads as zeroes before
// its phases anyway; its data is the bench's, not checked.
func (r *benchRun) rezero(w workload, raw rawSide) error {
	if w.Prep != prepWriteZeroes || raw.ext == nil {
		return nil
	}
	for _, e := range raw.ext {
		if err := raw.dev.ZeroOut(e.dev, e.n); err != nil {
			return fmt.Errorf("zeroing the file's blocks again: %w", err)
		}
	}
	return nil
}

// phaseTotals accumulates one side's phases of a workload.
type phaseTotals struct {
	hist    benchstat.Histogram
	ops     int64
	elapsed time.Duration
	dev     devSnap
	cpu     time.Duration // process CPU time (see Measure.CPUus)
	faults  int64         // process page faults (see Measure.Faults)
	disk    diskSnap      // host disk I/O (see Measure.Disk)
	diskOK  bool          // disk holds every phase's counts
	// imageGrowth is the bytes by which the image file's allocation grew
	// (see Measure.ImageGrowth); imageOK: every phase read it.
	imageGrowth int64
	imageOK     bool
	phases      int
	counters    map[string]float64 // engine only: deltas of uint64 counters, last value of gauges
	gauges      map[string]bool    // the keys of counters that are gauges
	prep        time.Duration
	wraps       int64         // sequential files started over, small-file names reused
	wrapTime    time.Duration // spent in sequential writers' Resets (inside elapsed)
}

// seqState is a side's cursor for sequential workloads, kept across its
// phases.
type seqState struct{ off int64 }

// failWorkloadHook, set by tests, fails the workloads it returns an error
// for, after their preparation.
var failWorkloadHook func(w workload) error

func (r *benchRun) runWorkload(ctx context.Context, w workload) (WorkloadResult, error) {
	jobs := r.cfg.jobs(w)
	var rawT, engT phaseTotals
	t0 := time.Now()
	r.prog.set("engine", "preparing", time.Time{}, 0)
	defer r.retireImage() // after a failed preparation
	if err := r.freshImage(); err != nil {
		return WorkloadResult{}, err
	}
	eng, err := r.prepareEngine(w)
	if err != nil {
		return WorkloadResult{}, err
	}
	defer func() {
		if eng.f != nil {
			eng.f.Close()
		}
	}()
	engT.prep = time.Since(t0)
	t0 = time.Now()
	r.prog.set("raw", "preparing", time.Time{}, 0)
	raw, rawWin, err := r.prepareRaw(w, eng)
	if err != nil {
		return WorkloadResult{}, err
	}
	// Both sides are prepared on the new image: the previous one goes.
	if err := r.retireImage(); err != nil {
		return WorkloadResult{}, err
	}
	rawT.prep = time.Since(t0)
	if failWorkloadHook != nil {
		if err := failWorkloadHook(w); err != nil {
			return WorkloadResult{}, err
		}
	}
	var rawSeq, engSeq seqState
	var rawSmall, engSmall atomic.Int64
	per := r.cfg.Runtime / benchRounds
	// The phases run raw, engine, engine, raw (ABBA): with the same seeds
	// the second side of a round rewrites the blocks the first has just
	// written, and a disk's drift over the workload, if linear, cancels.
	//
	// Flushes between phases: each phase starts with the device flushed,
	// untimed (the time goes to the side's prep). In an image file the
	// host's page cache holds what the previous phase wrote, dirty, and a
	// flush inside a phase (a sequential writer's Reset, an fsync, a page
	// batch, the engine's journal commits) writes back everything the image
	// holds dirty. Flushed first, a side's flushes write back its own
	// writes only, not the pass the other side wrote in the phase before
	// (seqwrite-1m's engine commits at each Reset), and the host's
	// background write-back of one side's writes does not run into the
	// other's phase (docs/bench.md).
	for round := 0; round < benchRounds; round++ {
		label := fmt.Sprintf("round %d/%d", round+1, benchRounds)
		rawFirst := round%2 == 0
		for i := range 2 {
			if err := r.rezero(w, raw); err != nil {
				return WorkloadResult{}, err
			}
			t0 := time.Now()
			if err := r.fsDev.Flush(); err != nil { // settle: see flushes between phases, above
				return WorkloadResult{}, fmt.Errorf("flushing the device between phases: %w", err)
			}
			if (i == 0) == rawFirst {
				if rawAtWarm(w) && raw.ext != nil {
					if err := checkWarmBlocks(eng.f, int64(r.v.BlockSize()), raw.ext); err != nil {
						return WorkloadResult{}, err
					}
				}
				rawT.prep += time.Since(t0)
				if err := r.phase(ctx, w, jobs, round, raw, rawWin, &rawSeq, &rawSmall, per, &rawT, "raw", label); err != nil {
					return WorkloadResult{}, fmt.Errorf("raw: %w", err)
				}
				continue
			}
			engT.prep += time.Since(t0)
			before := engineCounters(r.v)
			if err := r.phase(ctx, w, jobs, round, eng, r.fsWin, &engSeq, &engSmall, per, &engT, "engine", label); err != nil {
				return WorkloadResult{}, fmt.Errorf("engine: %w", err)
			}
			after := engineCounters(r.v)
			engT.counters = addCounterDelta(engT.counters, before, after)
			engT.gauges = gaugeKeys(after)
		}
	}
	if w.Op == opPageBatch {
		r.pageBatchDone(w, eng) // atomic.go
	}
	if w.Op == opSmallFsync || w.Op == opSeqWrite || w.Op == opPageBatch {
		r.vPrep = prepFresh // the volume's files no longer match any prep
	}
	return makeResult(w, jobs, &engT, &rawT), nil
}

// phase runs w on s with jobs goroutines for d, adding to t.
func (r *benchRun) phase(ctx context.Context, w workload, jobs, round int, s side, win *window,
	seq *seqState, small *atomic.Int64, d time.Duration, t *phaseTotals, name, label string) error {
	var (
		stop    atomic.Bool
		ops     atomic.Int64
		wraps   atomic.Int64
		wrapNs  atomic.Int64 // time in Reset
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
		seqMu   sync.Mutex // serializes Reset against sequential writers
	)
	fail := func(err error) {
		errOnce.Do(func() { first = err })
		stop.Store(true)
	}
	hists := make([]benchstat.Histogram, jobs)
	nblocks := r.region / int64(w.IOSize)
	devBefore := win.c.snap()
	diskBefore, diskOK := r.disk.snap()
	cpuBefore, faultsBefore := processUsage()
	imageBefore, imageOK := r.image.allocated()
	start := time.Now()
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			stop.Store(true)
		case <-done:
		}
	}()
	defer close(done)
	r.prog.set(name, label, start.Add(-t.elapsed), t.ops)
	r.prog.start(&ops)
	for g := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(round)<<32|uint64(g)))
			buf := pattern(w.IOSize, byte(g))
			h := &hists[g]
			// Every job completes one op at least, so a phase whose timer
			// fires before a loaded machine schedules its goroutines still
			// measures something instead of reporting zero ops.
			for n := 0; n == 0 || !stop.Load(); n++ {
				var err error
				t0 := time.Now()
				switch w.Op {
				case opRandWrite:
					_, err = s.WriteAt(buf, rng.Int64N(nblocks)*int64(w.IOSize))
				case opRandRead:
					_, err = s.ReadAt(buf, rng.Int64N(nblocks)*int64(w.IOSize))
				case opSeqWrite:
					seqMu.Lock()
					if seq.off+int64(w.IOSize) > r.plan.SeqBudget {
						err = s.Reset()
						now := time.Now()
						wrapNs.Add(int64(now.Sub(t0)))
						if err != nil {
							seqMu.Unlock()
							break
						}
						seq.off = 0
						wraps.Add(1)
						t0 = now // the reset is in the elapsed time, not in a latency
					}
					off := seq.off
					seq.off += int64(w.IOSize)
					seqMu.Unlock()
					_, err = s.WriteAt(buf, off)
				case opSeqRead:
					seqMu.Lock()
					if seq.off+int64(w.IOSize) > r.region {
						seq.off = 0
						wraps.Add(1)
					}
					off := seq.off
					seq.off += int64(w.IOSize)
					seqMu.Unlock()
					_, err = s.ReadAt(buf, off)
				case opSmallFsync:
					n := small.Add(1)
					if n > r.plan.SmallFiles {
						wraps.Add(1)
					}
					err = s.SmallFile(n, buf)
				case opPageBatch:
					err = r.pageBatch(s, w, rng, buf) // atomic.go
				}
				if err != nil {
					fail(err)
					return
				}
				h.Record(time.Since(t0))
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	if first == nil && w.Sync {
		if err := s.Sync(); err != nil {
			fail(err)
		}
	}
	elapsed := time.Since(start)
	r.prog.stop()
	if first != nil {
		return first
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for i := range hists {
		t.hist.Merge(&hists[i])
	}
	t.ops += ops.Load()
	t.wraps += wraps.Load()
	t.wrapTime += time.Duration(wrapNs.Load())
	t.elapsed += elapsed
	t.dev = t.dev.add(win.c.snap().sub(devBefore))
	cpuAfter, faultsAfter := processUsage()
	t.cpu += cpuAfter - cpuBefore
	t.faults += faultsAfter - faultsBefore
	diskAfter, ok := r.disk.snap()
	imageAfter, imageOK2 := r.image.allocated()
	if t.phases == 0 {
		t.diskOK, t.imageOK = true, true
	}
	t.phases++
	t.diskOK = t.diskOK && diskOK && ok
	t.imageOK = t.imageOK && imageOK && imageOK2
	t.imageGrowth += imageAfter - imageBefore
	t.disk = t.disk.add(diskAfter.sub(diskBefore))
	return nil
}

// engineCounters snapshots the volume's optional counters: every
// exported method in counterMethods that exists on the volume, takes no
// arguments and returns a struct, flattened to "Method.Field". Fields of
// unsigned type are event counters (reported as deltas over a phase);
// signed ones are gauges (reported as their last value). Counters added
// to the engine later (journal handles, lock modes, page cache) appear in
// the report without changes here, as long as they follow that rule.
func engineCounters(v any) map[string]counterValue {
	out := map[string]counterValue{}
	rv := reflect.ValueOf(v)
	for _, name := range counterMethods {
		m := rv.MethodByName(name)
		if !m.IsValid() || m.Type().NumIn() != 0 || m.Type().NumOut() != 1 {
			continue
		}
		res := m.Call(nil)[0]
		if res.Kind() != reflect.Struct {
			continue
		}
		for i := 0; i < res.NumField(); i++ {
			f, ft := res.Field(i), res.Type().Field(i)
			if !ft.IsExported() {
				continue
			}
			key := name + "." + ft.Name
			switch f.Kind() {
			case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
				out[key] = counterValue{v: float64(f.Uint()), counter: true}
			case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
				out[key] = counterValue{v: float64(f.Int())}
			}
		}
	}
	return out
}

// counterMethods are the Volume methods engineCounters looks for.
var counterMethods = []string{"Counters", "CacheStats", "PageCacheStats", "JournalStats"}

type counterValue struct {
	v       float64
	counter bool
}

func addCounterDelta(acc map[string]float64, before, after map[string]counterValue) map[string]float64 {
	if acc == nil {
		acc = map[string]float64{}
	}
	for k, a := range after {
		if a.counter {
			acc[k] += a.v - before[k].v
		} else {
			acc[k] = a.v
		}
	}
	return acc
}

// gaugeKeys returns the keys of the gauges in a counter snapshot.
func gaugeKeys(snap map[string]counterValue) map[string]bool {
	g := map[string]bool{}
	for k, v := range snap {
		if !v.counter {
			g[k] = true
		}
	}
	return g
}

// rawPrepFor is the raw region's state for a workload whose file starts
// as p. A write into fallocated blocks is, on the device, a write to
// blocks the image already holds: its ceiling is the raw overwrite.
// (Discarding the raw region instead would make raw write into holes of
// the image file, whose allocation by the host filesystem, journal commits
// and flushes would run on into the engine's phases.)
func rawPrepFor(p prepKind) prepKind {
	if p == prepFallocated {
		return prepWritten
	}
	return p
}
