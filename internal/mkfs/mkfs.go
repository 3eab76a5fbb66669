// Package mkfs creates ext4 filesystems, as mkfs.ext4 (e2fsprogs 1.47) does
// with lazy_itable_init: only metadata is written, so formatting a sparse
// multi-TiB image takes well under a second of I/O.
//
// What Format writes (block size B; group g starts at block first+g*bpg):
//
//	group with a backup   | superblock | descriptor table | ...
//	flex group leader     | block bitmaps x16 | inode bitmaps x16 | inode tables x16 |
//	group 0 inode table   inodes 1..12: 1 bad blocks (times only), 2 root,
//	                      3-7, 9, 10 zero, 8 journal, 11 lost+found, 12 orphan file
//	root directory        one block: ".", "..", "lost+found"
//	lost+found            max(2, min(12, 16 KiB/B)) blocks (mke2fs's rule)
//	journal (inode 8)     jbd2 v2 superblock in its first block, the rest zeroed;
//	                      placed in the middle flex group, as mke2fs does
//	orphan file (ino 12)  blocks of zero entries ending in {0x0b10ca04, crc32c}
//
// Invariants of every image (checked by the tests with e2fsck -fn):
//   - M1 every group descriptor's free counts equal its bitmaps; the
//     superblock's free counts are their sums.
//   - M2 with group checksums (metadata_csum or uninit_bg) every group but
//     0 is INODE_UNINIT with itable_unused = inodes_per_group; a group is
//     BLOCK_UNINIT only if it holds nothing but its own superblock and
//     descriptor copies and its own bitmaps and table, and is not the last
//     group: so the kernel's and e2fsprogs' computed bitmaps agree.
//   - M3 without group checksums every bitmap is written and every inode
//     table zeroed.
//   - M4 bitmap padding (bits past the group's end) is set.
//
// With mmp an MMP block is allocated (first free block) and written clean.
//
// Not supported: resize_inode (reserved GDT blocks), meta_bg, bigalloc,
// inline_data, quota, external journals; asking for them returns
// ErrUnsupported.
package mkfs

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"strings"
	"time"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/internal/crc32c"
	"github.com/ext4io/ext4io/internal/errs"
	"github.com/ext4io/ext4io/internal/wallclock"
	"github.com/ext4io/ext4io/layout"
)

// Sentinel errors re-exported for errors.Is.
var (
	ErrInvalid     = errs.ErrInvalid
	ErrUnsupported = errs.ErrUnsupported
	ErrNoSpace     = errs.ErrNoSpace
	ErrIO          = errs.ErrIO
)

// Default feature set: modern mkfs.ext4 (e2fsprogs 1.47 upstream) without
// resize_inode.
const (
	DefaultCompat = layout.CompatHasJournal | layout.CompatExtAttr | layout.CompatDirIndex |
		layout.CompatOrphanFile
	DefaultRoCompat = layout.RoCompatSparseSuper | layout.RoCompatLargeFile | layout.RoCompatHugeFile |
		layout.RoCompatDirNlink | layout.RoCompatExtraIsize | layout.RoCompatMetadataCsum
	DefaultIncompat = layout.IncompatFiletype | layout.IncompatExtents | layout.Incompat64Bit |
		layout.IncompatFlexBG | layout.IncompatCsumSeed
)

// Features Format can create.
const (
	supportedCompat   = DefaultCompat | layout.CompatFastCommit
	supportedRoCompat = DefaultRoCompat | layout.RoCompatGdtCsum
	supportedIncompat = DefaultIncompat | layout.IncompatMMP
)

// Options configures Format. The zero value gives mkfs.ext4's defaults.
// ext4io.FormatOptions has the same fields, and ext4io.Format converts
// one to the other: a field added here is added there too.
type Options struct {
	BlockSize  int // 1024..65536, a power of two; 0 = 4096
	InodeSize  int // 128 or 256 (any power of two up to BlockSize); 0 = 256
	InodeRatio int // bytes per inode; 0 = 16384
	// ReservedPercent is the share of blocks reserved for root; 0 means
	// the default 5, a negative value means none.
	ReservedPercent float64
	// Features adjusts the default features: a comma-separated list of
	// e2fsprogs names, each optionally prefixed with ^ to turn it off
	// ("^metadata_csum,^64bit"). "none" clears all (extent stays on).
	Features      string
	Label         string   // at most 16 bytes
	UUID          [16]byte // zero: random
	HashSeed      [16]byte // zero: random
	JournalBlocks int      // 0: ext2fs_default_journal_size
	FlexBGSize    int      // groups per flex group, a power of two; 0 = 16
	// MMPUpdateInterval is s_mmp_update_interval in seconds when the mmp
	// feature is on (mkfs -E mmp_update_interval): 0 means 5, the
	// default; at most 300.
	MMPUpdateInterval int
	// ZeroInodeTables zeroes every inode table and sets ITABLE_ZEROED
	// (mkfs -E lazy_itable_init=0). The default leaves them for the
	// kernel's lazy init, as mkfs.ext4 does.
	ZeroInodeTables bool
	// FastCommit turns on the fast_commit feature (as Features
	// "fast_commit" does): the journal gets a fast-commit area of 1/64 of
	// its log, after it (mke2fs's EXT2_JOURNAL_TO_FC_BLKS_RATIO), and
	// ext4io and Linux log fsyncs there as fast commits.
	FastCommit bool
	NoDiscard  bool      // do not discard the device first
	Now        time.Time // zero: time.Now()
	Rand       io.Reader // randomness for UUIDs; nil: crypto/rand
}

// ApplyFeatures applies a feature list ("a,^b") to the three feature words.
func ApplyFeatures(list string, compat, ro, incompat *uint32) error {
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if f == "none" {
			*compat, *ro, *incompat = 0, 0, layout.IncompatExtents
			continue
		}
		off := strings.HasPrefix(f, "^")
		name := strings.TrimPrefix(f, "^")
		if name == "uninit_bg" || name == "gdt_csum" {
			name = "uninit_bg"
		}
		kind, bit, ok := layout.ParseFeature(name)
		if !ok {
			return fmt.Errorf("mkfs: unknown feature %q: %w", name, ErrInvalid)
		}
		w := [3]*uint32{compat, ro, incompat}[kind]
		if off {
			*w &^= bit
		} else {
			*w |= bit
		}
	}
	return nil
}

// JournalSize returns mke2fs's default journal size in blocks for a
// filesystem of n blocks (ext2fs_default_journal_size), or 0 when it is
// too small for a journal.
func JournalSize(n uint64) uint64 {
	switch {
	case n < 2048:
		return 0
	case n < 32768:
		return 1024
	case n < 256*1024:
		return 4096
	case n < 512*1024:
		return 8192
	case n < 4096*1024:
		return 16384
	case n < 8192*1024:
		return 32768
	case n < 16384*1024:
		return 65536
	case n < 32768*1024:
		return 131072
	}
	return 262144
}

// OrphanFileBlocks returns mke2fs's orphan file size in blocks
// (ext2fs_default_orphan_file_blocks, capped at the kernel's 8 MiB limit).
func OrphanFileBlocks(n uint64, blockSize int) uint64 {
	b := uint64(512)
	if n < 128*1024 {
		b = 32
	} else if n < 2*1024*1024 {
		b = n / 4096
	}
	return min(b, uint64(8<<20/blockSize))
}

// Inode numbers Format uses.
const (
	lostFoundIno = 11
	orphanIno    = 12
)

// Magic numbers. Part of the on-disk format.
const (
	jbd2Magic          = 0xC03B3998 // journal_header_t.h_magic
	jbd2SuperblockV2   = 4          // h_blocktype
	jbd2Incompat64Bit  = 0x2
	jbd2IncompatCsumV3 = 0x10
	jbd2CsumCrc32c     = 4
	extentMagic        = 0xF30A
	defmXattrUser      = 0x4 // s_default_mount_opts: user_xattr
	defmACL            = 0x8 // acl
	hashHalfMD4        = 1
	jnlBackupBlocks    = 1 // s_jnl_backup_type
)

func (o *Options) defaults() error {
	if o.BlockSize == 0 {
		o.BlockSize = 4096
	}
	if o.BlockSize < 1024 || o.BlockSize > 65536 || o.BlockSize&(o.BlockSize-1) != 0 {
		return fmt.Errorf("mkfs: block size %d: want a power of two from 1024 to 65536: %w", o.BlockSize, ErrInvalid)
	}
	if o.InodeSize == 0 {
		o.InodeSize = 256
	}
	if o.InodeSize < 128 || o.InodeSize > o.BlockSize || o.InodeSize&(o.InodeSize-1) != 0 {
		return fmt.Errorf("mkfs: inode size %d: want a power of two from 128 to the block size (%d): %w", o.InodeSize, o.BlockSize, ErrInvalid)
	}
	if o.InodeRatio == 0 {
		o.InodeRatio = 16384
	}
	if o.InodeRatio < 1024 || o.InodeRatio > 64<<20 {
		return fmt.Errorf("mkfs: inode ratio %d: want 1024 to 64 MiB bytes per inode: %w", o.InodeRatio, ErrInvalid)
	}
	if o.ReservedPercent == 0 {
		o.ReservedPercent = 5
	}
	if o.ReservedPercent > 50 {
		return fmt.Errorf("mkfs: reserved %.1f%%: %w", o.ReservedPercent, ErrInvalid)
	}
	if o.FlexBGSize == 0 {
		o.FlexBGSize = 16
	}
	if o.FlexBGSize < 1 || o.FlexBGSize > 1<<15 || o.FlexBGSize&(o.FlexBGSize-1) != 0 {
		return fmt.Errorf("mkfs: flex_bg size %d: %w", o.FlexBGSize, ErrInvalid)
	}
	if len(o.Label) > 16 {
		return fmt.Errorf("mkfs: label %q longer than 16 bytes: %w", o.Label, ErrInvalid)
	}
	if o.MMPUpdateInterval < 0 || o.MMPUpdateInterval > layout.MMPMaxUpdateInterval {
		return fmt.Errorf("mkfs: MMP update interval %d s (at most %d): %w", o.MMPUpdateInterval, layout.MMPMaxUpdateInterval, ErrInvalid)
	}
	if o.JournalBlocks < 0 {
		return fmt.Errorf("mkfs: journal blocks %d: %w", o.JournalBlocks, ErrInvalid)
	}
	if o.Now.IsZero() {
		o.Now = wallclock.Now()
	}
	if o.Rand == nil {
		o.Rand = rand.Reader
	}
	return nil
}

// formatter carries one Format call's state.
type formatter struct {
	dev     blockdev.Device
	o       Options
	sb      *layout.Superblock
	ctx     context.Context // checked between steps and groups
	p       *plan
	seed    uint32
	written uint64 // bytes written, for s_kbytes_written
	now     uint32
	inodes  map[uint32]*layout.Inode
}

// Format creates an ext4 filesystem covering the whole of dev.
func Format(dev blockdev.Device, opts Options) error {
	return FormatContext(context.Background(), dev, opts)
}

// FormatContext is Format that stops when ctx is done, with an error
// wrapping ctx.Err(), between steps and between groups. Before it writes
// anything else it zeroes the primary superblock (and flushes), and it
// writes the primary superblock last, after a flush of everything else: a
// device whose format was cancelled or crashed holds no filesystem.
func FormatContext(ctx context.Context, dev blockdev.Device, opts Options) error {
	f := &formatter{ctx: ctx, dev: dev, o: opts, inodes: map[uint32]*layout.Inode{}}
	if err := f.o.defaults(); err != nil {
		return err
	}
	if err := f.buildSuper(); err != nil {
		return err
	}
	if err := f.cancelled(); err != nil {
		return err
	}
	if err := f.invalidateSuper(); err != nil {
		return err
	}
	if !f.o.NoDiscard {
		if err := dev.Discard(0, dev.Size()); err != nil && !errors.Is(err, ErrUnsupported) {
			return fmt.Errorf("mkfs: discard: %w", err)
		}
	}
	if err := f.cancelled(); err != nil {
		return err
	}
	if err := f.makeFiles(); err != nil {
		return err
	}
	if err := f.makeMMP(); err != nil {
		return err
	}
	return f.writeMetadata()
}

// cancelled returns an error wrapping ctx.Err() once f's context is done.
func (f *formatter) cancelled() error {
	if err := f.ctx.Err(); err != nil {
		return fmt.Errorf("mkfs: cancelled: %w", err)
	}
	return nil
}

// invalidateSuper zeroes the primary superblock and flushes, so that no
// filesystem is found on the device until writeMetadata writes the new one.
func (f *formatter) invalidateSuper() error {
	if _, err := f.dev.WriteAt(make([]byte, layout.SuperblockSize), layout.SuperblockOffset); err != nil {
		return fmt.Errorf("mkfs: clearing the old superblock: %w", err)
	}
	if err := f.dev.Flush(); err != nil {
		return fmt.Errorf("mkfs: flush: %w", err)
	}
	return nil
}

func (f *formatter) buildSuper() error {
	o := &f.o
	c, r, i := uint32(DefaultCompat), uint32(DefaultRoCompat), uint32(DefaultIncompat)
	if err := ApplyFeatures(o.Features, &c, &r, &i); err != nil {
		return err
	}
	if o.FastCommit {
		c |= layout.CompatFastCommit
	}
	if i&layout.IncompatExtents == 0 {
		return fmt.Errorf("mkfs: only extent-mapped filesystems can be created (^extent): %w", ErrUnsupported)
	}
	if r&layout.RoCompatMetadataCsum != 0 {
		r &^= layout.RoCompatGdtCsum
	} else {
		i &^= layout.IncompatCsumSeed
	}
	if o.InodeSize < 256 {
		r &^= layout.RoCompatExtraIsize
	}
	if bad := layout.FeatureNames(c&^supportedCompat, r&^supportedRoCompat, i&^supportedIncompat); len(bad) > 0 {
		return fmt.Errorf("mkfs: features %s: %w", strings.Join(bad, ","), ErrUnsupported)
	}
	bs := uint64(o.BlockSize)
	devBlocks := uint64(f.dev.Size()) / bs
	sb := &layout.Superblock{
		Magic: layout.SuperMagic, RevLevel: 1, FirstIno: layout.GoodOldFirstIno,
		InodeSize: uint16(o.InodeSize), LogBlockSize: uint32(bits.TrailingZeros64(bs) - 10),
		FeatureCompat: c, FeatureRoCompat: r, FeatureIncompat: i,
		State: layout.StateValid, Errors: 1, MaxMntCount: -1,
		Flags: layout.FlagsSignedHash, DefHashVersion: hashHalfMD4,
		DefaultMountOpts: defmXattrUser | defmACL,
	}
	sb.LogClusterSize = sb.LogBlockSize
	if bs == 1024 {
		sb.FirstDataBlock = 1
	}
	sb.BlocksPerGroup = uint32(min(8*bs, 65528))
	sb.ClustersPerGroup = sb.BlocksPerGroup
	if sb.Is64Bit() {
		sb.DescSize = layout.DescSize64
	}
	if sb.HasIncompat(layout.IncompatFlexBG) {
		sb.LogGroupsPerFlex = uint8(bits.TrailingZeros(uint(o.FlexBGSize)))
	}
	if sb.HasRoCompat(layout.RoCompatExtraIsize) {
		sb.MinExtraIsize, sb.WantExtraIsize = 32, 32
	}
	now := o.Now.Unix()
	f.now = uint32(now)
	sb.Wtime, sb.Lastcheck, sb.MkfsTime = now, now, now
	if err := f.random(sb.UUID[:], o.UUID); err != nil {
		return err
	}
	var hs [16]byte
	if err := f.random(hs[:], o.HashSeed); err != nil {
		return err
	}
	for k := range sb.HashSeed {
		sb.HashSeed[k] = binary.LittleEndian.Uint32(hs[4*k:])
	}
	copy(sb.VolumeName[:], o.Label)
	if sb.MetadataCsum() {
		sb.ChecksumType = layout.ChecksumTypeCrc32c
		if sb.HasIncompat(layout.IncompatCsumSeed) {
			sb.ChecksumSeed = crc32c.Kernel(^uint32(0), sb.UUID[:])
		}
	}
	p, err := newPlan(sb, o, devBlocks)
	if err != nil {
		return err
	}
	f.sb, f.p, f.seed = sb, p, sb.CsumSeed()
	sb.RBlocksCount = uint64(float64(sb.BlocksCount) * max(o.ReservedPercent, 0) / 100)
	// mke2fs drops the journal (and with it the orphan file) when the
	// filesystem is too small for one.
	if sb.HasCompat(layout.CompatHasJournal) && o.JournalBlocks == 0 && JournalSize(sb.BlocksCount) == 0 {
		sb.FeatureCompat &^= layout.CompatHasJournal
	}
	if !sb.HasCompat(layout.CompatHasJournal) {
		sb.FeatureCompat &^= layout.CompatOrphanFile
	}
	return nil
}

func (f *formatter) random(dst []byte, fixed [16]byte) error {
	if fixed != ([16]byte{}) {
		copy(dst, fixed[:])
		return nil
	}
	if _, err := io.ReadFull(f.o.Rand, dst); err != nil {
		return fmt.Errorf("mkfs: random UUID: %w", err)
	}
	dst[6] = dst[6]&0x0F | 0x40 // version 4
	dst[8] = dst[8]&0x3F | 0x80 // RFC 4122 variant
	return nil
}

// write writes b at block blk (plus byte offset off) and counts it.
func (f *formatter) write(b []byte, blk uint64, off int) error {
	pos := int64(blk*f.p.bs) + int64(off)
	if _, err := f.dev.WriteAt(b, pos); err != nil {
		return fmt.Errorf("mkfs: write block %d: %w", blk, err)
	}
	f.written += uint64(len(b))
	return nil
}
