package blockdev_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/blockdevtest"
)

func TestFileConformance(t *testing.T) {
	blockdevtest.Run(t, func(t *testing.T, size int64) blockdev.Device {
		f, err := blockdev.CreateFile(filepath.Join(t.TempDir(), "img"), size)
		if err != nil {
			t.Fatal(err)
		}
		return f
	})
}

func TestFileReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "img")
	w, err := blockdev.CreateFile(path, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	p := blockdevtest.Pattern(1, 4096, 4096)
	if _, err := w.WriteAt(p, 4096); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := blockdev.OpenFile(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.WriteAt(p, 0); !errors.Is(err, blockdev.ErrReadOnly) {
		t.Errorf("WriteAt on read-only = %v, want ErrReadOnly", err)
	}
	if err := r.ZeroOut(0, 512); !errors.Is(err, blockdev.ErrReadOnly) {
		t.Errorf("ZeroOut on read-only = %v, want ErrReadOnly", err)
	}
	if err := r.Discard(0, 512); !errors.Is(err, blockdev.ErrReadOnly) {
		t.Errorf("Discard on read-only = %v, want ErrReadOnly", err)
	}
	got := make([]byte, 4096)
	if _, err := r.ReadAt(got, 4096); err != nil || string(got) != string(p) {
		t.Errorf("read-only ReadAt = %v, data equal %v", err, string(got) == string(p))
	}
}

func TestCreateFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "img")
	f, err := blockdev.CreateFile(path, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if f.Size() != 1<<30 || f.LogicalBlockSize() != 512 {
		t.Errorf("Size, LogicalBlockSize = %d, %d", f.Size(), f.LogicalBlockSize())
	}
	f.Close()
	var st os.FileInfo
	if st, err = os.Stat(path); err != nil || st.Size() != 1<<30 {
		t.Fatalf("stat: %v, %v", st, err)
	}
	// Growing is allowed, shrinking is refused.
	if f, err = blockdev.CreateFile(path, 2<<30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := blockdev.CreateFile(path, 1<<20); !errors.Is(err, blockdev.ErrInvalid) {
		t.Errorf("CreateFile smaller = %v, want ErrInvalid", err)
	}
	if _, err := blockdev.CreateFile(path, -1); !errors.Is(err, blockdev.ErrInvalid) {
		t.Errorf("CreateFile negative = %v, want ErrInvalid", err)
	}
	if _, err := blockdev.OpenFile(dir, false); !errors.Is(err, blockdev.ErrInvalid) && !errors.Is(err, blockdev.ErrIO) {
		t.Errorf("OpenFile on a directory = %v", err)
	}
	if _, err := blockdev.OpenFile(filepath.Join(dir, "missing"), false); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenFile on a missing file = %v, want ErrNotExist", err)
	}
}

// TestFileShrunkUnderneath checks a file truncated behind the device's back
// gives a short read with an error, not a hang or silent zeroes.
func TestFileShrunkUnderneath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "img")
	f, err := blockdev.CreateFile(path, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Truncate(path, 4096); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 8192)
	n, err := f.ReadAt(p, 0)
	if n != 4096 || err == nil {
		t.Errorf("ReadAt across a truncation = %d, %v; want 4096 and an error", n, err)
	}
}

func BenchmarkFileRandom4K(b *testing.B) {
	f, err := blockdev.CreateFile(filepath.Join(b.TempDir(), "img"), 64<<20)
	if err != nil {
		b.Fatal(err)
	}
	blockdevtest.BenchRandom4K(b, f)
}

// TestWriteZeroes: WriteZeroes zeroes exactly its range with ordinary
// writes, from a page-aligned buffer.
func TestWriteZeroes(t *testing.T) {
	d, err := blockdev.CreateFile(filepath.Join(t.TempDir(), "z.img"), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.WriteAt(bytes.Repeat([]byte{7}, 1<<20), 0); err != nil {
		t.Fatal(err)
	}
	if err := blockdev.WriteZeroes(d, 4096, 600<<10); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 1<<20)
	if _, err := d.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte{7}, 1<<20)
	clear(want[4096 : 4096+600<<10])
	if !bytes.Equal(got, want) {
		t.Fatal("WriteZeroes changed other bytes or left some of its range")
	}
}
