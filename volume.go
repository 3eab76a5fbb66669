package ext4io

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/internal/errs"
	"github.com/ext4io/ext4io/layout"
)

// Options configure Open.
type Options struct {
	// NoRecovery opens a volume whose journal needs recovery without
	// replaying it (like mount -o norecovery): reads may see stale
	// metadata. Without it such a volume is refused with ErrUnsupported
	// until journal recovery lands in ext4io.
	NoRecovery bool
	// SkipChecksums disables metadata checksum verification on read (for
	// salvaging data from damaged images). Structural checks stay on.
	SkipChecksums bool
}

// Volume is an ext4 filesystem on a block device. It is read-only for now.
//
// A Volume is safe for concurrent use by multiple goroutines.
type Volume struct {
	dev      blockdev.Device
	closeDev bool // Close closes dev (the volume opened it)
	opts     Options

	// Immutable after Open.
	sb       *layout.Superblock
	bs       int
	groups   []*layout.GroupDesc
	csumSeed uint32
	csum     bool // metadata_csum

	closed atomic.Bool
	mu     sync.Mutex // guards nothing yet beyond Close ordering
}

// Open opens the ext4 filesystem on dev. It validates the superblock and
// every group descriptor and refuses incompat features ext4io cannot read,
// naming them (ErrUnsupported). The caller keeps ownership of dev.
func Open(dev blockdev.Device, opts Options) (*Volume, error) {
	buf := make([]byte, layout.SuperblockSize)
	if _, err := readFull(dev, buf, layout.SuperblockOffset); err != nil {
		return nil, fmt.Errorf("ext4io: reading superblock: %w", err)
	}
	sb, err := layout.DecodeSuperblock(buf)
	if err != nil {
		if opts.SkipChecksums && sb == nil {
			return nil, err
		}
		return nil, err
	}
	if bad := layout.UnsupportedIncompat(sb.FeatureIncompat, layout.IncompatSupportedRead); len(bad) > 0 {
		return nil, fmt.Errorf("ext4io: incompat feature %s: %w", strings.Join(bad, ","), ErrUnsupported)
	}
	if sb.HasIncompat(layout.IncompatRecover) && !opts.NoRecovery {
		return nil, fmt.Errorf("ext4io: journal needs recovery (needs_recovery set); replay it with e2fsck or open with NoRecovery: %w", ErrUnsupported)
	}
	v := &Volume{dev: dev, opts: opts, sb: sb, bs: sb.BlockSize(), csumSeed: sb.CsumSeed(), csum: sb.MetadataCsum()}
	if size := dev.Size(); uint64(size)/uint64(v.bs) < sb.BlocksCount {
		return nil, errs.Corruptf("superblock", 0, -1, "filesystem has %d blocks of %d bytes but the device holds %d bytes", sb.BlocksCount, v.bs, size)
	}
	if err := v.loadGroups(); err != nil {
		return nil, err
	}
	return v, nil
}

// OpenImage opens the image file (or block device) at path read-only with
// the file backend. Close closes the file too.
func OpenImage(path string, opts Options) (*Volume, error) {
	dev, err := blockdev.OpenFile(path, true)
	if err != nil {
		return nil, err
	}
	v, err := Open(dev, opts)
	if err != nil {
		dev.Close()
		return nil, err
	}
	v.closeDev = true
	return v, nil
}

func (v *Volume) loadGroups() error {
	n := v.sb.GroupCount()
	ds := v.sb.DescriptorSize()
	v.groups = make([]*layout.GroupDesc, n)
	var blk uint64 = ^uint64(0)
	buf := make([]byte, v.bs)
	for g := uint64(0); g < n; g++ {
		b, off := v.sb.DescriptorLocation(g)
		if b != blk {
			if b >= v.sb.BlocksCount {
				return errs.Corruptf("group descriptor table", b, -1, "group %d: descriptor block beyond filesystem end", g)
			}
			if err := v.readBlock(b, buf); err != nil {
				return fmt.Errorf("ext4io: reading group descriptors: %w", err)
			}
			blk = b
		}
		gd, err := layout.DecodeGroupDesc(buf[off:off+ds], ds)
		if err != nil {
			return err
		}
		if v.opts.SkipChecksums {
			save := gd.Checksum
			gd.Checksum = layout.GroupDescChecksum(v.sb, uint32(g), gd.Raw)
			err = gd.Verify(v.sb, uint32(g), b)
			gd.Checksum = save
		} else {
			err = gd.Verify(v.sb, uint32(g), b)
		}
		if err != nil {
			return err
		}
		v.groups[g] = gd
	}
	return nil
}

// Superblock returns a copy of the superblock as read at Open.
func (v *Volume) Superblock() layout.Superblock { return *v.sb }

// BlockSize returns the filesystem block size in bytes.
func (v *Volume) BlockSize() int { return v.bs }

// Group returns a copy of group g's descriptor.
func (v *Volume) Group(g int) (layout.GroupDesc, error) {
	if g < 0 || g >= len(v.groups) {
		return layout.GroupDesc{}, fmt.Errorf("ext4io: group %d of %d: %w", g, len(v.groups), ErrInvalid)
	}
	return *v.groups[g], nil
}

// Close releases the volume (and the device, if OpenImage opened it).
// It is safe to call more than once.
func (v *Volume) Close() error {
	if v.closed.Swap(true) {
		return nil
	}
	if v.closeDev {
		return v.dev.Close()
	}
	return nil
}

func (v *Volume) checkOpen() error {
	if v.closed.Load() {
		return fmt.Errorf("ext4io: volume: %w", ErrClosed)
	}
	return nil
}

// readBlock reads filesystem block blk into buf (len(buf) == block size).
func (v *Volume) readBlock(blk uint64, buf []byte) error {
	if blk >= v.sb.BlocksCount {
		return errs.Corruptf("block pointer", blk, -1, "block %d beyond filesystem end %d", blk, v.sb.BlocksCount)
	}
	_, err := readFull(v.dev, buf, int64(blk)*int64(v.bs))
	return err
}

// readFull reads len(buf) bytes at off; a short read is an I/O error.
func readFull(dev blockdev.Device, buf []byte, off int64) (int, error) {
	n, err := dev.ReadAt(buf, off)
	if n == len(buf) {
		return n, nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = fmt.Errorf("ext4io: short read of %d bytes at %d (device size %d): %w", len(buf), off, dev.Size(), ErrIO)
	} else if !errors.Is(err, ErrIO) {
		err = fmt.Errorf("ext4io: read at %d: %w: %w", off, ErrIO, err)
	}
	return n, err
}
