package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/blockdev/nbd"
	"github.com/ext4io/ext4io/layout"
)

// cmdMkfs formats IMAGE. Like mkfs.ext4 it does not destroy a file system
// by accident: an IMAGE that already holds ext4 is refused unless -F. A
// mkfs that fails leaves no new file behind.
func cmdMkfs(args []string, w io.Writer) (err error) {
	fs := newFlags("mkfs")
	bs := fs.Int("b", 4096, "block size in bytes: 1024, 2048, 4096, ... 65536")
	features := fs.String("O", "", "features to add, or with ^ to remove, comma-separated, as mkfs.ext4 -O")
	label := fs.String("L", "", "volume label")
	isize := fs.Int("I", 0, "inode size in bytes (0: the default)")
	srcDir := fs.String("d", "", "copy this directory tree into the new filesystem")
	force := fs.Bool("F", false, "overwrite an existing ext4 file system")
	args, err = parseArgs(fs, args, 2, 2)
	if err != nil {
		return err
	}
	img := args[0]
	size, err := parseSize(args[1])
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	var export blockdev.Device // IMAGE is an NBD URI: the export's first SIZE bytes
	if nbd.IsURI(img) {
		d, err := nbd.Open(img, nbd.Options{})
		if err != nil {
			return err
		}
		defer d.Close()
		if size > d.Size() {
			return fmt.Errorf("%s: SIZE %d is larger than the export's %d bytes: %w", img, size, d.Size(), ext4io.ErrInvalid)
		}
		export = sizedDevice{d, size}
	}
	created := false
	if export == nil {
		_, serr := os.Stat(img)
		created = errors.Is(serr, os.ErrNotExist)
	}
	if !created && !*force {
		what, ok := existingExt4(img)
		if export != nil {
			what, ok = existingExt4At(export)
		}
		if ok {
			return fmt.Errorf("%s already contains an ext4 file system (%s); use -F to overwrite: %w", img, what, ext4io.ErrExist)
		}
	}
	opts := ext4io.FormatOptions{BlockSize: *bs, Features: *features, Label: *label, InodeSize: *isize}
	var tree *srcTree
	if *srcDir != "" {
		// Walk and validate the tree, and format a scratch device of the
		// same size to learn the options are good and the inodes enough,
		// before the image is touched.
		if tree, err = mkfsPlan(img, *srcDir, size, opts); err != nil {
			return err
		}
	} else if _, err := scratchFormat(size, opts); err != nil {
		// Bad options are refused before IMAGE is created or grown.
		return err
	}
	// From here an interrupt stops the format or the import (checked
	// between groups and between entries), which then fails as for any
	// error: a new image is removed.
	ctx, stop := interruptible()
	defer stop()
	if !created && export == nil {
		// Refuse before CreateFile grows the file: not under a writer,
		// not while Linux has it mounted (Format claims it again).
		if err := claimable(img); err != nil {
			return err
		}
	}
	if created {
		defer func() {
			if err != nil {
				os.Remove(img) // runs after dev.Close (deferred later)
			}
		}()
	}
	dev := export
	if dev == nil {
		f, err := blockdev.CreateFile(img, size)
		if err != nil {
			return err
		}
		defer f.Close()
		dev = f
	}
	if err := ext4io.FormatContext(ctx, dev, opts); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("interrupted: %w: %w", context.Cause(ctx), err)
		}
		if created {
			return fmt.Errorf("%w (%s removed)", err, img)
		}
		return err
	}
	if tree != nil {
		// The import writes unjournaled and marks the image clean at
		// Close, as mkfs.ext4 -d does (Tuning.NoJournal): a failed or
		// interrupted mkfs leaves no filesystem worth keeping anyway, and
		// the journal would write every metadata block twice and flush
		// once per commit. No page cache: each file is written whole, in
		// one call per MiB, so buffering gains nothing, and a cache full
		// of dirty pages makes every new page search it for a victim.
		vopts := ext4io.Options{Writable: true, PageCacheBytes: -1, InodeCache: mkfsInodeCache, CacheBudget: 4 << 20, Tuning: ext4io.Tuning{NoJournal: true}}
		v, err := ext4io.Open(dev, vopts)
		if err != nil {
			return err
		}
		im := newImporter(v)
		im.lostFound = true
		im.ctx = ctx
		// The volume's inode cache (Options.InodeCache) and extent-status
		// cache (CacheBudget: the import writes each file once and
		// rarely maps it again) bound what the import keeps in memory,
		// however large the tree.
		ierr := im.importTree(tree, "/", true)
		cerr := v.Close()
		if ierr != nil || cerr != nil {
			if created {
				return fmt.Errorf("importing %s: %w (%s removed)", *srcDir, errors.Join(ierr, cerr), img)
			}
			state := "a new ext4 file system holding part of the tree (e2fsck-clean); its old contents are gone"
			if cerr != nil {
				state = "a new ext4 file system that may be inconsistent (run e2fsck); its old contents are gone"
			}
			return fmt.Errorf("importing %s: %w\n%s now holds %s", *srcDir, errors.Join(ierr, cerr), img, state)
		}
	}
	if err := dev.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "formatted %s: %d bytes, %d-byte blocks\n", img, size, *bs)
	if tree != nil {
		fmt.Fprintf(w, "copied %s: %d inodes, %d bytes of regular files\n", *srcDir, tree.inodes, tree.bytes)
	}
	return nil
}

// mkfsInodeCache is the import's Options.InodeCache: it holds the
// directories being filled and few files at a time, so a small cache
// serves it; a variable for tests.
var mkfsInodeCache = 1024

// mkfsPlan walks and validates the source tree src for an image img of
// size bytes formatted with opts, and checks on a scratch device that
// opts are good and the image has inodes enough for it.
func mkfsPlan(img, src string, size int64, opts ext4io.FormatOptions) (*srcTree, error) {
	sb, err := scratchFormat(size, opts)
	if err != nil {
		return nil, err
	}
	lim := srcLimits{blockSize: sb.BlockSize(), inodeSize: int(sb.InodeSize), mkfs: true}
	if fi, err := os.Stat(img); err == nil {
		if id, _, _, ok := hostID(fi); ok {
			lim.skip, lim.hasSkip = id, true
		}
	} else if fi, err := os.Stat(filepath.Dir(img)); err == nil {
		if id, _, _, ok := hostID(fi); ok {
			lim.imgDir, lim.imgName, lim.hasImgDir = id, filepath.Base(img), true
		}
	}
	tree, err := walkSource(src, lim, false)
	if err != nil {
		return nil, err
	}
	if uint64(tree.inodes) > uint64(sb.FreeInodesCount) {
		return nil, fmt.Errorf("%s needs %d inodes, a %d-byte image formatted so has %d free: nothing written: %w",
			src, tree.inodes, size, sb.FreeInodesCount, ext4io.ErrNoSpace)
	}
	return tree, nil
}

// scratchFormat formats a scratch device of size bytes with opts, which
// checks the options, and returns the superblock it got.
func scratchFormat(size int64, opts ext4io.FormatOptions) (*layout.Superblock, error) {
	scratch := superblockOnly{memdev.New(size)}
	opts.NoDiscard = true
	if err := ext4io.Format(scratch, opts); err != nil {
		return nil, err
	}
	buf := make([]byte, layout.SuperblockSize)
	if _, err := scratch.ReadAt(buf, layout.SuperblockOffset); err != nil {
		return nil, err
	}
	return layout.DecodeSuperblock(buf)
}

// superblockOnly is the scratch device scratchFormat formats: it keeps what
// is written to its first 64 KiB (the primary superblock) and drops the
// rest, which internal/mkfs never reads back; formatting it costs a few
// milliseconds and kilobytes for any size.
type superblockOnly struct{ *memdev.Device }

const superblockOnlyKeep = 64 << 10

func (d superblockOnly) WriteAt(p []byte, off int64) (int, error) {
	if off < superblockOnlyKeep {
		if _, err := d.Device.WriteAt(p[:min(int64(len(p)), superblockOnlyKeep-off)], off); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// parseSize parses sizes like 4096, 64M, 2G, 1T (binary units), more
// than 0.
func parseSize(s string) (int64, error) { return parseSizeMin(s, 1) }

// parseSize0 is parseSize that also accepts 0.
func parseSize0(s string) (int64, error) { return parseSizeMin(s, 0) }

func parseSizeMin(s string, least int64) (int64, error) {
	mult := int64(1)
	u := strings.ToUpper(s)
	for _, suf := range []struct {
		s string
		m int64
	}{{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"P", 1 << 50}} {
		if strings.HasSuffix(u, suf.s) || strings.HasSuffix(u, suf.s+"B") || strings.HasSuffix(u, suf.s+"IB") {
			mult = suf.m
			u = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(u, "IB"), "B"), suf.s)
			break
		}
	}
	n, err := strconv.ParseInt(u, 10, 64)
	if err != nil || n < least || n > (1<<62)/mult {
		want := "positive"
		if least == 0 {
			want = "non-negative"
		}
		return 0, fmt.Errorf("bad size %q: want a %s number with an optional K, M, G, T or P suffix", s, want)
	}
	return n * mult, nil
}

// sizedDevice is the first size bytes of a Device: mkfs formats SIZE
// bytes of an NBD export, as mkfs.ext4 formats the start of a block
// device given a size.
type sizedDevice struct {
	blockdev.Device
	size int64
}

func (d sizedDevice) Size() int64 { return d.size }

// existingExt4 reports whether img holds an ext4 superblock (the magic),
// and describes it: label, creation time, size.
func existingExt4(img string) (string, bool) {
	if !maybeImage(img) {
		return "", false
	}
	f, err := os.Open(img)
	if err != nil {
		return "", false
	}
	defer f.Close()
	return existingExt4At(f)
}

// existingExt4At is existingExt4 of the image r reads.
func existingExt4At(r io.ReaderAt) (string, bool) {
	buf := make([]byte, layout.SuperblockSize)
	if _, err := r.ReadAt(buf, layout.SuperblockOffset); err != nil {
		return "", false
	}
	sb, err := layout.DecodeSuperblock(buf)
	if errors.Is(err, ext4io.ErrNotExt4) {
		return "", false
	}
	if err != nil {
		return "damaged superblock: " + err.Error(), true
	}
	var parts []string
	if l := sb.Label(); l != "" {
		parts = append(parts, fmt.Sprintf("label %q", l))
	}
	if sb.MkfsTime != 0 {
		parts = append(parts, "created "+time.Unix(sb.MkfsTime, 0).UTC().Format(time.DateTime)+" UTC")
	}
	parts = append(parts, fmt.Sprintf("%d blocks of %d bytes", sb.BlocksCount, sb.BlockSize()))
	return strings.Join(parts, ", "), true
}

// claimable checks that img could be claimed by a writer now
// (blockdev.Claim): no other writer holds it and it is not mounted.
func claimable(img string) error {
	d, err := blockdev.OpenFile(img, false)
	if err != nil {
		return err
	}
	defer d.Close()
	release, err := blockdev.Claim(d)
	if err != nil {
		return err
	}
	release()
	return nil
}
