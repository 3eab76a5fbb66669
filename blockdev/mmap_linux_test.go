package blockdev_test

import (
	"bytes"
	"os"
	"syscall"
	"testing"
)

// TestMmapDiscardReleases: Discard gives the whole pages of its range
// back to the file system (the file's allocated blocks drop), clears the
// partial pages at its edges, and leaves the bytes around it alone.
func TestMmapDiscardReleases(t *testing.T) {
	const size = 4 << 20
	m, path := newMmapFile(t, size)
	defer m.Close()
	ones := bytes.Repeat([]byte{1}, size)
	if _, err := m.WriteAt(ones, 0); err != nil {
		t.Fatal(err)
	}
	if err := m.Flush(); err != nil {
		t.Fatal(err)
	}
	allocated := func() int64 {
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return st.Blocks * 512
	}
	before := allocated()
	if before < size {
		t.Skipf("the file system allocated %d of %d written bytes", before, size)
	}
	off, n := int64(1000), int64(3<<20)
	if err := m.Discard(off, n); err != nil {
		t.Fatal(err)
	}
	if after := allocated(); after > before-2<<20 {
		t.Fatalf("discarding 3 MiB left %d of %d bytes allocated", after, before)
	}
	got := make([]byte, size)
	if _, err := m.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	for i, b := range got {
		inside := int64(i) >= off && int64(i) < off+n
		if want := byte(1); inside && b != 0 || !inside && b != want {
			t.Fatalf("byte %d = %d after discarding [%d,+%d)", i, b, off, n)
		}
	}
	// The file agrees with the mapping.
	disk, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(disk, got) {
		t.Fatal("file and mapping differ after discard")
	}
}
