package blockdev_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/blockdevtest"
)

// TestMmapMapSyncFallback: a file that is not on DAX refuses MAP_SYNC;
// the mapping falls back to MAP_SHARED, Mode says why (EOPNOTSUPP, or
// EINVAL before Linux 4.15) and Flush msyncs. A read-only mapping does
// not ask.
func TestMmapMapSyncFallback(t *testing.T) {
	m, _ := newMmapFile(t, 1<<20)
	defer m.Close()
	md := m.Mode()
	if md.MapSync {
		t.Skipf("%s is on DAX: MAP_SYNC granted", t.TempDir())
	}
	t.Logf("mode %+v", md)
	if md.Flush != "msync" || !errors.Is(md.Fallback, blockdev.ErrUnsupported) ||
		!errors.Is(md.Fallback, unix.EOPNOTSUPP) && !errors.Is(md.Fallback, unix.EINVAL) {
		t.Errorf("mode %+v: want msync and a fallback wrapping ErrUnsupported and EOPNOTSUPP", md)
	}
	path := filepath.Join(t.TempDir(), "ro")
	if err := os.WriteFile(path, make([]byte, 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	ro, err := blockdev.OpenMmap(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if md := ro.Mode(); md.MapSync || md.Fallback == nil {
		t.Errorf("read-only mode %+v", md)
	}
}

// TestMmapCharDevice: character devices other than device DAX are
// refused.
func TestMmapCharDevice(t *testing.T) {
	if _, err := blockdev.OpenMmap("/dev/null", true); !errors.Is(err, blockdev.ErrInvalid) {
		t.Errorf("OpenMmap(/dev/null) = %v; want ErrInvalid", err)
	}
}

// TestMmapConformanceLoop runs the conformance suite on a loop block
// device mapped with OpenMmap (root only).
func TestMmapConformanceLoop(t *testing.T) {
	blockdevtest.Run(t, func(t *testing.T, size int64) blockdev.Device {
		m, err := blockdev.OpenMmap(loopDevice(t, size), false)
		if err != nil {
			t.Fatal(err)
		}
		if m.Size() != size || m.LogicalBlockSize() != 512 {
			t.Fatalf("loop device: size %d, logical block size %d", m.Size(), m.LogicalBlockSize())
		}
		return m
	})
}

// TestMmapLoopDurable: writes through the mapping of a loop device reach
// the image file behind it after Flush.
func TestMmapLoopDurable(t *testing.T) {
	dev := loopDevice(t, 4<<20)
	m, err := blockdev.OpenMmap(dev, false)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p := blockdevtest.Pattern(4, 12345, 100_000)
	if _, err := m.WriteAt(p, 12345); err != nil {
		t.Fatal(err)
	}
	if err := m.Flush(); err != nil {
		t.Fatal(err)
	}
	f, err := blockdev.OpenFile(dev, true)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, len(p))
	if _, err := f.ReadAt(got, 12345); err != nil || !bytes.Equal(got, p) {
		t.Fatalf("read through the block device: %v, equal %v", err, bytes.Equal(got, p))
	}
}

// TestMmapCPUFlush runs the conformance suite and a flush check with the
// MAP_SYNC flush path (cache-line write-back instead of msync) forced on
// ordinary files: it cannot prove durability without persistent memory,
// but it runs every line of that path.
func TestMmapCPUFlush(t *testing.T) {
	m, path := newMmapFile(t, 1<<20)
	defer m.Close()
	if !blockdev.MmapForceCPUFlush(m) {
		t.Skip("no CPU cache write-back on this platform")
	}
	t.Logf("flush: %s", m.Mode().Flush)
	p := blockdevtest.Pattern(5, 777, 300_000)
	if _, err := m.WriteAt(p, 777); err != nil {
		t.Fatal(err)
	}
	if err := m.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := blockdev.MmapDirtyPages(m); len(got) != 0 {
		t.Errorf("dirty pages after Flush: %v", got)
	}
	disk, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(disk[777:777+len(p)], p) {
		t.Error("the file differs from what was written")
	}
	blockdevtest.Run(t, func(t *testing.T, size int64) blockdev.Device {
		m := newMmap(t, size)
		blockdev.MmapForceCPUFlush(m)
		return m
	})
}

// BenchmarkMmapFlush4K measures one 4 KiB write and Flush on a file
// mapping, with msync and with the MAP_SYNC path's cache-line write-back.
func BenchmarkMmapFlush4K(b *testing.B) {
	for _, cpu := range []bool{false, true} {
		name := map[bool]string{false: "msync", true: "cachelines"}[cpu]
		b.Run(name, func(b *testing.B) {
			m, _ := newMmapFile(b, 64<<20)
			defer m.Close()
			if cpu && !blockdev.MmapForceCPUFlush(m) {
				b.Skip("no CPU cache write-back")
			}
			p := make([]byte, 4096)
			b.SetBytes(4096)
			for i := 0; b.Loop(); i++ {
				if _, err := m.WriteAt(p, int64(i%16384)*4096); err != nil {
					b.Fatal(err)
				}
				if err := m.Flush(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
