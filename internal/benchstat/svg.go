package benchstat

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"
)

// Chart is a horizontal grouped bar chart: one group per row (a workload),
// one bar per series (engine, raw, kernel). Bars are scaled per group, to
// the group's largest value, because groups have different units and
// magnitudes; each bar is labelled with its value.
type Chart struct {
	Title  string
	Series []string // bar names, in drawing order
	Groups []Group
	// Note is a line printed under the title (run conditions).
	Note string
	// Ratios, when set, adds a panel under the bars: one row per group
	// (its Label; Unit unused), one bar per RatioSeries, all on one scale
	// with a dashed line at 1.0, the reference the ratios divide by.
	Ratios      []Group
	RatioTitle  string
	RatioSeries []string
	RatioColors []int  // per RatioSeries, the index of the Series whose colour it takes
	RefLabel    string // the line at 1.0, e.g. "raw device = 1.0"
}

// Group is one row of bars.
type Group struct {
	Label  string
	Unit   string    // "IOPS", "MB/s"
	Values []float64 // per series; NaN or <= 0 means not measured
}

var seriesColors = []string{"#1f77b4", "#7f7f7f", "#ff7f0e", "#2ca02c", "#d62728"}

// WriteSVG writes the chart as a standalone SVG document.
func (c *Chart) WriteSVG(w io.Writer) error {
	const (
		left   = 230.0 // label column
		barMax = 460.0
		right  = 130.0 // value labels
		barH   = 14.0
		gap    = 12.0
		top    = 70.0
	)
	rowH := float64(len(c.Series))*barH + gap
	width := left + barMax + right
	height := top + float64(len(c.Groups))*rowH + 20
	ratioTop := height + 30 // the panel's first row
	ratioRowH := float64(len(c.RatioSeries))*barH + gap
	if len(c.Ratios) > 0 {
		height = ratioTop + float64(len(c.Ratios))*ratioRowH + 10
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(bw, `<rect x="0" y="0" width="%.0f" height="%.0f" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(bw, `<text x="10" y="22" font-size="16" font-weight="bold">%s</text>`+"\n", esc(c.Title))
	if c.Note != "" {
		fmt.Fprintf(bw, `<text x="10" y="40" fill="#555">%s</text>`+"\n", esc(c.Note))
	}
	x := left
	for i, s := range c.Series {
		fmt.Fprintf(bw, `<rect x="%.0f" y="50" width="12" height="12" fill="%s"/>`, x, color(i))
		fmt.Fprintf(bw, `<text x="%.0f" y="60">%s</text>`+"\n", x+16, esc(s))
		x += 30 + 8*float64(len(s))
	}
	for gi, g := range c.Groups {
		y := top + float64(gi)*rowH
		fmt.Fprintf(bw, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-8, y+float64(len(c.Series))*barH/2+4, esc(g.Label))
		peak := 0.0
		for _, v := range g.Values {
			if valid(v) {
				peak = max(peak, v)
			}
		}
		for si := range c.Series {
			by := y + float64(si)*barH
			v := math.NaN()
			if si < len(g.Values) {
				v = g.Values[si]
			}
			if !valid(v) || peak == 0 {
				fmt.Fprintf(bw, `<text x="%.0f" y="%.1f" fill="#999">n/a</text>`+"\n", left+4, by+barH-3)
				continue
			}
			l := max(barMax*v/peak, 1)
			fmt.Fprintf(bw, `<rect x="%.0f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`, left, by, l, barH-2, color(si))
			fmt.Fprintf(bw, `<text x="%.1f" y="%.1f">%s %s</text>`+"\n", left+l+4, by+barH-3, esc(FormatNumber(v)), esc(g.Unit))
		}
	}
	if len(c.Ratios) > 0 {
		c.writeRatios(bw, ratioTop, ratioRowH, left, barMax, barH)
	}
	fmt.Fprintln(bw, `</svg>`)
	return bw.Flush()
}

// writeRatios draws the ratio panel from y = top.
func (c *Chart) writeRatios(bw *bufio.Writer, top, rowH, left, barMax, barH float64) {
	// One scale for every row, so that the line at 1.0 is one line: at
	// least 1.25, and room for the largest ratio.
	scale := 1.25
	for _, g := range c.Ratios {
		for _, v := range g.Values {
			if valid(v) {
				scale = max(scale, v*1.05)
			}
		}
	}
	fmt.Fprintf(bw, `<text x="10" y="%.1f" font-size="14" font-weight="bold">%s</text>`+"\n", top-12, esc(c.RatioTitle))
	for gi, g := range c.Ratios {
		y := top + float64(gi)*rowH
		fmt.Fprintf(bw, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-8, y+float64(len(c.RatioSeries))*barH/2+4, esc(g.Label))
		for si, name := range c.RatioSeries {
			by := y + float64(si)*barH
			v := math.NaN()
			if si < len(g.Values) {
				v = g.Values[si]
			}
			if !valid(v) {
				fmt.Fprintf(bw, `<text x="%.0f" y="%.1f" fill="#999">%s n/a</text>`+"\n", left+4, by+barH-3, esc(name))
				continue
			}
			ci := si
			if si < len(c.RatioColors) {
				ci = c.RatioColors[si]
			}
			l := max(barMax*v/scale, 1)
			fmt.Fprintf(bw, `<rect x="%.0f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`, left, by, l, barH-2, color(ci))
			fmt.Fprintf(bw, `<text x="%.1f" y="%.1f">%.2f× %s</text>`+"\n", left+l+4, by+barH-3, v, esc(name))
		}
	}
	x := left + barMax/scale
	bottom := top + float64(len(c.Ratios))*rowH - gapOf(rowH, len(c.RatioSeries), barH)
	fmt.Fprintf(bw, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#d62728" stroke-width="1.5" stroke-dasharray="5,3"/>`+"\n", x, top-4, x, bottom)
	fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" fill="#d62728" text-anchor="middle">%s</text>`+"\n", x, top-2-barH/2, esc(c.RefLabel))
}

// gapOf is the space under a row's bars.
func gapOf(rowH float64, bars int, barH float64) float64 { return rowH - float64(bars)*barH }

func valid(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) && v > 0 }

func color(i int) string { return seriesColors[i%len(seriesColors)] }

func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}

// FormatNumber prints v with thousands separators and no decimals when it
// is large, with up to three significant decimals when it is small.
func FormatNumber(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	if math.Abs(v) >= 100 {
		s := fmt.Sprintf("%.0f", v)
		neg := strings.HasPrefix(s, "-")
		s = strings.TrimPrefix(s, "-")
		var b strings.Builder
		for i, r := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				b.WriteByte(',')
			}
			b.WriteRune(r)
		}
		if neg {
			return "-" + b.String()
		}
		return b.String()
	}
	if math.Abs(v) >= 10 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}
