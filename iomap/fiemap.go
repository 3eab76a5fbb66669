package iomap

import "fmt"

// ExtentFlags are fiemap extent flags; the values are the kernel's
// FIEMAP_EXTENT_* (part of the Linux FS_IOC_FIEMAP ABI; must not change).
type ExtentFlags uint32

const (
	ExtentLast       ExtentFlags = 0x00000001 // last extent reported
	ExtentUnknown    ExtentFlags = 0x00000002 // location unknown (no address yet)
	ExtentDelalloc   ExtentFlags = 0x00000004 // delayed allocation; also sets Unknown
	ExtentNotAligned ExtentFlags = 0x00000100 // not block aligned (inline)
	ExtentDataInline ExtentFlags = 0x00000200 // data stored with metadata
	ExtentUnwritten  ExtentFlags = 0x00000800 // allocated, reads as zeroes
	ExtentMerged     ExtentFlags = 0x00001000 // several mappings merged into one
	ExtentShared     ExtentFlags = 0x00002000 // blocks shared with another file
)

// Extent is one fiemap record, mirroring struct fiemap_extent; offsets and
// lengths in bytes. Physical is 0 when there is no device address.
type Extent struct {
	Logical, Physical, Length int64
	Flags                     ExtentFlags
}

func (e Extent) String() string {
	return fmt.Sprintf("[%d,+%d)@%d f=%#x", e.Logical, e.Length, e.Physical, e.Flags)
}

// FiemapOptions configure Fiemap.
type FiemapOptions struct {
	// Merge coalesces consecutive mappings of the same type and flags
	// whose device addresses are contiguous (delalloc: logically
	// adjacent), reporting ExtentMerged on results made of several
	// mappings. Off, every mapping is one extent, as Linux's iomap_fiemap
	// reports (ExtentMerged then only comes from MapMerged).
	Merge bool
	// Counters, when set, counts the walk's Begin and End calls; nil
	// counts nothing.
	Counters *CounterSet
}

func extentOf(m Mapping) Extent {
	e := Extent{Logical: m.Offset, Length: m.Length}
	switch m.Type {
	case Delalloc:
		e.Flags |= ExtentDelalloc | ExtentUnknown
	case Unwritten:
		e.Flags |= ExtentUnwritten
	case Inline:
		e.Flags |= ExtentDataInline | ExtentNotAligned
	}
	if m.Type == Mapped || m.Type == Unwritten {
		e.Physical = m.Addr
	}
	if m.Flags&MapMerged != 0 {
		e.Flags |= ExtentMerged
	}
	if m.Flags&MapShared != 0 {
		e.Flags |= ExtentShared
	}
	return e
}

// Fiemap reports the extents of [off, off+length) to fn in file order,
// mapping with Begin(Report) (iomap_fiemap). Holes are skipped; each
// reported extent is a whole mapping (it may start before off or end after
// off+length); the final one carries ExtentLast. An error from fn stops
// the walk and is returned.
func Fiemap(ops Ops, off, length int64, opt FiemapOptions, fn func(Extent) error) error {
	var prev Extent
	var prevType Type
	have := false
	_, err := iter(ops, off, length, Report, opt.Counters.first(), func(m Mapping, pos, n int64) (int64, error) {
		if m.Type == Hole {
			return n, nil
		}
		e := extentOf(m)
		if have && opt.Merge && prevType == m.Type && prev.Logical+prev.Length == e.Logical &&
			prev.Flags&^ExtentMerged == e.Flags&^ExtentMerged &&
			(m.Type == Delalloc || prev.Physical+prev.Length == e.Physical) {
			prev.Length += e.Length
			prev.Flags |= ExtentMerged
			return n, nil
		}
		if have {
			if err := fn(prev); err != nil {
				return 0, err
			}
		}
		prev, prevType, have = e, m.Type, true
		return n, nil
	})
	if err != nil {
		return err
	}
	if have {
		prev.Flags |= ExtentLast
		return fn(prev)
	}
	return nil
}
