package benchstat

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestBuckets(t *testing.T) {
	for _, v := range []uint64{0, 1, 15, 16, 17, 31, 32, 33, 1000, 123456789, 1 << 40, math.MaxUint64} {
		i := bucketOf(v)
		lo, hi := bounds(i)
		if v < lo || v > hi {
			t.Fatalf("value %d in bucket %d = [%d,%d]", v, i, lo, hi)
		}
		if lo >= 16 && float64(hi-lo) >= float64(lo)/16 {
			t.Fatalf("bucket %d [%d,%d] wider than 1/16", i, lo, hi)
		}
	}
	// Buckets tile the number line.
	for i := 1; i < numBuckets; i++ {
		_, phi := bounds(i - 1)
		lo, _ := bounds(i)
		if lo != phi+1 {
			t.Fatalf("gap between bucket %d and %d: %d, %d", i-1, i, phi, lo)
		}
	}
}

// TestQuantileModel checks quantiles against the exact quantiles of random
// samples, split over several histograms and merged.
func TestQuantileModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	for iter := 0; iter < 50; iter++ {
		n := 1 + r.IntN(5000)
		parts := make([]Histogram, 1+r.IntN(4))
		var sample []uint64
		var sum uint64
		for range n {
			v := uint64(math.Exp(r.Float64() * 20)) // 1 ns .. 0.5 s, log-uniform
			sample = append(sample, v)
			sum += v
			parts[r.IntN(len(parts))].Record(time.Duration(v))
		}
		var h Histogram
		for i := range parts {
			h.Merge(&parts[i])
		}
		slices.Sort(sample)
		if h.Count() != uint64(n) || uint64(h.Max()) != sample[n-1] || uint64(h.Mean()) != sum/uint64(n) {
			t.Fatalf("seed %d: count %d max %v mean %v, want %d %d %d", seed, h.Count(), h.Max(), h.Mean(), n, sample[n-1], sum/uint64(n))
		}
		for _, q := range []float64{0, 0.5, 0.9, 0.99, 1} {
			rank := max(int(math.Ceil(q*float64(n))), 1)
			exact := float64(sample[rank-1])
			got := float64(h.Quantile(q))
			if math.Abs(got-exact) > exact/16+1 {
				t.Fatalf("seed %d: q%.2f of %d samples = %v, exact %v", seed, q, n, got, exact)
			}
		}
	}
	var empty Histogram
	if empty.Quantile(0.5) != 0 || empty.Mean() != 0 {
		t.Fatal("empty histogram not zero")
	}
}

func TestChartIsValidXML(t *testing.T) {
	c := Chart{
		Title:  "engine vs raw <&>",
		Note:   "memory backend",
		Series: []string{"engine", "raw", "kernel"},
		Groups: []Group{
			{Label: "randwrite 4k", Unit: "IOPS", Values: []float64{1000, 2000, math.NaN()}},
			{Label: "seq 1M & more", Unit: "MB/s", Values: []float64{500.7, 700}},
		},
		Ratios: []Group{
			{Label: "randwrite 4k", Values: []float64{0.5, math.NaN()}},
			{Label: "seq 1M & more", Values: []float64{0.71, 2}},
		},
		RatioTitle:  "ratio to raw",
		RatioSeries: []string{"engine / raw", "kernel / raw"},
		RatioColors: []int{0, 2},
		RefLabel:    "raw = 1.0",
	}
	var buf bytes.Buffer
	if err := c.WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	svg := buf.String()
	d := xml.NewDecoder(&buf)
	rects, texts := 0, []string{}
	var inText bool
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("invalid XML: %v", err)
		}
		switch tk := tok.(type) {
		case xml.StartElement:
			if tk.Name.Local == "rect" {
				rects++
			}
			inText = tk.Name.Local == "text"
		case xml.CharData:
			if inText {
				texts = append(texts, string(tk))
			}
		case xml.EndElement:
			inText = false
		}
	}
	// background + 3 legend swatches + 4 bars + 3 ratio bars.
	if rects != 1+3+4+3 {
		t.Fatalf("%d rects", rects)
	}
	// The line at 1.0 sits at left + barMax/scale, the scale 2*1.05.
	if want := fmt.Sprintf(`<line x1="%.1f"`, 230+460/2.1); !strings.Contains(svg, want) {
		t.Fatalf("no reference line %s in\n%s", want, svg)
	}
	all := strings.Join(texts, "|")
	for _, want := range []string{"engine vs raw <&>", "1,000 IOPS", "2,000 IOPS", "n/a", "501 MB/s", "700 MB/s",
		"ratio to raw", "0.50× engine / raw", "kernel / raw n/a", "2.00× kernel / raw", "raw = 1.0"} {
		if !strings.Contains(all, want) {
			t.Fatalf("missing %q in %q", want, all)
		}
	}
}

func TestFormatNumber(t *testing.T) {
	for v, want := range map[float64]string{1234567: "1,234,567", 100: "100", -4321: "-4,321", 12.34: "12.3", 0.5: "0.50"} {
		if got := FormatNumber(v); got != want {
			t.Errorf("FormatNumber(%v) = %q, want %q", v, got, want)
		}
	}
}
