package errs

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
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

// TestJoin: Join gives nil for no error, the error itself for one, and
// one line for more, naming how many (nested Joins count one by one) and
// the first; errors.Is matches every sentinel errors.Join would, and
// errors.As finds the first error of a type.
func TestJoin(t *testing.T) {
	if err := Join(nil, nil); err != nil {
		t.Fatalf("Join(nil, nil) = %v", err)
	}
	one := fmt.Errorf("a: %w", ErrIO)
	if err := Join(nil, one, nil); err != one {
		t.Fatalf("Join of one error = %v, want it unchanged", err)
	}
	corrupt := &CorruptError{What: "inode", Ino: 12, Off: -1, Msg: "bad"}
	list := []error{one, Join(fmt.Errorf("b: %w", ErrNoSpace), corrupt), nil, fmt.Errorf("d: %w", ErrNotFound)}
	err := Join(list...)
	joined := errors.Join(list...)
	if got, want := err.Error(), "4 errors, the first: a: "+ErrIO.Error(); got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	for _, s := range []error{ErrIO, ErrNoSpace, ErrCorrupt, ErrNotFound, fs.ErrNotExist, syscall.ENOSPC, syscall.ENOENT, ErrReadOnly, ErrExist} {
		if errors.Is(err, s) != errors.Is(joined, s) {
			t.Errorf("errors.Is(%v) = %v, errors.Join's %v", s, errors.Is(err, s), errors.Is(joined, s))
		}
	}
	var ce *CorruptError
	if !errors.As(err, &ce) || ce != corrupt {
		t.Errorf("errors.As found %v, want the CorruptError", ce)
	}
}
