package ext4io

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// Helpers shared by the internal tests of several files.

// preallocated creates name with size bytes of unwritten extents
// (FallocAllocate) and returns it, and it opened again with O_DIRECT.
func preallocated(t testing.TB, v *Volume, name string, size int64) (f, d *File) {
	t.Helper()
	f, err := v.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Fallocate(FallocAllocate, 0, size); err != nil {
		t.Fatal(err)
	}
	if d, err = v.OpenFile(name, os.O_RDWR|O_DIRECT, 0); err != nil {
		t.Fatal(err)
	}
	return f, d
}

// memVolume formats an in-memory device of size bytes with bs-byte blocks
// and opens it writable, without age-based write-back.
func memVolume(t testing.TB, size int64, bs int) (*memdev.Device, *Volume) {
	t.Helper()
	dev := memdev.NewBlockSize(size, bs)
	if err := Format(dev, FormatOptions{BlockSize: bs}); err != nil {
		t.Fatal(err)
	}
	v, err := Open(dev, Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	return dev, v
}

// reopenChecked closes v, runs e2fsck on dev and returns file name of dev
// opened again read-only.
func reopenChecked(t *testing.T, v *Volume, dev *memdev.Device, name string) *File {
	t.Helper()
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	checkImage(t, dev)
	ro, err := Open(dev, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ro.Close() })
	f, err := ro.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func orphanImage(t *testing.T, features string) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "orphan.img")
	dev, err := blockdev.CreateFile(img, 32<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := Format(dev, FormatOptions{BlockSize: 1024, Features: features}); err != nil {
		t.Fatal(err)
	}
	dev.Close()
	return img
}

// sizedInternal is sized (helpers_test.go) for the internal tests: short
// under -short, long when EXT4IO_LONG is set (and not -short), else def.
func sizedInternal(short, def, long int) int {
	switch {
	case testing.Short():
		return short
	case os.Getenv("EXT4IO_LONG") != "":
		return long
	}
	return def
}
