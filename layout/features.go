package layout

import (
	"fmt"
	"strings"
)

// Feature flags. Part of the on-disk format; must not change.
const (
	CompatDirPrealloc  = 0x1
	CompatImagicInodes = 0x2
	CompatHasJournal   = 0x4
	CompatExtAttr      = 0x8
	CompatResizeInode  = 0x10
	CompatDirIndex     = 0x20
	CompatLazyBG       = 0x40
	CompatExcludeInode = 0x80
	CompatExcludeBmap  = 0x100
	CompatSparseSuper2 = 0x200
	CompatFastCommit   = 0x400
	CompatStableInodes = 0x800
	CompatOrphanFile   = 0x1000

	RoCompatSparseSuper   = 0x1
	RoCompatLargeFile     = 0x2
	RoCompatBtreeDir      = 0x4
	RoCompatHugeFile      = 0x8
	RoCompatGdtCsum       = 0x10
	RoCompatDirNlink      = 0x20
	RoCompatExtraIsize    = 0x40
	RoCompatHasSnapshot   = 0x80
	RoCompatQuota         = 0x100
	RoCompatBigalloc      = 0x200
	RoCompatMetadataCsum  = 0x400
	RoCompatReplica       = 0x800
	RoCompatReadonly      = 0x1000
	RoCompatProject       = 0x2000
	RoCompatSharedBlocks  = 0x4000
	RoCompatVerity        = 0x8000
	RoCompatOrphanPresent = 0x10000

	IncompatCompression = 0x1
	IncompatFiletype    = 0x2
	IncompatRecover     = 0x4
	IncompatJournalDev  = 0x8
	IncompatMetaBG      = 0x10
	IncompatExtents     = 0x40
	Incompat64Bit       = 0x80
	IncompatMMP         = 0x100
	IncompatFlexBG      = 0x200
	IncompatEAInode     = 0x400
	IncompatDirData     = 0x1000
	IncompatCsumSeed    = 0x2000
	IncompatLargeDir    = 0x4000
	IncompatInlineData  = 0x8000
	IncompatEncrypt     = 0x10000
	IncompatCasefold    = 0x20000
)

type featureName struct {
	kind int // 0 compat, 1 ro_compat, 2 incompat
	bit  uint32
	name string
}

// Names as e2fsprogs prints them (dumpe2fs "Filesystem features").
var featureNames = []featureName{
	{0, CompatDirPrealloc, "dir_prealloc"},
	{0, CompatImagicInodes, "imagic_inodes"},
	{0, CompatHasJournal, "has_journal"},
	{0, CompatExtAttr, "ext_attr"},
	{0, CompatResizeInode, "resize_inode"},
	{0, CompatDirIndex, "dir_index"},
	{0, CompatLazyBG, "lazy_bg"},
	{0, CompatExcludeInode, "snapshot_exclude"},
	{0, CompatExcludeBmap, "exclude_bitmap"},
	{0, CompatSparseSuper2, "sparse_super2"},
	{0, CompatFastCommit, "fast_commit"},
	{0, CompatStableInodes, "stable_inodes"},
	{0, CompatOrphanFile, "orphan_file"},
	{1, RoCompatSparseSuper, "sparse_super"},
	{1, RoCompatLargeFile, "large_file"},
	{1, RoCompatBtreeDir, "btree_dir"},
	{1, RoCompatHugeFile, "huge_file"},
	{1, RoCompatGdtCsum, "uninit_bg"},
	{1, RoCompatDirNlink, "dir_nlink"},
	{1, RoCompatExtraIsize, "extra_isize"},
	{1, RoCompatHasSnapshot, "snapshot"},
	{1, RoCompatQuota, "quota"},
	{1, RoCompatBigalloc, "bigalloc"},
	{1, RoCompatMetadataCsum, "metadata_csum"},
	{1, RoCompatReplica, "replica"},
	{1, RoCompatReadonly, "read-only"},
	{1, RoCompatProject, "project"},
	{1, RoCompatSharedBlocks, "shared_blocks"},
	{1, RoCompatVerity, "verity"},
	{1, RoCompatOrphanPresent, "orphan_present"},
	{2, IncompatCompression, "compression"},
	{2, IncompatFiletype, "filetype"},
	{2, IncompatRecover, "needs_recovery"},
	{2, IncompatJournalDev, "journal_dev"},
	{2, IncompatMetaBG, "meta_bg"},
	{2, IncompatExtents, "extent"},
	{2, Incompat64Bit, "64bit"},
	{2, IncompatMMP, "mmp"},
	{2, IncompatFlexBG, "flex_bg"},
	{2, IncompatEAInode, "ea_inode"},
	{2, IncompatDirData, "dirdata"},
	{2, IncompatCsumSeed, "metadata_csum_seed"},
	{2, IncompatLargeDir, "large_dir"},
	{2, IncompatInlineData, "inline_data"},
	{2, IncompatEncrypt, "encrypt"},
	{2, IncompatCasefold, "casefold"},
}

// FeatureNames returns the names of the set features in e2fsprogs spelling;
// unknown bits print as FEATURE_C12 / FEATURE_R12 / FEATURE_I12.
func FeatureNames(compat, roCompat, incompat uint32) []string {
	var out []string
	sets := [3]uint32{compat, roCompat, incompat}
	known := [3]uint32{}
	for _, f := range featureNames {
		known[f.kind] |= f.bit
		if sets[f.kind]&f.bit != 0 {
			out = append(out, f.name)
		}
	}
	for k, prefix := range []string{"C", "R", "I"} {
		for b := 0; b < 32; b++ {
			if bit := uint32(1) << b; sets[k]&bit != 0 && known[k]&bit == 0 {
				out = append(out, fmt.Sprintf("FEATURE_%s%d", prefix, b))
			}
		}
	}
	return out
}

// ParseFeature returns the kind (0 compat, 1 ro_compat, 2 incompat) and bit
// of a feature name as e2fsprogs spells it.
func ParseFeature(name string) (kind int, bit uint32, ok bool) {
	name = strings.ToLower(name)
	if name == "extents" {
		name = "extent"
	}
	for _, f := range featureNames {
		if f.name == name {
			return f.kind, f.bit, true
		}
	}
	return 0, 0, false
}

// Features ext4io can read. Anything else in incompat makes Open fail with
// an error naming the feature.
const (
	IncompatSupportedRead = IncompatFiletype | IncompatRecover | IncompatMetaBG |
		IncompatExtents | Incompat64Bit | IncompatFlexBG | IncompatCsumSeed |
		IncompatLargeDir | IncompatInlineData | IncompatEAInode | IncompatMMP
	// IncompatSupportedWrite: writes need these and nothing else.
	IncompatSupportedWrite = IncompatFiletype | IncompatRecover | IncompatMetaBG |
		IncompatExtents | Incompat64Bit | IncompatFlexBG | IncompatCsumSeed |
		IncompatLargeDir | IncompatMMP | IncompatInlineData
	// RoCompatSupportedWrite lists the ro_compat features ext4io keeps
	// consistent when writing; any other ro_compat bit makes a volume
	// read-only, as it does for Linux.
	RoCompatSupportedWrite = RoCompatSparseSuper | RoCompatLargeFile | RoCompatHugeFile |
		RoCompatGdtCsum | RoCompatDirNlink | RoCompatExtraIsize | RoCompatMetadataCsum |
		RoCompatOrphanPresent
)

// UnsupportedIncompat returns the names of incompat features in incompat
// that are not in supported.
func UnsupportedIncompat(incompat, supported uint32) []string {
	return FeatureNames(0, 0, incompat&^supported)
}

// UnsupportedRoCompat returns the names of ro_compat features not in supported.
func UnsupportedRoCompat(roCompat, supported uint32) []string {
	return FeatureNames(0, roCompat&^supported, 0)
}
