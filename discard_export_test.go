package ext4io

import "github.com/ext4io/ext4io/layout"

// BlockFree reports whether block blk is free in its group's block bitmap
// as the volume reads it (a read-only volume sees its replayed journal).
// Blocks of a BLOCK_UNINIT group count as free.
func BlockFree(v *Volume, blk uint64) (bool, error) {
	sb := v.sb
	gi := (blk - uint64(sb.FirstDataBlock)) / uint64(sb.BlocksPerGroup)
	dblk, off := sb.DescriptorLocation(gi)
	buf := make([]byte, v.bs)
	if err := v.readBlock(dblk, buf); err != nil {
		return false, err
	}
	d, err := layout.DecodeGroupDesc(buf[off:], sb.DescriptorSize())
	if err != nil {
		return false, err
	}
	if sb.HasGroupChecksums() && d.Flags&layout.BgBlockUninit != 0 {
		return true, nil
	}
	if err := v.readBlock(d.BlockBitmap, buf); err != nil {
		return false, err
	}
	i := blk - sb.GroupFirstBlock(gi)
	return buf[i/8]&(1<<(i%8)) == 0, nil
}
