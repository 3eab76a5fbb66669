package alloc

import (
	"bytes"
	"errors"
	"testing"

	"github.com/ext4io/ext4io/internal/mkfs"
	"github.com/ext4io/ext4io/layout"
)

// TestLazyItableZeroed: the first inode taken from a group whose inode
// table is not zeroed (lazy init) zeroes the table from the first block
// past the used inodes, which here include one the bitmap holds past
// bg_itable_unused's mark, and marks the group ITABLE_ZEROED.
func TestLazyItableZeroed(t *testing.T) {
	m := newImage(t, 64<<20, mkfs.Options{}, nil)
	a := m.a
	g := a.g[0]
	g.mu.Lock()
	if err := a.loadInodesLocked(0); err != nil {
		g.mu.Unlock()
		t.Fatal(err)
	}
	d := g.mu.desc
	if d.Flags&layout.BgInodeZeroed != 0 {
		g.mu.Unlock()
		t.Skip("the format zeroed the inode tables")
	}
	bs := int64(a.bs)
	ipb := uint32(bs) / uint32(m.sb.InodeSizeBytes())
	used := a.ipg - d.ItableUnused
	from := int64((used + ipb - 1) / ipb)
	itb := int64(a.itb)
	if from+2 > itb {
		g.mu.Unlock()
		t.Fatalf("inode table of %d blocks, %d used: no room for the test", itb, from)
	}
	// An inode in the table's last-but-one block that the bitmap holds
	// past the mark.
	held := uint64(itb-2) * uint64(ipb)
	setBits(g.mu.ibitmap, held, 1)
	table := int64(d.InodeTable)
	g.mu.Unlock()

	stale := bytes.Repeat([]byte{0xAA}, int(bs))
	for b := from; b < itb; b++ {
		if _, err := m.dev.WriteAt(stale, (table+b)*bs); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.AllocInode(layout.RootIno, false); err != nil {
		t.Fatal(err)
	}
	block := func(b int64) []byte {
		p := make([]byte, bs)
		if _, err := m.dev.ReadAt(p, (table+b)*bs); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if !bytes.Equal(block(itb-1), make([]byte, bs)) {
		t.Errorf("the table's last block was not zeroed")
	}
	for b := from; b < itb-1; b++ {
		if !bytes.Equal(block(b), stale) {
			t.Errorf("table block %d (of %d; used inodes up to block %d) was zeroed", b, itb, itb-2)
		}
	}
	g.mu.Lock()
	flags := g.mu.desc.Flags
	g.mu.Unlock()
	if flags&layout.BgInodeZeroed == 0 {
		t.Errorf("group 0 not marked ITABLE_ZEROED")
	}
}

// TestLazyItableUninitLiveInodes: a crafted descriptor that marks a group
// holding live inodes INODE_UNINIT (the free counts agreeing) must not get
// its inode table zeroed, or a live inode handed out again, by the next
// inode allocation. Group 0 holds the root directory, so INODE_UNINIT there
// is corrupt; in another group the inodes below bg_itable_unused's mark are
// kept and checked, as the kernel's lazy init (ext4_init_inode_table) keeps
// them.
func TestLazyItableUninitLiveInodes(t *testing.T) {
	t.Run("Group0", func(t *testing.T) {
		m := newImage(t, 64<<20, mkfs.Options{}, nil)
		a := m.a
		if !a.csum {
			t.Skip("no group descriptor checksums: INODE_UNINIT means nothing")
		}
		root := m.readInode(t, layout.RootIno)
		g := a.g[0]
		g.mu.Lock()
		g.mu.ibitmap = nil
		g.mu.desc.Flags = (g.mu.desc.Flags | layout.BgInodeUninit) &^ layout.BgInodeZeroed
		g.mu.desc.FreeInodesCount = a.ipg
		g.mu.Unlock()
		_, err := a.allocInodeIn(0, false)
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("inode allocation in group 0 marked INODE_UNINIT: %v, want ErrCorrupt", err)
		}
		if got := m.readInode(t, layout.RootIno); !bytes.Equal(got.Raw, root.Raw) {
			t.Errorf("the root inode changed")
		}
	})
	t.Run("Group1", func(t *testing.T) {
		m := newImage(t, 64<<20, mkfs.Options{BlockSize: 1024}, nil)
		a := m.a
		if !a.csum || a.groups < 2 {
			t.Skip("no group descriptor checksums or one group")
		}
		// A live inode in group 1's first slot, and a descriptor that
		// says the group is uninitialised with its first 3 slots used.
		ino := a.ipg + 1
		live := &layout.Inode{Mode: layout.ModeReg | 0o644, LinksCount: 1, Size: 5, ExtraIsize: 32}
		m.writeInode(t, ino, live)
		want := m.readInode(t, ino).Raw
		g := a.g[1]
		g.mu.Lock()
		g.mu.ibitmap = nil
		g.mu.desc.Flags = (g.mu.desc.Flags | layout.BgInodeUninit) &^ layout.BgInodeZeroed
		g.mu.desc.FreeInodesCount = a.ipg
		g.mu.desc.ItableUnused = a.ipg - 3
		g.mu.Unlock()
		got, err := a.allocInodeIn(1, false)
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("allocation over live inode %d: got inode %d, %v; want ErrCorrupt", ino, got, err)
		}
		if raw := m.readInode(t, ino).Raw; !bytes.Equal(raw, want) {
			t.Errorf("live inode %d was overwritten (zeroed: %v)", ino, bytes.Equal(raw, make([]byte, len(raw))))
		}
	})
}
