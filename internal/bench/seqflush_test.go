package bench

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// flushLog is a Device that keeps, per side, the bytes written since the
// last flush, as an image file's host keeps them dirty in its page cache.
// The side of a write is the window it came through (tagSides): raw writes
// the engine file's blocks for some workloads, so offsets do not tell.
type flushLog struct {
	blockdev.Device

	mu         sync.Mutex
	fs, raw    int64 // written since the last flush
	maxFS      int64 // the most either side had written unflushed
	maxRaw     int64
	mixed      int // flushes that wrote back both sides' writes
	rawFlushes int // flushes that wrote back raw's writes
	fsFlushes  int
	flushes    int
}

func (d *flushLog) wrote(raw bool, n int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if raw {
		d.raw += n
		d.maxRaw = max(d.maxRaw, d.raw)
		return
	}
	d.fs += n
	d.maxFS = max(d.maxFS, d.fs)
}

// sideTag is a bench window that reports its writes to a side's log
// before passing them on.
type sideTag struct {
	blockdev.Device
	wrote func(off, n int64)
}

func (d sideTag) WriteAt(p []byte, off int64) (int, error) {
	d.wrote(off, int64(len(p)))
	return d.Device.WriteAt(p, off)
}

func (d sideTag) ZeroOut(off, n int64) error {
	d.wrote(off, n)
	return d.Device.ZeroOut(off, n)
}

// tagSides wraps r's windows: the filesystem's (the engine's volume,
// format and preparation) reports to engine, raw's two to raw.
func tagSides(r *benchRun, engine, raw func(off, n int64)) {
	r.fsDev = sideTag{r.fsDev, engine}
	r.rawDev = sideTag{r.rawDev, raw}
	r.rawFileDev = sideTag{r.rawFileDev, raw}
}

func (d *flushLog) Flush() error {
	d.mu.Lock()
	if d.fs > 0 && d.raw > 0 {
		d.mixed++
	}
	if d.fs > 0 {
		d.fsFlushes++
	}
	if d.raw > 0 {
		d.rawFlushes++
	}
	d.flushes++
	d.fs, d.raw = 0, 0
	d.mu.Unlock()
	return d.Device.Flush()
}

// TestBenchSeqWriteFlushesOwnWrites runs seqwrite-1m on a device that
// tracks what each side wrote since the last flush. The engine's side
// commits at each Reset, and a commit flushes the device, which in an
// image file writes back everything the host holds dirty. Both sides must
// be on the same terms: no flush writes back both sides' writes (the
// device is flushed between phases, so the engine's first commit does not
// write back raw's pass of the phase before), and raw, like the engine,
// never has more than one pass (spacePlan.SeqBudget) unflushed (raw's
// Reset flushes).
func TestBenchSeqWriteFlushesOwnWrites(t *testing.T) {
	const size = 128 << 20
	var dev *flushLog
	res, r := runSeqWraps(t, size, 400*time.Millisecond, func(mem blockdev.Device) blockdev.Device {
		dev = &flushLog{Device: mem}
		return dev
	}, func(r *benchRun) {
		tagSides(r, func(_, n int64) { dev.wrote(false, n) }, func(_, n int64) { dev.wrote(true, n) })
	})

	dev.mu.Lock()
	defer dev.mu.Unlock()
	t.Logf("wraps %d/%d; flushes %d: %d of the engine's writes, %d of raw's, %d of both; most unflushed: engine %d MiB, raw %d MiB",
		res.Engine.Wraps, res.Raw.Wraps, dev.flushes, dev.fsFlushes, dev.rawFlushes, dev.mixed, dev.maxFS>>20, dev.maxRaw>>20)
	assert.Zero(t, dev.mixed, "flushes that wrote back both sides' writes")
	budget := r.plan.SeqBudget
	assert.LessOrEqual(t, dev.maxRaw, budget, "raw's unflushed writes: more than one pass")
	// The engine's pass plus its metadata and journal blocks.
	assert.LessOrEqual(t, dev.maxFS, budget+budget/8, "the engine's unflushed writes: more than one pass")
}

// slowFlush is a Device whose flushes take at least delay.
type slowFlush struct {
	blockdev.Device
	delay time.Duration
}

func (d *slowFlush) Flush() error {
	time.Sleep(d.delay)
	return d.Device.Flush()
}

// TestBenchSeqWriteWrapTime checks that seqwrite-1m reports the time each
// side spent starting its file over: the engine's Reset commits and raw's
// flushes, so on a device whose flushes take 20 ms every wrap takes that
// long at least, and the restarts' total is part of the side's elapsed
// time.
func TestBenchSeqWriteWrapTime(t *testing.T) {
	const (
		size  = 128 << 20
		delay = 20 * time.Millisecond
	)
	res, _ := runSeqWraps(t, size, 600*time.Millisecond, func(mem blockdev.Device) blockdev.Device {
		return &slowFlush{Device: mem, delay: delay}
	}, nil)
	t.Logf("wraps %d/%d in %.1f/%.1f ms of %.2f/%.2f s", res.Engine.Wraps, res.Raw.Wraps,
		res.Engine.WrapSeconds*1e3, res.Raw.WrapSeconds*1e3, res.Engine.Seconds, res.Raw.Seconds)
	for _, s := range []struct {
		name string
		m    Measure
	}{{"engine", res.Engine}, {"raw", res.Raw}} {
		assert.GreaterOrEqual(t, s.m.WrapSeconds, float64(s.m.Wraps)*delay.Seconds(), "%s: wrap time below its flushes'", s.name)
		assert.Less(t, s.m.WrapSeconds, s.m.Seconds, "%s: wrap time outside the phases", s.name)
	}
	var b strings.Builder
	(&Report{Workloads: []WorkloadResult{res}}).WriteText(&b)
	assert.Regexp(t, `wraps \d+/\d+ in [0-9.]+/[0-9.]+ ms`, b.String())
}

// runSeqWraps runs seqwrite-1m on a memory device of size bytes, wrapped
// by wrap (called again for each try), with phases doubled from runtime
// until each side has started its file over at least twice: a slow
// machine (-race under load) gets a longer phase, or the bounds the
// callers check say nothing. windows, if set, gets each try's benchRun
// before the workload runs.
func runSeqWraps(t *testing.T, size int64, runtime time.Duration, wrap func(blockdev.Device) blockdev.Device, windows func(*benchRun)) (WorkloadResult, *benchRun) {
	t.Helper()
	ws, err := selectWorkloads([]string{"seqwrite-1m"})
	require.NoError(t, err)
	var r *benchRun
	var res WorkloadResult
	for ; ; runtime *= 2 {
		c := &config{Config: Config{Backend: "memory", Runtime: runtime, BlockSize: 4096, Seed: 1, Repeat: 1}}
		mem := memdev.New(size)
		t.Cleanup(func() { mem.Close() })
		run := newBenchRun(c, wrap(mem), size, regionFor(size), mustPlan(t, size, c.BlockSize))
		t.Cleanup(func() { run.closeEngine() })
		r = run
		if windows != nil {
			windows(r)
		}
		res, err = r.runWorkload(context.Background(), ws[0])
		require.NoError(t, err)
		if res.Engine.Wraps >= 2 && res.Raw.Wraps >= 2 || runtime >= 8*time.Second {
			break
		}
		t.Logf("runtime %v: wraps %d/%d, trying a longer phase", runtime, res.Engine.Wraps, res.Raw.Wraps)
	}
	require.GreaterOrEqual(t, res.Engine.Wraps, int64(2), "engine passes")
	require.GreaterOrEqual(t, res.Raw.Wraps, int64(2), "raw passes")
	return res, r
}

// TestBenchSeqWriteRawAtEngineBlocks checks that raw's side of seqwrite-1m
// writes the device bytes the engine's file takes, the blocks of the file
// the preparation warmed: in an image file both sides then write into the
// same host pages or extents, whose layout the earlier workloads of a run
// leave behind (in /dev/shm, pages a write-zeroes file punched and 4k
// writes refilled in random order cost the kernel's copy and page lookup
// half as much again as pages written in order: docs/performance.md),
// instead of the engine's file in those and raw in a region of its own.
func TestBenchSeqWriteRawAtEngineBlocks(t *testing.T) {
	const size = 128 << 20
	var (
		mu          sync.Mutex
		phase       bool // set once the preparation is done
		engine, raw = map[int64]int64{}, map[int64]int64{}
	)
	record := func(m map[int64]int64) func(off, n int64) {
		return func(off, n int64) {
			mu.Lock()
			defer mu.Unlock()
			if phase {
				m[off] = n
			}
		}
	}
	failWorkloadHook = func(workload) error { // after both sides' preparation
		mu.Lock()
		phase = true
		mu.Unlock()
		return nil
	}
	t.Cleanup(func() { failWorkloadHook = nil })
	res, r := runSeqWraps(t, size, 400*time.Millisecond, func(mem blockdev.Device) blockdev.Device { return mem },
		func(r *benchRun) { tagSides(r, record(engine), record(raw)) })
	mu.Lock()
	defer mu.Unlock()
	// The engine's data writes: those in the warmed file's blocks, not
	// its journal, inode or bitmap blocks.
	data := map[int64]int64{}
	for off, n := range engine {
		for _, e := range r.warmExt {
			if off >= e.dev && off+n <= e.dev+e.n {
				data[off] = n
			}
		}
	}
	t.Logf("wraps %d/%d; the engine wrote at %d offsets, %d in the warmed file's %d extents; raw at %d",
		res.Engine.Wraps, res.Raw.Wraps, len(engine), len(data), len(r.warmExt), len(raw))
	require.NotEmpty(t, data)
	require.NotEmpty(t, raw)
	engine = data
	assert.Equal(t, engine, raw, "device byte -> bytes written by the engine's data writes (expected) and raw's")
}

// TestCheckWarmBlocks checks the guard raw's phases of a sequential writer
// run behind: the engine's file on the warmed blocks passes, one whose
// blocks moved (here, the warmed extents shifted by a block) stops the
// workload with an error instead of raw writing over blocks the
// filesystem may use for something else.
func TestCheckWarmBlocks(t *testing.T) {
	const size = 64 << 20
	mem := memdev.New(size)
	defer mem.Close()
	require.NoError(t, ext4io.Format(mem, ext4io.FormatOptions{BlockSize: 4096, NoDiscard: true}))
	v, err := ext4io.Open(mem, ext4io.Options{Writable: true})
	require.NoError(t, err)
	defer v.Close()
	f, err := v.Create(benchFile)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	ext, err := warmFile(v, 8<<20)
	require.NoError(t, err)
	require.NotEmpty(t, ext)

	f, err = v.OpenFile(benchFile, os.O_RDWR|ext4io.O_DIRECT, 0)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Sync()) // the truncate's blocks allocatable again
	require.NoError(t, checkWarmBlocks(f, 4096, ext), "empty file")
	require.NoError(t, fillSeq(f, 4<<20))
	require.NoError(t, checkWarmBlocks(f, 4096, ext), "half a pass on the warmed blocks")

	moved := append([]rawExtent(nil), ext...)
	for i := range moved {
		moved[i].dev += 4096
	}
	err = checkWarmBlocks(f, 4096, moved)
	require.ErrorIs(t, err, blockdev.ErrInvalid)
	t.Log(err)
}
