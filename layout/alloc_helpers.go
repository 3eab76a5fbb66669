package layout

// GroupBaseBlocks returns the number of blocks at the start of group g
// taken by the superblock backup, the descriptor table (or the group's
// meta_bg descriptor block) and the reserved GDT blocks, as the kernel's
// ext4_num_base_meta_clusters counts them.
func GroupBaseBlocks(sb *Superblock, g uint64) uint64 {
	var n uint64
	if sb.GroupHasSuper(g) {
		n = 1
	}
	per := uint64(sb.BlockSize() / sb.DescriptorSize())
	if !sb.HasIncompat(IncompatMetaBG) || g < uint64(sb.FirstMetaBg)*per {
		if n != 0 {
			n += min(sb.DescBlocks(), uint64(sb.FirstMetaBg))
			if !sb.HasIncompat(IncompatMetaBG) {
				n = 1 + sb.DescBlocks()
			}
			n += uint64(sb.ReservedGdtBlocks)
		}
		return n
	}
	if i := g % per; i == 0 || i == 1 || i == per-1 {
		n++
	}
	return n
}
