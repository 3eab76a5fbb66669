package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/errordev"
)

// TestSaveConfigReportsEveryWriteFault is how a test of application logic
// over ext4io looks: every injected write fault must surface as ErrIO.
func TestSaveConfigReportsEveryWriteFault(t *testing.T) {
	writes, outs, err := Sweep()
	if err != nil {
		t.Fatal(err)
	}
	if writes < 2 {
		t.Fatalf("only %d writes in a clean run", writes)
	}
	for _, o := range outs {
		if !errors.Is(o.Err, ext4io.ErrIO) {
			t.Errorf("write %d failing: got %v, want an error wrapping ext4io.ErrIO", o.N, o.Err)
		}
		if !errors.Is(o.Err, errordev.ErrInjected) {
			t.Errorf("write %d failing: the device's own error is not wrapped: %v", o.N, o.Err)
		}
	}
}

// TestFlushFault: a failing flush (fsync) must fail Sync.
func TestFlushFault(t *testing.T) {
	base, err := formatted()
	if err != nil {
		t.Fatal(err)
	}
	for n := range int64(3) {
		clone, _ := base.Clone()
		err := attempt(errordev.New(clone, errordev.OnIndex(errordev.Flush, n)))
		if !errors.Is(err, ext4io.ErrIO) {
			t.Errorf("flush %d failing: %v", n, err)
		}
	}
}

func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	var wrapped, total int
	if _, err := fmt.Sscanf(s[strings.LastIndex(s[:len(s)-1], "\n")+1:], "%d of %d", &wrapped, &total); err != nil || wrapped != total || total == 0 {
		t.Fatalf("summary %d/%d (%v):\n%s", wrapped, total, err, s)
	}
}
