package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, 2000); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"2000 random 4 KiB direct overwrites", "unchanged: true", "overwrites +2000, metadata updates +0, conversions +0"} {
		if !strings.Contains(s, want) {
			t.Fatalf("output lacks %q:\n%s", want, s)
		}
	}
}
