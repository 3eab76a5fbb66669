//go:build unix

package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestCopyShrankFails: a source file that ends before the size it had
// when it was opened (truncated while mkfs -d or put copies it) fails the
// copy with ErrInvalid instead of being padded with zeroes it never had,
// in both copy paths: read whole ahead of the writes (up to aheadMax) and
// copied range by range.
func TestCopyShrankFails(t *testing.T) {
	dir := t.TempDir()
	for _, size := range []int{40 << 10, 3 << 20} {
		name := filepath.Join(dir, "src")
		data := bytes.Repeat([]byte("0123456789abcdef"), size/16)
		if err := os.WriteFile(name, data, 0o644); err != nil {
			t.Fatal(err)
		}
		in, err := openSource(name)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		if err := os.Truncate(name, int64(size/2)); err != nil {
			t.Fatal(err)
		}

		if _, err := readWhole(in, make([]byte, size)); !errors.Is(err, ext4io.ErrInvalid) {
			t.Errorf("readWhole of a %d-byte file shrunk to %d: %v, want ErrInvalid", size, size/2, err)
		}

		dev := memdev.New(64 << 20)
		if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
			t.Fatal(err)
		}
		v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
		if err != nil {
			t.Fatal(err)
		}
		out, err := v.Create("/f")
		if err != nil {
			t.Fatal(err)
		}
		if err := newImporter(v).copyData(out, in, int64(size)); !errors.Is(err, ext4io.ErrInvalid) {
			t.Errorf("copyData of a %d-byte file shrunk to %d: %v, want ErrInvalid", size, size/2, err)
		}
		out.Close()
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
