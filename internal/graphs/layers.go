package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// layering places each file in a layer: 0 is the top (the files that use
// others), higher numbers lie further down. An edge from a to b runs down
// when b's layer is below a's, sideways within a layer, and back up when
// b's layer is above a's.
type layering map[string]int

// String writes the layering in the format parseLayering reads.
func (lay layering) String() string {
	files := slices.Sorted(maps.Keys(lay))
	bottom := 0
	for _, l := range lay {
		bottom = max(bottom, l)
	}
	var b strings.Builder
	for l := 0; l <= bottom; l++ {
		var row []string
		for _, f := range files {
			if lay[f] == l {
				row = append(row, f)
			}
		}
		b.WriteString(strings.Join(row, " ") + "\n")
	}
	return b.String()
}

// parseLayering reads one layer per line, top first, files separated by
// blanks; '#' starts a comment. Every file of files must appear once, and
// no other.
func parseLayering(text string, files []string) (layering, error) {
	lay := layering{}
	n := 0
	for i, line := range strings.Split(text, "\n") {
		line, _, _ = strings.Cut(line, "#")
		fs := strings.Fields(line)
		if len(fs) == 0 {
			continue
		}
		for _, f := range fs {
			if !slices.Contains(files, f) {
				return nil, fmt.Errorf("line %d: %s is not a file of the package", i+1, f)
			}
			if _, dup := lay[f]; dup {
				return nil, fmt.Errorf("line %d: %s listed twice", i+1, f)
			}
			lay[f] = n
		}
		n++
	}
	var missing []string
	for _, f := range files {
		if _, ok := lay[f]; !ok {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("files not placed: %s", strings.Join(missing, " "))
	}
	return lay, nil
}

// autoOrder returns the files in an order, users first, with few
// references running back up: the greedy heuristic of Eades, Lin and
// Smyth for the feedback arc set, weighted by reference counts. It
// repeatedly takes sinks to the bottom and sources to the top, and
// otherwise moves to the top the file whose outgoing references most
// exceed its incoming ones (ties by name, so the order is stable).
func autoOrder(g *fileGraph) []string {
	left := map[string]bool{}
	for _, f := range g.files {
		left[f] = true
	}
	weight := func(f string) (in, out int) {
		for _, o := range g.files {
			if left[o] && o != f {
				out += g.refs[f][o]
				in += g.refs[o][f]
			}
		}
		return in, out
	}
	var top, bottom []string
	for len(left) > 0 {
		moved := true
		for moved {
			moved = false
			for _, f := range g.files {
				if !left[f] {
					continue
				}
				in, out := weight(f)
				switch {
				case out == 0:
					bottom = append(bottom, f)
				case in == 0:
					top = append(top, f)
				default:
					continue
				}
				delete(left, f)
				moved = true
			}
		}
		best, bestD := "", 0
		for _, f := range g.files {
			if !left[f] {
				continue
			}
			in, out := weight(f)
			if d := out - in; best == "" || d > bestD {
				best, bestD = f, d
			}
		}
		if best != "" {
			top = append(top, best)
			delete(left, best)
		}
	}
	slices.Reverse(bottom)
	return sift(g, append(top, bottom...))
}

// upRefs counts the references of order running back up: from a file to
// one placed before it.
func upRefs(g *fileGraph, order []string) (n int) {
	for i, a := range order {
		for _, b := range order[:i] {
			n += g.refs[a][b]
		}
	}
	return n
}

// sift improves order by moving one file at a time to the position where
// the fewest references run back up, until no move helps (ties keep the
// file where it is).
func sift(g *fileGraph, order []string) []string {
	for improved := true; improved; {
		improved = false
		for _, f := range slices.Clone(order) {
			i := slices.Index(order, f)
			rest := slices.Delete(slices.Clone(order), i, i+1)
			// cost[j]: back-up references of f's edges with f at position j.
			best, bestCost := i, -1
			for j := 0; j <= len(rest); j++ {
				c := 0
				for k, o := range rest {
					if k < j {
						c += g.refs[f][o] // f uses a file above it
					} else {
						c += g.refs[o][f] // a file below f uses it
					}
				}
				if bestCost < 0 || c < bestCost || (c == bestCost && j == i) {
					best, bestCost = j, c
				}
			}
			if best != i {
				order = slices.Insert(rest, best, f)
				improved = true
			}
		}
	}
	return order
}

// autoLayering orders the files with autoOrder and layers them by longest
// path over the edges that run down that order: a file sits one layer
// above the highest file it uses, the files that use nothing at the
// bottom.
func autoLayering(g *fileGraph) layering {
	order := autoOrder(g)
	pos := map[string]int{}
	for i, f := range order {
		pos[f] = i
	}
	height := map[string]int{} // 0 at the bottom
	for i := len(order) - 1; i >= 0; i-- {
		a := order[i]
		for b, n := range g.refs[a] {
			if n > 0 && pos[b] > i {
				height[a] = max(height[a], height[b]+1)
			}
		}
	}
	top := 0
	for _, h := range height {
		top = max(top, h)
	}
	lay := layering{}
	for _, f := range g.files {
		lay[f] = top - height[f]
	}
	return lay
}

// summary counts a graph's edges and references, and those that run back
// up a layering.
type summary struct {
	files, edges, refs int
	upEdges, upRefs    int
	worstUp            []edge // the edges running back up, most references first (at most 10)
}

func (s summary) String() string {
	return fmt.Sprintf("%d files, %d edges (%d references); running back up: %d edges (%d references)",
		s.files, s.edges, s.refs, s.upEdges, s.upRefs)
}

func (g *fileGraph) summarize(lay layering) summary {
	s := summary{files: len(g.files)}
	var up []edge
	for _, e := range g.edges() {
		s.edges++
		s.refs += e.refs
		if lay[e.to] < lay[e.from] {
			s.upEdges++
			s.upRefs += e.refs
			up = append(up, e)
		}
	}
	slices.SortStableFunc(up, func(a, b edge) int { return b.refs - a.refs })
	s.worstUp = up[:min(len(up), 10)]
	return s
}

// dot draws the files in their layers, top layer first. Edges running
// down or sideways are grey; edges running back up are red and do not
// constrain the layout.
func (g *fileGraph) dot(lay layering, s summary) string {
	var b strings.Builder
	b.WriteString("// Generated by go run ./internal/graphs; do not edit.\n")
	fmt.Fprintf(&b, "// %s\n", s)
	b.WriteString("digraph files {\n")
	fmt.Fprintf(&b, "\tlabel=%q;\n\tlabelloc=t;\n", "root package files, users above what they use: "+s.String()+"; red: running back up")
	b.WriteString("\trankdir=TB;\n\tranksep=0.5;\n\tnodesep=0.15;\n\tnewrank=true;\n")
	b.WriteString("\tnode [shape=box, style=\"rounded,filled\", fillcolor=\"#f4f4f4\", fontname=\"Helvetica\", fontsize=10];\n")
	b.WriteString("\tedge [fontname=\"Helvetica\", fontsize=8, arrowsize=0.5];\n")
	bottom := 0
	for _, l := range lay {
		bottom = max(bottom, l)
	}
	for l := 0; l <= bottom; l++ {
		fmt.Fprintf(&b, "\t{ rank=same; // layer %d\n", l)
		for _, f := range g.files {
			if lay[f] == l {
				fmt.Fprintf(&b, "\t\t%q;\n", f)
			}
		}
		b.WriteString("\t}\n")
	}
	// Invisible edges between consecutive layers keep them in order even
	// where no edge runs between them.
	for l := 0; l < bottom; l++ {
		a, c := firstIn(g.files, lay, l), firstIn(g.files, lay, l+1)
		if a != "" && c != "" {
			fmt.Fprintf(&b, "\t%q -> %q [style=invis];\n", a, c)
		}
	}
	for _, e := range g.edges() {
		w := 0.5
		for n := e.refs; n > 1; n /= 4 {
			w += 0.5
		}
		if lay[e.to] < lay[e.from] {
			fmt.Fprintf(&b, "\t%q -> %q [label=%d, color=\"#d02020\", fontcolor=\"#d02020\", penwidth=%.1f, constraint=false];\n", e.from, e.to, e.refs, w)
		} else {
			fmt.Fprintf(&b, "\t%q -> %q [label=%d, color=\"#00000050\", fontcolor=\"#606060\", penwidth=%.1f];\n", e.from, e.to, e.refs, w)
		}
	}
	b.WriteString("}\n")
	return b.String()
}

func firstIn(files []string, lay layering, l int) string {
	for _, f := range files {
		if lay[f] == l {
			return f
		}
	}
	return ""
}
