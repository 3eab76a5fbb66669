package main

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// TestLoadFiles counts the references between the files of
// testdata/synth, whose comments say what each one uses: locals,
// struct fields, test files and files excluded by a build constraint
// count for nothing; methods, interface methods, types, vars and consts
// count once per use.
func TestLoadFiles(t *testing.T) {
	g, err := loadFiles("testdata/synth")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a.go", "b.go", "c.go", "d.go"}; !slices.Equal(g.files, want) {
		t.Fatalf("files %v, want %v", g.files, want)
	}
	want := []edge{
		{"a.go", "b.go", 1}, // B
		{"a.go", "c.go", 4}, // C, C, M, K
		{"a.go", "d.go", 1}, // I
		{"b.go", "c.go", 2}, // V, C
		{"b.go", "d.go", 2}, // I, I.M
		{"c.go", "a.go", 1}, // A
	}
	if got := g.edges(); !slices.Equal(got, want) {
		t.Fatalf("edges\n%v, want\n%v", got, want)
	}
}

func TestLayering(t *testing.T) {
	g, err := loadFiles("testdata/synth")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		order             string
		upEdges, upRefs   int
		worstFrom, worstT string
	}{
		{"a.go\nb.go\nc.go d.go # c and d side by side\n", 1, 1, "c.go", "a.go"},
		// a → b and b → d run sideways, a → c and b → c back up.
		{"c.go\n\na.go b.go d.go\n", 2, 6, "a.go", "c.go"},
	} {
		lay, err := parseLayering(tc.order, g.files)
		if err != nil {
			t.Fatal(err)
		}
		s := g.summarize(lay)
		if s.edges != 6 || s.refs != 11 || s.upEdges != tc.upEdges || s.upRefs != tc.upRefs {
			t.Errorf("%q: %v, want 6 edges (11 references), %d (%d) back up", tc.order, s, tc.upEdges, tc.upRefs)
		}
		if w := s.worstUp[0]; w.from != tc.worstFrom || w.to != tc.worstT {
			t.Errorf("%q: worst edge up %v, want %s -> %s", tc.order, w, tc.worstFrom, tc.worstT)
		}
	}
	for _, bad := range []string{"a.go b.go c.go", "a.go b.go c.go d.go a.go", "a.go b.go c.go d.go x.go"} {
		if _, err := parseLayering(bad, g.files); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	// The a.go ↔ c.go cycle forces one edge up; the cheapest is c → a.
	if order := autoOrder(g); upRefs(g, order) != 1 {
		t.Errorf("automatic order %v: %d references back up, want 1", order, upRefs(g, order))
	}
	lay := autoLayering(g)
	if s := g.summarize(lay); s.upRefs != 1 || s.upEdges != 1 {
		t.Errorf("automatic layering %v: %v, want 1 reference back up", lay, s)
	}
	if again, err := parseLayering(lay.String(), g.files); err != nil || !maps.Equal(again, lay) {
		t.Errorf("layering %v written as %q reads back as %v, %v", lay, lay.String(), again, err)
	}
	dot := g.dot(lay, g.summarize(lay))
	if !strings.Contains(dot, `"c.go" -> "a.go" [label=1, color="#d02020"`) {
		t.Errorf("the edge running back up is not drawn red:\n%s", dot)
	}
}

// TestLoadPackages reads testdata/mod: module-internal imports of
// non-test files only, nothing under testdata, levels from the bottom.
func TestLoadPackages(t *testing.T) {
	g, err := loadPackages("testdata/mod")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{".", "low", "mid"}; !slices.Equal(g.pkgs, want) {
		t.Fatalf("packages %v, want %v", g.pkgs, want)
	}
	want := map[string][]string{".": {"low", "mid"}, "mid": {"low"}}
	if !maps.EqualFunc(g.deps, want, slices.Equal) {
		t.Fatalf("imports %v, want %v", g.deps, want)
	}
	lv, err := g.levels()
	if err != nil {
		t.Fatal(err)
	}
	if lv["."] != 2 || lv["mid"] != 1 || lv["low"] != 0 {
		t.Errorf("levels %v, want .:2 mid:1 low:0", lv)
	}
	dot := g.dot()
	for _, s := range []string{`"." [label="m"`, `"mid" -> "low";`, `"." -> "mid";`} {
		if !strings.Contains(dot, s) {
			t.Errorf("dot lacks %s:\n%s", s, dot)
		}
	}
}
