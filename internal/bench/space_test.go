package bench

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// mustPlan is the space plan of a device of size bytes.
func mustPlan(t *testing.T, size int64, bs int) *spacePlan {
	t.Helper()
	if bs == 0 {
		bs = 4096
	}
	p, err := planSpace(size, regionFor(size), bs)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestBenchSpacePlanDefault: the default run's plan holds for runtimes of
// 1 s to 60 s at an engine write rate (rate) above what any backend
// reaches, because every workload's peak is bounded by its budget and not
// by runtime × rate. The same for the memory backend's default, the
// smallest device the bench accepts, and --size 8G.
func TestBenchSpacePlanDefault(t *testing.T) {
	const rate = 8e9 // bytes per second
	for _, size := range []int64{defaultImageSize, defaultMemoryImage, minImageSize, 8 << 30} {
		t.Run(fmt.Sprintf("%dMiB", size>>20), func(t *testing.T) {
			region := regionFor(size)
			p, err := planSpace(size, region, 4096)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.check(allWorkloads); err != nil {
				t.Fatal(err)
			}
			t.Log(p.summary(allWorkloads))
			for sec := 1; sec <= 60; sec++ {
				// Engine writes of every phase together: the runtime is
				// split between the engine's and raw's phases, so this
				// is twice what the engine can write at the rate.
				written := int64(2 * rate * float64(sec))
				for _, w := range allWorkloads {
					n := p.peak(w, written)
					if !p.fits(n) {
						t.Fatalf("%s after %ds at %.0f GB/s: peak %d MiB and %d inodes; free %d MiB and %d inodes (margin %.0f%%)",
							w.Name, sec, rate/1e9, n.Bytes>>20, n.Inodes, p.FreeBytes>>20, p.FreeInodes, 100*spaceMargin)
					}
				}
			}
			// The raw side's work stays in its region.
			if p.SeqBudget > region || p.SmallFiles*4096 > region {
				t.Fatalf("raw budgets outside the region: %+v", p)
			}
		})
	}
	// The default image is the default: what a first run gets with room
	// on disk.
	c := &config{Config: Config{Backend: "file", Dir: t.TempDir()}}
	if free, err := freeBytes(c.Dir); err == nil && free >= 3*defaultImageSize {
		if got, err := chooseSize(c); err != nil || got != defaultImageSize {
			t.Fatalf("chooseSize = %d, %v; want %d", got, err, int64(defaultImageSize))
		}
	}
}

// TestBenchWrapsWithinBudget runs the sequential and small-file workloads
// for real on a memory device of 64 MiB (a 48 MiB filesystem): each
// engine side writes far more than the filesystem holds, so without the
// wrap (and the commit after its truncate) they end in ENOSPC, or in the
// raw window's bounds check.
func TestBenchWrapsWithinBudget(t *testing.T) {
	rep, err := Run(context.Background(), mem(64<<20, time.Second, "seqwrite-1m", "buffered-4k"))
	if err != nil {
		t.Fatal(err)
	}
	fsBytes := rep.Config.DeviceBytes - rep.Config.RegionBytes
	for _, r := range rep.Workloads {
		written := r.Engine.Ops * int64(r.IOSize)
		t.Logf("%s: engine wrote %d MiB in %d wraps, raw %d wraps; filesystem %d MiB", r.Name, written>>20, r.Engine.Wraps, r.Raw.Wraps, fsBytes>>20)
		if r.Failed != "" || r.Engine.Wraps == 0 || r.Raw.Wraps == 0 {
			t.Fatalf("%s: failed %q, wraps %d/%d", r.Name, r.Failed, r.Engine.Wraps, r.Raw.Wraps)
		}
	}
}

// TestBenchSmallFilesReuse calls the engine side's SmallFile far beyond
// its budget on a small filesystem: the directory never holds more than
// the budget, and the inodes and blocks come back.
func TestBenchSmallFilesReuse(t *testing.T) {
	dev := memdev.New(16 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{BlockSize: 4096}); err != nil {
		t.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	st, err := v.Statfs()
	if err != nil {
		t.Fatal(err)
	}
	inodes := int64(st.FilesFree)
	e := engineSide{v: v, files: 16}
	p := pattern(4096, 1)
	for n := int64(1); n <= 2*inodes; n++ {
		if err := e.SmallFile(n, p); err != nil {
			t.Fatalf("file %d of %d (free inodes %d): %v", n, 2*inodes, inodes, err)
		}
	}
	ents, err := v.ReadDir("/")
	if err != nil {
		t.Fatal(err)
	}
	small := 0
	for _, d := range ents {
		if strings.HasPrefix(d.Name(), "small-") {
			small++
		}
	}
	if small != 16 {
		t.Fatalf("%d small files, want 16", small)
	}
}

// TestBenchFailedWorkloadReported: a failing workload is reported in its
// row and the verdict, the others' results stand, and the exit status is
// non-zero.
func TestBenchFailedWorkloadReported(t *testing.T) {
	failWorkloadHook = func(w workload) error {
		if w.Name == "randread-2" {
			return errors.New("injected failure\nsecond line")
		}
		return nil
	}
	defer func() { failWorkloadHook = nil }()
	c := mem(96<<20, 300*time.Millisecond, "overwrite-2", "randread-2", "seqwrite-1m")
	rep, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Err(); err == nil || err.Error() != "1 of 3 workloads failed: randread-2" {
		t.Fatalf("Err() = %v", err)
	}
	var b strings.Builder
	rep.WriteText(&b)
	out := b.String()
	for _, want := range []string{"FAILED: injected failure second line", "overwrite-2     ", "seqwrite-1m     "} {
		if !strings.Contains(out, want) {
			t.Fatalf("report lacks %q:\n%s", want, out)
		}
	}
	verdict := out[strings.Index(out, "verdict"):]
	for _, name := range []string{"overwrite-2", "seqwrite-1m"} {
		if !regexp.MustCompile(`(?m)^  ` + name + ` +[0-9.]+× raw: (faster|slower|on par \(within 5%\))$`).MatchString(verdict) {
			t.Fatalf("no verdict for %s:\n%s", name, verdict)
		}
	}
	c.Repeat = 2
	if rep, err = Run(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	if rep.Err() == nil {
		t.Fatal("Err() = nil after two failed rounds")
	}
	for _, r := range rep.Workloads {
		if (r.Failed != "") != (r.Name == "randread-2") || r.Name != "randread-2" && r.Engine.Ops == 0 {
			t.Fatalf("%s: failed %q, %d ops", r.Name, r.Failed, r.Engine.Ops)
		}
	}
}

func TestVerdictWord(t *testing.T) {
	for x, want := range map[float64]string{0: "not measured", 0.5: "slower", 0.951: "on par (within 5%)", 1: "on par (within 5%)",
		1.049: "on par (within 5%)", 1.06: "faster"} {
		if got := verdictWord(x); got != want {
			t.Errorf("verdictWord(%v) = %q, want %q", x, got, want)
		}
	}
}

// TestBenchResetFreesSpace writes a buffered file of 40% of a small
// filesystem's free space many times over, starting over with the engine
// side's Reset each time: without the commit in Reset the truncated
// blocks stay busy until some later commit, and write-back runs out of
// space.
func TestBenchResetFreesSpace(t *testing.T) {
	dev := memdev.New(64 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{BlockSize: 4096}); err != nil {
		t.Fatal(err)
	}
	// A page cache of 1 MiB: write-back allocates as the writes go, as
	// the bench's 64 MiB cache does for a file of 1 GiB.
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, PageCacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	st, err := v.Statfs()
	if err != nil {
		t.Fatal(err)
	}
	budget := int64(float64(st.BlocksFree)*0.4) * 4096
	f, err := v.Create(benchFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	e := engineSide{v: v, f: f}
	buf := pattern(64<<10, 3)
	for round := range 12 {
		for off := int64(0); off+int64(len(buf)) <= budget; off += int64(len(buf)) {
			if _, err := e.WriteAt(buf, off); err != nil {
				t.Fatalf("round %d, offset %d of %d: %v", round, off, budget, err)
			}
		}
		if err := e.Reset(); err != nil {
			t.Fatalf("round %d: reset: %v", round, err)
		}
	}
}
