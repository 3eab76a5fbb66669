package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/blockdevtest"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestBenchMemoryJSON runs every workload briefly on the memory backend
// and checks the JSON document and the SVG chart.
func TestBenchMemoryJSON(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "bench.svg")
	out, errOut, code := runCmd(t, "bench", "--backend", "memory", "--size", "128M", "--runtime", "100ms", "--json", "--svg", svg)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if errOut != "" {
		t.Errorf("stderr not empty with --json: %q", errOut)
	}
	var rep benchReport
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("decoding JSON: %v\n%s", err, out)
	}
	if rep.Schema != benchSchema || rep.Config.Backend != "memory" || rep.Config.RegionBytes != 32<<20 || len(rep.Notes) == 0 {
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
		for side, m := range map[string]measure{"engine": r.Engine, "raw": r.Raw} {
			if m.Ops <= 0 || m.Seconds <= 0 || m.IOPS <= 0 || m.MBps <= 0 || m.P50us <= 0 || m.P99us < m.P50us || m.MaxUs < m.P99us || m.Device == nil {
				t.Fatalf("%s %s: %+v", r.Name, side, m)
			}
			wantW := allWorkloads[i].Op != opRandRead
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
	checkSVG(t, svg, 1+2+2*len(allWorkloads))
}

func checkSVG(t *testing.T, path string, wantRects int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
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
	out, errOut, code := runCmd(t, "bench", "--dir", dir, "--size", "128M", "--runtime", "100ms",
		"--workloads", "overwrite-2,seqwrite-1m,fsync-small")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
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
	_, errOut, code := runCmd(t, "bench", "--image", img, "--size", "96M", "--runtime", "50ms", "--workloads", "randread-2", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if st, err := os.Stat(img); err != nil || st.Size() != 96<<20 {
		t.Fatalf("image: %v %v", st, err)
	}
}

func TestBenchUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--workloads", "nope"},
		{"bench", "--backend", "tape"},
		{"bench", "--backend", "memory", "--image", "x"},
		{"bench", "--runtime", "0s"},
		{"bench", "extra"},
		{"bench", "--size", "12Q"},
	} {
		_, errOut, code := runCmd(t, args...)
		if code != 2 || !strings.Contains(errOut, "usage: ext4io bench") {
			t.Errorf("%v: exit %d, %q", args, code, errOut)
		}
	}
	_, errOut, code := runCmd(t, "bench", "--backend", "memory", "--size", "32M", "--runtime", "10ms")
	if code != 1 || !strings.Contains(errOut, "too small") {
		t.Errorf("tiny device: exit %d, %q", code, errOut)
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
	p := newProgress(&buf, true)
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
	var off bytes.Buffer
	q := newProgress(&off, false)
	q.set("x", "y", time.Now(), 0)
	q.start(&ops)
	q.stop()
	q.clear()
	if off.Len() != 0 {
		t.Fatalf("disabled progress wrote %q", off.String())
	}
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
