package ext4io

import (
	"fmt"
	"io/fs"
	"math"

	"github.com/ext4io/ext4io/iomap"
)

// ReportOps returns the file's report mapping operations, ext4's
// ext4_iomap_report_ops: Begin maps a range for fiemap and
// SEEK_DATA/SEEK_HOLE from the extent-status cache and the extent tree,
// changing nothing. Begin takes the inode lock shared for the lookup, so
// the caller holds no lock (File.LockIO(IomapReport, ...) takes none).
// Maps written blocks as Mapped, preallocated ones as Unwritten, delayed
// (buffered, not yet allocated) ones as Delalloc, the rest as Hole, and
// inline data as Inline; it allocates nothing and serves every range.
func (f *File) ReportOps() iomap.Ops { return reportOps{f} }

type reportOps struct{ f *File }

func (r reportOps) Begin(off, length int64, flags iomap.Flags) (iomap.Mapping, error) {
	f := r.f
	if err := f.checkOpen("map"); err != nil {
		return iomap.Mapping{}, err
	}
	if off < 0 || length < 0 || off > math.MaxInt64-length {
		return iomap.Mapping{}, &fs.PathError{Op: "map", Path: f.name, Err: fmt.Errorf("ext4io: range [%d, +%d): %w", off, length, ErrInvalid)}
	}
	f.n.mu.RLock()
	defer f.n.mu.RUnlock()
	if err := f.closedLocked(); err != nil {
		return iomap.Mapping{}, &fs.PathError{Op: "map", Path: f.name, Err: err}
	}
	if f.m == nil { // inline data or a fast symlink
		size := int64(len(f.inl))
		if off >= size {
			return iomap.Mapping{Offset: off, Length: max(length, 1), Type: iomap.Hole, Addr: iomap.NoAddr}, nil
		}
		return iomap.Mapping{Offset: 0, Length: size, Type: iomap.Inline, Addr: iomap.NoAddr, InlineData: f.inl}, nil
	}
	bs := int64(f.v.bs)
	lblk := uint64(off / bs)
	m, err := f.m.lookup(lblk)
	if err != nil {
		return iomap.Mapping{}, err
	}
	n := int64(m.n)
	if n > (1<<62)/bs {
		n = (1 << 62) / bs
	}
	out := iomap.Mapping{Offset: int64(lblk) * bs, Length: n * bs, Addr: iomap.NoAddr}
	switch m.kind {
	case mapWritten:
		out.Type, out.Addr = iomap.Mapped, int64(m.pblk)*bs
	case mapUnwritten:
		out.Type, out.Addr = iomap.Unwritten, int64(m.pblk)*bs
	case mapDelayed:
		out.Type = iomap.Delalloc
	default:
		out.Type = iomap.Hole
	}
	return out, nil
}

func (reportOps) End(off, length, written int64, flags iomap.Flags, m iomap.Mapping) error {
	return nil
}

// Fiemap reports the file's mappings in [off, off+length) as FIEMAP does:
// written, unwritten (FIEMAP_EXTENT_UNWRITTEN) and inline extents with the
// last one flagged, through iomap's generic fiemap on ReportOps.
func (f *File) Fiemap(off, length int64, fn func(iomap.Extent) error) error {
	if err := f.checkOpen("fiemap"); err != nil {
		return err
	}
	return iomap.Fiemap(f.ReportOps(), off, length, iomap.FiemapOptions{}, fn)
}

// SeekData returns the first offset >= off that holds data (lseek
// SEEK_DATA). Unwritten extents count as holes, as in Linux when no page
// cache pages cover them; past the last data it returns an error matching
// iomap.ErrNoData (ENXIO).
func (f *File) SeekData(off int64) (int64, error) {
	if err := f.checkOpen("seek"); err != nil {
		return 0, err
	}
	return iomap.SeekData(f.ReportOps(), off, f.Size(), nil)
}

// SeekHole returns the first offset >= off in a hole (lseek SEEK_HOLE);
// the end of the file counts as a hole.
func (f *File) SeekHole(off int64) (int64, error) {
	if err := f.checkOpen("seek"); err != nil {
		return 0, err
	}
	return iomap.SeekHole(f.ReportOps(), off, f.Size(), nil)
}
