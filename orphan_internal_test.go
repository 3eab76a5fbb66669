package ext4io

import (
	"testing"

	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/ext4io/ext4io/layout"
)

// TestOrphanUnlinkOpen: unlinking an open file puts it on the orphan list
// (orphan file + orphan_present, or the s_last_orphan chain); closing the
// last File frees it at the next namespace operation; and after a "crash"
// (the volume closed with the orphan still listed) processOrphans frees
// it on the next open, leaving e2fsck -fn clean.
func TestOrphanUnlinkOpen(t *testing.T) {
	for _, tc := range []struct{ name, features string }{{"orphan_file", ""}, {"chain", "^orphan_file"}} {
		t.Run(tc.name, func(t *testing.T) {
			img := orphanImage(t, tc.features)
			v, err := OpenImage(img, Options{Writable: true})
			if err != nil {
				t.Fatal(err)
			}
			freeInodes, freeBlocks := v.alloc.FreeInodes(), v.alloc.FreeBlocks()
			f, err := v.Create("victim")
			if err != nil {
				t.Fatal(err)
			}
			data := make([]byte, 20000)
			for i := range data {
				data[i] = byte(i)
			}
			if _, err := f.WriteAt(data, 0); err != nil {
				t.Fatal(err)
			}
			ino := f.Ino()
			if err := v.Unlink("victim"); err != nil {
				t.Fatal(err)
			}
			if got := listedOrphans(t, v); len(got) != 1 || got[0] != ino {
				t.Fatalf("orphan list %v, want [%d]", got, ino)
			}
			if tc.features == "" && v.Superblock().FeatureRoCompat&layout.RoCompatOrphanPresent == 0 {
				t.Fatal("orphan_present not set")
			}
			// Still readable through the open File.
			buf := make([]byte, len(data))
			if n, err := f.ReadAt(buf, 0); n != len(data) || err != nil || buf[12345] != data[12345] {
				t.Fatalf("reading the unlinked open file: %d, %v", n, err)
			}
			if _, err := v.Stat("victim"); err == nil {
				t.Fatal("unlinked name still resolves")
			}
			// Crash: close the volume with the orphan listed.
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			v, err = OpenImage(img, Options{Writable: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := v.processOrphans(); err != nil {
				t.Fatal(err)
			}
			if got := listedOrphans(t, v); len(got) != 0 {
				t.Fatalf("orphans left after processing: %v", got)
			}
			if v.alloc.FreeInodes() != freeInodes || v.alloc.FreeBlocks() != freeBlocks {
				t.Fatalf("free inodes/blocks %d/%d after recovery, %d/%d before", v.alloc.FreeInodes(), v.alloc.FreeBlocks(), freeInodes, freeBlocks)
			}
			// Normal path: close the last File, then any namespace op reaps.
			g, err := v.Create("second")
			if err != nil {
				t.Fatal(err)
			}
			g.WriteAt(data, 0)
			if err := v.Unlink("second"); err != nil {
				t.Fatal(err)
			}
			if len(listedOrphans(t, v)) != 1 {
				t.Fatal("second file not on the orphan list")
			}
			g.Close()
			if err := v.Mkdir("trigger", 0o755); err != nil {
				t.Fatal(err)
			}
			if got := listedOrphans(t, v); len(got) != 0 {
				t.Fatalf("orphans left after the last close: %v", got)
			}
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			e2fs.Fsck(t, img)
		})
	}
}

// listedOrphans returns the inodes on the on-disk orphan list.
func listedOrphans(t *testing.T, v *Volume) []uint32 {
	t.Helper()
	var out []uint32
	if v.sb.HasCompat(layout.CompatOrphanFile) {
		err := v.orphanFileBlocks(func(_ uint64, b []byte) (bool, error) {
			for i := 0; i < (v.bs-8)/4; i++ {
				if ino := uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24; ino != 0 {
					out = append(out, ino)
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for cur := v.sb.LastOrphan; cur != 0 && len(out) < 100; {
		out = append(out, cur)
		in, err := v.readInode(cur)
		if err != nil {
			t.Fatal(err)
		}
		cur = in.Dtime
	}
	return out
}
