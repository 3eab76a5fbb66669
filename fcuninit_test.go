package ext4io_test

import (
	"errors"
	"os"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/extent"
	"github.com/ext4io/ext4io/layout"
)

// TestFastCommitReplayLastGroupBlockUninit: a fast commit whose range
// lands in the last group, marked BLOCK_UNINIT by a crafted descriptor
// (checksum valid), is ErrCorrupt as it is for the allocator: the replay
// would compute the group's bitmap from the fixed metadata alone and write
// it, every other block of the group free.
func TestFastCommitReplayLastGroupBlockUninit(t *testing.T) {
	img, _, spot := makeSyntheticFC(t)
	orig, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := layout.DecodeSuperblock(orig[1024:2048])
	if err != nil {
		t.Fatal(err)
	}
	if !sb.HasGroupChecksums() {
		t.Skip("no group descriptor checksums")
	}
	last := sb.GroupCount() - 1
	if last == 0 {
		t.Skip("one group")
	}
	blk, off := sb.DescriptorLocation(last)
	at := int64(blk)*int64(sb.BlockSize()) + int64(off)
	gd, err := layout.DecodeGroupDesc(orig[at:at+int64(sb.DescriptorSize())], sb.DescriptorSize())
	if err != nil {
		t.Fatal(err)
	}
	gd.Flags |= layout.BgBlockUninit
	gd.SetChecksum(sb, uint32(last))
	copy(orig[at:], gd.Raw)
	// A range in the last group, away from its backup superblock and
	// descriptors.
	pblk := sb.GroupFirstBlock(last) + uint64(sb.GroupBlocks(last))/2
	in := &layout.Inode{Mode: layout.ModeReg | 0o640, LinksCount: 1, Size: 3000,
		Flags: layout.InodeFlagExtents, ExtraIsize: 32, Block: extent.EmptyRoot()}
	blkFC := fcCommitBlock(t, spot.bs, spot.tid,
		layout.EncodeFCHead(layout.FCHead{Tid: spot.tid}),
		layout.EncodeFCInode(layout.FCInode{Ino: spot.ino, Raw: in.Encode(spot.fcInodeSize)}),
		layout.EncodeFCRange(layout.FCRange{Ino: spot.ino, Len: 3, Pblk: pblk}, true),
		layout.EncodeFCDentry(layout.FCTagCreat, layout.FCDentry{Parent: spot.sub, Ino: spot.ino, Name: []byte("n")}))
	d := memdev.NewBlockSize(int64(len(orig)), 512)
	d.WriteAt(orig, 0)
	d.WriteAt(make([]byte, 3*spot.bs), spot.area)
	d.WriteAt(blkFC, spot.area)
	v, err := ext4io.Open(d, ext4io.Options{Writable: true})
	if err == nil {
		v.Close()
	}
	if !errors.Is(err, ext4io.ErrCorrupt) {
		t.Fatalf("writable open replaying a range into the last group marked BLOCK_UNINIT: %v, want ErrCorrupt", err)
	}
}
