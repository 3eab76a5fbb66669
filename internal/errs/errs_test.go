package errs

import (
	"errors"
	"fmt"
	"testing"
)

// twin is a copy of CorruptError, as a public package declares one.
type twin struct {
	What  string
	Ino   uint32
	Block uint64
	Off   int
	Msg   string
	Err   error
}

func (e *twin) Error() string { return (*CorruptError)(e).Error() }

func init() { AddTwin(func(e *CorruptError) *twin { return (*twin)(e) }) }

// TestAddTwin: errors.As finds a wrapped *CorruptError as a registered
// twin, the same error (not a copy), and as the original type too.
func TestAddTwin(t *testing.T) {
	orig := &CorruptError{What: "extent block", Ino: 12, Block: 99, Off: 0x18, Msg: "bad magic"}
	err := fmt.Errorf("reading: %w", orig)
	var tw *twin
	if !errors.As(err, &tw) {
		t.Fatalf("errors.As(%v, *twin) = false", err)
	}
	if tw.What != "extent block" || tw.Ino != 12 || tw.Block != 99 || tw.Off != 0x18 || tw.Msg != "bad magic" {
		t.Errorf("twin = %+v", *tw)
	}
	if (*CorruptError)(tw) != orig {
		t.Errorf("twin is a copy, not the error itself")
	}
	var ce *CorruptError
	if !errors.As(err, &ce) || ce != orig {
		t.Errorf("errors.As(*CorruptError) = %v", ce)
	}
	var other *Errno
	if errors.As(err, &other) {
		t.Errorf("errors.As(*Errno) found %v", other)
	}
	if !errors.Is(err, ErrCorrupt) {
		t.Errorf("errors.Is(ErrCorrupt) = false")
	}
}
