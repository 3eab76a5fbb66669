//go:build unix

package ext4io_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/ext4io/ext4io/iomap"
	"golang.org/x/sys/unix"
)

// TestReportOps checks fiemap and SEEK_DATA/SEEK_HOLE through ext4's report
// ops against the extent list and, where mounting works, against Linux's
// lseek on the same image.
func TestReportOps(t *testing.T) {
	img := formatImage(t, 64<<20, ext4io.FormatOptions{})
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	f, err := v.Create("sparse")
	if err != nil {
		t.Fatal(err)
	}
	block := make([]byte, 4096)
	for i := range block {
		block[i] = 7
	}
	// data at blocks 2-3 and 10, unwritten 20-29, size 40 blocks.
	f.WriteAt(block, 2*4096)
	f.WriteAt(block, 3*4096)
	f.WriteAt(block, 10*4096)
	if err := f.Fallocate(ext4io.FallocKeepSize, 20*4096, 10*4096); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(40 * 4096); err != nil {
		t.Fatal(err)
	}
	// Before write-back the buffered data is delayed: fiemap reports it
	// FIEMAP_EXTENT_DELALLOC, SEEK_DATA finds it.
	var delayed []iomap.Extent
	if err := f.Fiemap(0, 40*4096, func(e iomap.Extent) error { delayed = append(delayed, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(delayed) != 3 || delayed[0].Flags&iomap.ExtentDelalloc == 0 || delayed[0].Logical != 2*4096 ||
		delayed[0].Length != 2*4096 || delayed[1].Flags&iomap.ExtentDelalloc == 0 || delayed[1].Logical != 10*4096 {
		t.Fatalf("fiemap before write-back: %v; want delalloc [8192,+8192) and [40960,+4096), then the unwritten range", delayed)
	}
	if g, err := f.SeekData(4 * 4096); err != nil || g != 10*4096 {
		t.Fatalf("SeekData(4 blocks) before write-back = %d, %v; want the delayed block 10", g, err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	var got []iomap.Extent
	if err := f.Fiemap(0, 40*4096, func(e iomap.Extent) error { got = append(got, e); return nil }); err != nil {
		t.Fatal(err)
	}
	exts, _ := f.Extents()
	if len(got) != len(exts) {
		t.Fatalf("fiemap %v, extents %+v", got, exts)
	}
	for i, e := range exts {
		g := got[i]
		if g.Logical != int64(e.Logical)*4096 || g.Physical != int64(e.Physical)*4096 || g.Length != int64(e.Length)*4096 ||
			(g.Flags&iomap.ExtentUnwritten != 0) != e.Unwritten || (g.Flags&iomap.ExtentLast != 0) != (i == len(exts)-1) {
			t.Fatalf("fiemap extent %d = %v, want %+v", i, g, e)
		}
	}
	type q struct {
		data bool
		off  int64
	}
	want := map[q]int64{
		{true, 0}: 2 * 4096, {true, 3 * 4096}: 3 * 4096, {true, 4 * 4096}: 10 * 4096,
		{false, 0}: 0, {false, 2 * 4096}: 4 * 4096, {false, 10 * 4096}: 11 * 4096,
	}
	for k, w := range want {
		var g int64
		if k.data {
			g, err = f.SeekData(k.off)
		} else {
			g, err = f.SeekHole(k.off)
		}
		if err != nil || g != w {
			t.Fatalf("seek data=%v from %d = %d, %v; want %d", k.data, k.off, g, err, w)
		}
	}
	if _, err := f.SeekData(11 * 4096); !errors.Is(err, iomap.ErrNoData) {
		t.Fatalf("SeekData past the last data: %v", err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	// Linux agrees.
	mnt := e2fs.Mount(t, img, true)
	lf, err := os.Open(filepath.Join(mnt, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	for k, w := range want {
		whence := unix.SEEK_HOLE
		if k.data {
			whence = unix.SEEK_DATA
		}
		g, err := unix.Seek(int(lf.Fd()), k.off, whence)
		if err != nil || g != w {
			t.Fatalf("Linux lseek data=%v from %d = %d, %v; ext4io says %d", k.data, k.off, g, err, w)
		}
	}
}
