package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestTortureFlags(t *testing.T) {
	for _, args := range [][]string{
		{"torture", "--bogus"},
		{"torture", "extra"},
		{"torture", "--goroutines", "0"},
		{"torture", "--duration", "nope"},
		{"torture", "--crash-points", "0"},
		{"torture", "--max-rounds", "-1"},
		{"torture", "--atomic", "101"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 || !strings.Contains(errb.String(), "usage: ext4io torture") {
			t.Errorf("%q: exit %d, stderr %q", args, code, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"torture", "--size", "x"}, &out, &errb); code != 2 {
		t.Errorf("bad size: exit %d", code)
	}
}

func TestTortureShortRun(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"torture", "--duration", "1ms", "--seed", "3", "--goroutines", "2", "--size", "16M", "--crash-every", "40", "--dir", t.TempDir()}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "seed 3") || !strings.Contains(out.String(), "rounds=1") {
		t.Errorf("output %q", out.String())
	}
}
