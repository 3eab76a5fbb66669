package bench

import (
	"fmt"
	"path/filepath"

	"github.com/ext4io/ext4io/blockdev"
)

// An atomic page batch moves its pages to free blocks of the filesystem.
// In a sparse image file (the temporary image, in /dev/shm or on a disk)
// the free blocks a fresh filesystem has never written are holes, and a
// write into a hole pays the host's allocation of it, a multiple of the
// copy of the data (docs/bench.md and docs/performance.md have the
// figures). The doublewrite and plain-page workloads write in place, over
// blocks the file's preparation wrote, and raw over its written window,
// so only the atomic workloads would pay it, by how much of the image
// earlier workloads had written. fsync-small's new files take free blocks
// too, and each file's data write into a hole makes the host allocate it
// and the next flush commit the host's journal, which Linux's loop backing
// file (written whole) and a disk never pay; raw's region, discarded for
// fresh-file workloads, is written whole first for it (prepareRaw). The
// same holds for the journal's blocks,
// which the format zeroes: the file backend zeroes by punching holes where
// the host filesystem has no zero-range (tmpfs), so the log's first pass
// after each format would write into holes. Before the format of each
// page-batch workload and of fsync-small the bench therefore writes its
// fill pattern into the holes of the filesystem's window (warmFree) and
// formats through zeroWrites, as a disk's blocks all exist; every phase
// counts the bytes by which the image file's allocation grew
// (Measure.ImageGrowth), which shows whether a side still wrote into
// holes.

// imageState is what the bench knows of a sparse image file: where it is,
// to find its holes and its allocated size.
type imageState struct {
	path string // the image file; "" when the backing has no holes (a block device, memory, NBD)
}

// allocated returns the image file's allocated bytes; ok is false when
// they cannot be read (no file, or a platform without st_blocks).
func (s imageState) allocated() (n int64, ok bool) {
	if s.path == "" {
		return 0, false
	}
	return allocatedBytes(s.path)
}

// hostFree returns the free bytes of the host filesystem holding dir
// (a variable for the tests).
var hostFree = freeBytes

// warmFree writes the fill pattern into the holes of the filesystem's
// window before a page-batch workload formats it (see above), and returns
// the bytes it wrote. Data blocks stay written across formats (the bench
// formats without discarding); the holes a format or a write-zeroes file
// punched since the last call are filled again. Holes larger than half
// the host filesystem's free space are left (and logged): a large sparse
// --image, or a --size the temporary image's free-space rule did not
// choose, would otherwise fill the host's disk; the phases' holes KiB
// then show what the workloads wrote into them.
func (r *benchRun) warmFree() (int64, error) {
	holes, err := fileHoles(r.image.path, 0, r.fsDev.Size())
	if err != nil {
		return 0, fmt.Errorf("finding the image's holes: %w", err)
	}
	var total int64
	for _, h := range holes {
		total += h[1] - h[0]
	}
	if free, err := hostFree(filepath.Dir(r.image.path)); err == nil && total > free/2 {
		if r.cfg.Log != nil {
			fmt.Fprintf(r.cfg.Log, "not filling the image's %d MiB of holes: the host has %d MiB free (page batches and fsync-small may write into holes)\n", total>>20, free>>20)
		}
		return 0, nil
	}
	buf := pattern(1<<20, 0x5a)
	var n int64
	for _, h := range holes {
		for off := h[0]; off < h[1]; off += int64(len(buf)) {
			c := min(int64(len(buf)), h[1]-off)
			if _, err := r.fsDev.WriteAt(buf[:c], off); err != nil {
				return n, err
			}
			n += c
		}
	}
	if n == 0 {
		return 0, nil
	}
	return n, r.fsDev.Flush()
}

// warms reports whether w's preparation fills the image's holes
// (warmFree) and formats through zeroWrites: a page-batch or small-file
// fsync workload on an image file, unless the config keeps the holes.
func (r *benchRun) warms(w workload) bool {
	return (w.Op == opPageBatch || w.Op == opSmallFsync) && r.image.path != "" && !r.cfg.keepHoles
}

// formatDev is the device w's format writes through: zeroWrites when
// warms(w), so that the format does not punch new holes.
func (r *benchRun) formatDev(w workload) blockdev.Device {
	if !r.warms(w) {
		return r.fsDev
	}
	return zeroWrites{r.fsDev}
}

// zeroWrites is a Device whose ZeroOut writes zeroes, which leaves the
// range allocated in a sparse image file, as a disk's write-zeroes leaves
// its blocks.
type zeroWrites struct{ blockdev.Device }

func (z zeroWrites) ZeroOut(off, n int64) error { return blockdev.WriteZeroes(z.Device, off, n) }
