package iomap

import (
	"errors"
	"fmt"
)

// SeekOptions configure SeekData and SeekHole.
type SeekOptions struct {
	// Present reports whether the page-cache page holding a file offset
	// holds data (uptodate or dirty), such as PageCache.Present. Unwritten
	// ranges count as data exactly where Present says so (Linux's
	// page_cache_seek_hole_data). Nil: unwritten ranges are holes.
	Present func(off int64) bool
	// PageSize is the granularity of Present (PageCache.PageSize); required
	// with Present.
	PageSize int64
	// Counters, when set, counts the seek's Begin and End calls; nil
	// counts nothing.
	Counters *CounterSet
}

// counters returns the stripe o counts on, nil for none.
func (o *SeekOptions) counters() *atomicCounters {
	if o == nil {
		return nil
	}
	return o.Counters.first()
}

// errFound stops a seek iteration.
var errFound = errors.New("iomap: seek found")

func checkSeek(what string, off, size int64, opt *SeekOptions) error {
	if size < 0 {
		return fmt.Errorf("iomap: %s: negative size %d: %w", what, size, ErrInvalid)
	}
	if opt != nil && opt.Present != nil && (opt.PageSize <= 0 || opt.PageSize&(opt.PageSize-1) != 0) {
		return fmt.Errorf("iomap: %s: page size %d: %w", what, opt.PageSize, ErrInvalid)
	}
	if off < 0 || off >= size {
		return fmt.Errorf("iomap: %s at %d in file of %d bytes: %w", what, off, size, ErrNoData)
	}
	return nil
}

// scanPages returns the first offset in [pos, pos+n) whose page presence
// equals want, or -1.
func scanPages(opt *SeekOptions, pos, n int64, want bool) int64 {
	for q := pos; q < pos+n; q = (q | (opt.PageSize - 1)) + 1 {
		if opt.Present(q) == want {
			return q
		}
	}
	return -1
}

// SeekHole returns the first offset at or after off that is in a hole,
// mapping [off, size) with Begin(Report) (iomap_seek_hole): Hole ranges,
// and Unwritten ranges without cached data, are holes; the end of file
// counts as a hole, so the result is at most size. An off outside
// [0, size) is ErrNoData (ENXIO).
func SeekHole(ops Ops, off, size int64, opt *SeekOptions) (int64, error) {
	if err := checkSeek("seek hole", off, size, opt); err != nil {
		return 0, err
	}
	found := int64(-1)
	_, err := iter(ops, off, size-off, Report, opt.counters(), func(m Mapping, pos, n int64) (int64, error) {
		switch m.Type {
		case Hole:
			found = pos
		case Unwritten:
			if opt == nil || opt.Present == nil {
				found = pos
			} else {
				found = scanPages(opt, pos, n, false)
			}
		}
		if found >= 0 {
			return 0, errFound
		}
		return n, nil
	})
	if found >= 0 {
		return found, nil
	}
	if err != nil {
		return 0, err
	}
	return size, nil
}

// SeekData returns the first offset at or after off that holds data,
// mapping [off, size) with Begin(Report) (iomap_seek_data): Mapped,
// Delalloc and Inline ranges are data, Unwritten ranges are data only
// where opt.Present says so. With no data before size, or an off outside
// [0, size), it returns ErrNoData (ENXIO).
func SeekData(ops Ops, off, size int64, opt *SeekOptions) (int64, error) {
	if err := checkSeek("seek data", off, size, opt); err != nil {
		return 0, err
	}
	found := int64(-1)
	_, err := iter(ops, off, size-off, Report, opt.counters(), func(m Mapping, pos, n int64) (int64, error) {
		switch m.Type {
		case Hole:
		case Unwritten:
			if opt != nil && opt.Present != nil {
				found = scanPages(opt, pos, n, true)
			}
		default:
			found = pos
		}
		if found >= 0 {
			return 0, errFound
		}
		return n, nil
	})
	if found >= 0 {
		return found, nil
	}
	if err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("iomap: seek data from %d in file of %d bytes: %w", off, size, ErrNoData)
}
