package ext4io_test

import (
	"errors"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/layout"
)

// TestCorruptErrorAs: ext4io.CorruptError and layout.CorruptError are
// types of their own (so that go doc shows their fields), and errors.As
// finds corruption as either, whether layout or the root package
// reported it.
func TestCorruptErrorAs(t *testing.T) {
	_, lerr := layout.DecodeSuperblock(make([]byte, 10)) // short buffer
	_, rerr := ext4io.Open(memdev.New(1<<20), ext4io.Options{})
	for _, err := range []error{lerr, rerr} {
		if !errors.Is(err, ext4io.ErrCorrupt) {
			t.Fatalf("%v: not ErrCorrupt", err)
		}
		var ce *ext4io.CorruptError
		if !errors.As(err, &ce) || ce.What != "superblock" {
			t.Errorf("%v: errors.As(*ext4io.CorruptError) gives %+v", err, ce)
		}
		var le *layout.CorruptError
		if !errors.As(err, &le) || le.What != "superblock" {
			t.Errorf("%v: errors.As(*layout.CorruptError) gives %+v", err, le)
		}
	}
	if !errors.Is(rerr, ext4io.ErrNotExt4) {
		t.Errorf("open of zeroes: %v, want ErrNotExt4", rerr)
	}
}
