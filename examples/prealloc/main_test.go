package main

import (
	"bytes"
	"regexp"
	"strconv"
	"testing"
)

func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, 500); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	// keep-size: all unwritten at first, then written pieces appear and
	// every write is a conversion (the offsets may repeat: at most 500).
	m := regexp.MustCompile(`keep-size +fallocate \S+; extents before: 0 written \+ (\d+) unwritten; after 500 writes: (\d+) written \+ (\d+) unwritten`).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("keep-size line missing:\n%s", s)
	}
	if w, _ := strconv.Atoi(m[2]); w < 100 {
		t.Fatalf("only %d written extents after 500 random writes:\n%s", w, s)
	}
	if !regexp.MustCompile(`keep-size +\S+ µs/write; conversions (4\d\d|500), `).MatchString(s) {
		t.Fatalf("keep-size conversions:\n%s", s)
	}
	// write-zeroes: written from the start, untouched by the writes.
	m = regexp.MustCompile(`write-zeroes +fallocate \S+; extents before: (\d+) written \+ 0 unwritten; after 500 writes: (\d+) written \+ 0 unwritten`).FindStringSubmatch(s)
	if m == nil || m[1] != m[2] {
		t.Fatalf("write-zeroes line:\n%s", s)
	}
	if !regexp.MustCompile(`write-zeroes +\S+ µs/write; conversions 0, metadata updates 0, overwrites 500`).MatchString(s) {
		t.Fatalf("write-zeroes counters:\n%s", s)
	}
}
