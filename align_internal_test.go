package ext4io

import (
	"bytes"
	"os"
	"testing"
)

// TestAlignedPlacement checks allocRequest's alignment: files written in
// 1 MiB runs, buffered or direct, after a small file that leaves the free
// space misaligned, get blocks whose physical and logical numbers agree
// modulo 1 MiB of blocks, so their write-back and direct runs are aligned
// on the device; the image passes e2fsck and reads back. With 1 KiB
// blocks (groups start at block 1, so runs across a group's start split)
// the files are only checked to read back.
func TestAlignedPlacement(t *testing.T) {
	t.Parallel()
	for _, bs := range []int{1024, 4096} {
		dev, v := memVolume(t, 96<<20, bs)
		align := uint64(1<<20) / uint64(bs)
		small, err := v.Create("/small")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := small.WriteAt(bytes.Repeat([]byte{7}, 3*bs), 0); err != nil {
			t.Fatal(err)
		}
		if err := small.Sync(); err != nil {
			t.Fatal(err)
		}
		small.Close()
		data := make([]byte, 5<<20)
		for i := range data {
			data[i] = byte(i*7 + i>>12)
		}
		for _, name := range []string{"/buffered", "/direct"} {
			flags := os.O_RDWR
			if name == "/direct" {
				flags |= O_DIRECT
			}
			if f, err := v.Create(name); err != nil {
				t.Fatal(err)
			} else {
				f.Close()
			}
			f, err := v.OpenFile(name, flags, 0)
			if err != nil {
				t.Fatal(err)
			}
			for off := 0; off < len(data); off += 1 << 20 {
				if _, err := f.WriteAt(data[off:off+1<<20], int64(off)); err != nil {
					t.Fatalf("bs %d %s: write at %d: %v", bs, name, off, err)
				}
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			exts, err := f.Extents()
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range exts {
				if bs == 4096 && (e.Physical-e.Logical)%align != 0 {
					t.Errorf("bs %d %s: extent %+v: physical - logical not a multiple of %d blocks", bs, name, e, align)
				}
			}
			f.Close()
		}
		ro := reopenChecked(t, v, dev, "/buffered").v
		for _, name := range []string{"/buffered", "/direct"} {
			f, err := ro.Open(name)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(data))
			if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("bs %d %s: read back differs: %v", bs, name, err)
			}
			f.Close()
		}
	}
}
