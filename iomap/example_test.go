package iomap_test

import (
	"errors"
	"fmt"
	"log"
	"math"

	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/iomap"
)

// Iter walks a range mapping by mapping, as iomap_iter does. Funcs turns a
// function into Ops; here a static table maps a 24 KiB file: 8 KiB of
// data at device byte 1 MiB, an 8 KiB hole and 8 KiB preallocated at 2 MiB.
func ExampleIter() {
	table := []iomap.Mapping{
		{Offset: 0, Length: 8192, Type: iomap.Mapped, Addr: 1 << 20},
		{Offset: 8192, Length: 8192, Type: iomap.Hole, Addr: iomap.NoAddr},
		{Offset: 16384, Length: 8192, Type: iomap.Unwritten, Addr: 2 << 20},
	}
	ops := iomap.Funcs{BeginFunc: func(off, length int64, _ iomap.Flags) (iomap.Mapping, error) {
		for _, m := range table {
			if off < m.End() {
				return m, nil
			}
		}
		return iomap.Mapping{Offset: off, Length: length, Type: iomap.Hole, Addr: iomap.NoAddr}, nil
	}}
	total, err := iomap.Iter(ops, 4096, 16384, 0, func(m iomap.Mapping, off, n int64) (int64, error) {
		fmt.Printf("%-9v file [%d, %d)\n", m.Type, off, off+n)
		return n, nil // processed all of it
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("total", total)
	// Output:
	// mapped    file [4096, 8192)
	// hole      file [8192, 16384)
	// unwritten file [16384, 20480)
	// total 16384
}

// Fiemap reports the mappings of a range as FS_IOC_FIEMAP does: holes
// are skipped, unwritten extents flagged, and the last one marked.
func ExampleFiemap() {
	table := []iomap.Mapping{
		{Offset: 0, Length: 8192, Type: iomap.Mapped, Addr: 1 << 20},
		{Offset: 8192, Length: 8192, Type: iomap.Hole, Addr: iomap.NoAddr},
		{Offset: 16384, Length: 8192, Type: iomap.Unwritten, Addr: 2 << 20},
	}
	ops := iomap.Funcs{BeginFunc: func(off, length int64, _ iomap.Flags) (iomap.Mapping, error) {
		for _, m := range table {
			if off < m.End() {
				return m, nil
			}
		}
		return iomap.Mapping{Offset: off, Length: length, Type: iomap.Hole, Addr: iomap.NoAddr}, nil
	}}
	err := iomap.Fiemap(ops, 0, 24576, iomap.FiemapOptions{}, func(e iomap.Extent) error {
		fmt.Printf("logical %5d physical %7d length %d unwritten=%v last=%v\n", e.Logical, e.Physical,
			e.Length, e.Flags&iomap.ExtentUnwritten != 0, e.Flags&iomap.ExtentLast != 0)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// logical     0 physical 1048576 length 8192 unwritten=false last=false
	// logical 16384 physical 2097152 length 8192 unwritten=true last=true
}

// SeekData and SeekHole implement lseek's SEEK_DATA and SEEK_HOLE.
// Unwritten ranges count as holes unless SeekOptions.Present says a
// cached page holds data there.
func ExampleSeekData() {
	table := []iomap.Mapping{
		{Offset: 0, Length: 8192, Type: iomap.Hole, Addr: iomap.NoAddr},
		{Offset: 8192, Length: 8192, Type: iomap.Mapped, Addr: 1 << 20},
		{Offset: 16384, Length: 8192, Type: iomap.Unwritten, Addr: 2 << 20},
	}
	ops := iomap.Funcs{BeginFunc: func(off, length int64, _ iomap.Flags) (iomap.Mapping, error) {
		for _, m := range table {
			if off < m.End() {
				return m, nil
			}
		}
		return iomap.Mapping{Offset: off, Length: length, Type: iomap.Hole, Addr: iomap.NoAddr}, nil
	}}
	const size = 24576
	data, err := iomap.SeekData(ops, 0, size, nil)
	if err != nil {
		log.Fatal(err)
	}
	hole, err := iomap.SeekHole(ops, data, size, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("data at", data, "hole at", hole)
	_, err = iomap.SeekData(ops, hole, size, nil)
	fmt.Println("more data:", !errors.Is(err, iomap.ErrNoData))
	// Output:
	// data at 8192 hole at 16384
	// more data: false
}

// DirectWrite and DirectRead move data between a buffer and the device
// through the mappings of an Ops. This Ops allocates: a direct write into
// a hole gets new unwritten blocks from a bump allocator, and EndIO
// converts them to written once the data is on the device, so a crash in
// between would never expose stale blocks.
func ExampleDirectWrite() {
	const bs = 4096
	dev := memdev.New(4 << 20)
	phys := map[int64]int64{} // file block -> device block
	written := map[int64]bool{}
	next := int64(256) // first free device block

	ops := iomap.Funcs{BeginFunc: func(off, length int64, flags iomap.Flags) (iomap.Mapping, error) {
		b := off / bs
		m := iomap.Mapping{Offset: b * bs, Length: bs, Type: iomap.Hole, Addr: iomap.NoAddr}
		p, ok := phys[b]
		if !ok && flags&iomap.Write != 0 {
			p, ok = next, true
			phys[b], next = next, next+1
			m.Flags |= iomap.MapNew
		}
		if ok {
			m.Type, m.Addr = iomap.Unwritten, p*bs
			if written[b] {
				m.Type = iomap.Mapped
			}
		}
		return m, nil
	}}
	opt := &iomap.DioOptions{BlockSize: bs, EndIO: func(off, n int64, m iomap.Mapping) error {
		for b := off / bs; b < (off+n+bs-1)/bs; b++ {
			written[b] = true
		}
		return nil
	}}

	data := make([]byte, 2*bs)
	copy(data, "two blocks")
	if _, err := iomap.DirectWrite(dev, ops, data, bs, opt); err != nil { // file blocks 1 and 2
		log.Fatal(err)
	}
	got := make([]byte, 4*bs)
	if _, err := iomap.DirectRead(dev, ops, got, 0, opt); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q\n", got[bs:bs+10])
	fmt.Println("file block 1 at device block", phys[1], "written:", written[1])
	// Output:
	// "two blocks"
	// file block 1 at device block 256 written: true
}

// A PageCache holds buffered writes until write-back. Here the file is a
// fixed 1 MiB region of the device (every byte Mapped), like a raw
// partition.
func ExamplePageCache() {
	dev := memdev.New(4 << 20)
	const base, size = 1 << 20, 1 << 20
	ops := iomap.Funcs{BeginFunc: func(off, length int64, _ iomap.Flags) (iomap.Mapping, error) {
		return iomap.Mapping{Offset: 0, Length: size, Type: iomap.Mapped, Addr: base}, nil
	}}
	c, err := iomap.NewPageCache(dev, iomap.PageCacheOptions{PageSize: 4096, MaxPages: 8})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	const key = iomap.Key(1) // the file, e.g. its inode number

	if _, err := iomap.BufferedWrite(c, ops, key, []byte("cached"), 100, size); err != nil {
		log.Fatal(err)
	}
	onDev := make([]byte, 6)
	dev.ReadAt(onDev, base+100)
	pages, dirty := c.Len()
	fmt.Printf("before write-back: %d page(s), %d dirty, device %q\n", pages, dirty, onDev)

	if err := c.Writeback(key, 0, math.MaxInt64); err != nil {
		log.Fatal(err)
	}
	dev.ReadAt(onDev, base+100)
	pages, dirty = c.Len()
	fmt.Printf("after write-back:  %d page(s), %d dirty, device %q\n", pages, dirty, onDev)

	got := make([]byte, 6)
	if _, err := iomap.BufferedRead(c, ops, key, got, 100, size); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("read %q\n", got)
	// Output:
	// before write-back: 1 page(s), 1 dirty, device "\x00\x00\x00\x00\x00\x00"
	// after write-back:  1 page(s), 0 dirty, device "cached"
	// read "cached"
}

// ZeroRange makes part of a file read as zeroes through the page cache,
// as truncate and hole punching do for partial blocks. The zeroes reach
// the device at write-back.
func ExampleZeroRange() {
	dev := memdev.New(4 << 20)
	const base, size = 1 << 20, 8192
	if _, err := dev.WriteAt([]byte("keep|drop|keep"), base); err != nil {
		log.Fatal(err)
	}
	ops := iomap.Funcs{BeginFunc: func(off, length int64, _ iomap.Flags) (iomap.Mapping, error) {
		return iomap.Mapping{Offset: 0, Length: size, Type: iomap.Mapped, Addr: base}, nil
	}}
	c, err := iomap.NewPageCache(dev, iomap.PageCacheOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if err := iomap.ZeroRange(c, ops, 1, 5, 4, size); err != nil {
		log.Fatal(err)
	}
	if err := c.Sync(); err != nil {
		log.Fatal(err)
	}
	got := make([]byte, 14)
	dev.ReadAt(got, base)
	fmt.Printf("%q\n", got)
	// Output:
	// "keep|\x00\x00\x00\x00|keep"
}
