package ext4io

import "github.com/ext4io/ext4io/layout"

// Statfs describes a volume's capacity, as statfs(2) (syscall.Statfs_t)
// does.
type Statfs struct {
	BlockSize   int64  // f_bsize: the file system block size
	Blocks      uint64 // f_blocks: s_blocks_count less the metadata overhead (Linux's default bsddf)
	BlocksFree  uint64 // f_bfree: free blocks
	BlocksAvail uint64 // f_bavail: free blocks less the root-reserved ones and ext4's reserved clusters
	Files       uint64 // f_files: inodes
	FilesFree   uint64 // f_ffree: free inodes
	NameMax     int64  // f_namelen: the longest name, 255
}

// Statfs returns the volume's block and inode counts, as statfs(2) on a
// mounted ext4 does. Blocks leaves out the metadata overhead as Linux's
// default (bsddf) does: s_overhead_clusters when set, else superblock
// backups, descriptor tables, bitmaps, inode tables and the journal, as
// ext4_calculate_overhead counts them. Free counts are the allocator's
// live ones on a writable volume and the group descriptors' on a read-only
// one. Blocks reserved for buffered data not yet written back count as
// used, as Linux's dirty clusters do.
func (v *Volume) Statfs() (Statfs, error) {
	if err := v.checkOpen(); err != nil {
		return Statfs{}, err
	}
	sb := v.Superblock()
	st := Statfs{
		BlockSize: int64(v.bs),
		Blocks:    sb.BlocksCount - min(v.overhead(&sb), sb.BlocksCount),
		Files:     uint64(sb.InodesCount),
		NameMax:   layout.MaxNameLen,
	}
	if v.alloc != nil {
		st.BlocksFree = v.alloc.FreeBlocks()
		if r := v.reserved(); r < st.BlocksFree {
			st.BlocksFree -= r
		} else {
			st.BlocksFree = 0
		}
		st.FilesFree = v.alloc.FreeInodes()
	} else {
		for _, gd := range v.groups { // read-only: the descriptors never change
			st.BlocksFree += uint64(gd.FreeBlocksCount)
			st.FilesFree += uint64(gd.FreeInodesCount)
		}
	}
	// Available: free less the root-reserved blocks and, with extents,
	// ext4's reserved clusters (ext4_calculate_resv_clusters: 2% of the
	// blocks, at most 4096), as ext4_statfs reports f_bavail.
	held := sb.RBlocksCount
	if sb.HasIncompat(layout.IncompatExtents) {
		held += min(sb.BlocksCount/50, 4096)
	}
	if st.BlocksFree > held {
		st.BlocksAvail = st.BlocksFree - held
	}
	return st, nil
}

// overhead returns the blocks of file-system metadata as Linux's
// ext4_calculate_overhead counts them (without bigalloc): the blocks
// before the first group; per group the superblock backup and descriptor
// blocks (not the reserved GDT blocks), two bitmaps and the inode table;
// and an internal journal.
func (v *Volume) overhead(sb *layout.Superblock) uint64 {
	if sb.OverheadClusters != 0 {
		return uint64(sb.OverheadClusters)
	}
	groups := sb.GroupCount()
	itb := (uint64(sb.InodesPerGroup)*uint64(sb.InodeSizeBytes()) + uint64(v.bs) - 1) / uint64(v.bs)
	n := uint64(sb.FirstDataBlock) + groups*(2+itb)
	per := uint64(v.bs / sb.DescriptorSize())
	for g := range groups {
		base := layout.GroupBaseBlocks(sb, g)
		if sb.GroupHasSuper(g) && (!sb.HasIncompat(layout.IncompatMetaBG) || g < uint64(sb.FirstMetaBg)*per) {
			base -= min(base, uint64(sb.ReservedGdtBlocks))
		}
		n += base
	}
	if sb.HasCompat(layout.CompatHasJournal) && sb.JournalInum != 0 {
		if in, err := v.readInode(sb.JournalInum); err == nil {
			n += in.Size / uint64(v.bs)
		}
	}
	return n
}
