package ext4io

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/internal/mkfs"
)

// FormatOptions configure Format. The zero value gives modern mkfs.ext4's
// defaults: 4 KiB blocks, 256-byte inodes, one inode per 16 KiB, 5%
// reserved, and the features extent, 64bit, flex_bg, metadata_csum,
// metadata_csum_seed, orphan_file, dir_index, filetype, ext_attr,
// sparse_super, large_file, huge_file, dir_nlink, extra_isize and
// has_journal. Features turns them off or on by e2fsprogs name
// ("^metadata_csum,^64bit"); "mmp" adds multiple mount protection (an MMP
// block, updated every MMPUpdateInterval seconds by whoever writes the
// filesystem).
type FormatOptions struct {
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
	// File.Sync logs eligible changes there as fast commits (fcwrite.go).
	FastCommit bool
	NoDiscard  bool      // do not discard the device first
	Now        time.Time // zero: time.Now()
	Rand       io.Reader // randomness for UUIDs; nil: crypto/rand
}

// Format creates an empty ext4 filesystem on dev: superblock and backups,
// group descriptors, bitmaps, the root directory, lost+found, an empty
// jbd2 journal and the orphan file. Only metadata is written (inode tables
// are initialised lazily, as with mkfs.ext4's lazy_itable_init), so
// formatting a sparse multi-TiB image takes well under a second.
// Unsupported feature requests fail with ErrUnsupported and bad options with
// ErrInvalid; the device is then untouched.
func Format(dev blockdev.Device, opts FormatOptions) error {
	return FormatContext(context.Background(), dev, opts)
}

// FormatContext is Format that stops when ctx is done, with an error
// wrapping ctx.Err(), between the steps that write metadata (group by
// group). Format invalidates the device's primary superblock before it
// writes anything else and writes it last, so a cancelled (or crashed)
// Format leaves a device that Open refuses with ErrNotExt4, never a
// mixture of the old filesystem and the new one.
func FormatContext(ctx context.Context, dev blockdev.Device, opts FormatOptions) error {
	if dev == nil {
		return fmt.Errorf("ext4io: format: no device: %w", ErrInvalid)
	}
	release, err := blockdev.Claim(dev) // one writer: not beside a writable Volume, nor mounted
	if err != nil {
		return fmt.Errorf("ext4io: format: %w", err)
	}
	defer release()
	return mkfs.FormatContext(ctx, dev, mkfs.Options(opts)) // the same fields: a change to either fails to compile
}
