// A page store for a database engine that writes its 16 KiB pages with
// File.WriteAtomicBatch instead of protecting them with a doublewrite
// buffer.
//
// A B-tree engine keeps its data in fixed-size pages larger than a
// filesystem block (InnoDB: 16 KiB; four 4 KiB blocks). A crash during a
// plain write of a page can leave it torn: some blocks new, some old, a
// page that fails its checksum and that the redo log cannot repair, as
// redo records apply to a whole, consistent page. MySQL therefore writes
// every batch of pages twice (the doublewrite buffer: a scratch area,
// fdatasync, then the pages in place, fdatasync) and PostgreSQL logs a
// full copy of each page after a checkpoint. With WriteAtomicBatch every
// page of a batch reads entirely old or entirely new after any crash (the
// whole batch old or the whole batch new), so one write and one Datasync
// per batch suffice.
//
// Page layout (little-endian):
//
//	0  crc     uint32  CRC-32C of bytes 4 .. pageSize
//	4  page    uint32  the page's number
//	8  lsn     uint64  log sequence number of its last change
//	16 payload
//
// A page of zeroes was never written.
//
//	go run ./examples/pagestore
package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"slices"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

const (
	pageSize = 16 << 10
	hdrLen   = 16
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrTorn reports a page that fails its checksum: what a crash during a
// plain write of it can leave.
var ErrTorn = errors.New("pagestore: torn page")

// Store is a file of fixed-size pages. Pages are written in batches
// (WritePages); it is safe for concurrent use as far as ext4io.File is.
type Store struct {
	f *ext4io.File
	// Plain writes pages with WriteAt, as an engine without a doublewrite
	// buffer would: the tests show such pages tear in a crash.
	Plain bool
}

// Create makes a store of n pages (a hole: every page reads as never
// written).
func Create(v *ext4io.Volume, name string, n int) (*Store, error) {
	f, err := v.Create(name)
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(int64(n) * pageSize); err != nil {
		f.Close()
		return nil, err
	}
	return &Store{f: f}, nil
}

// Open opens an existing store, refusing one whose pages the volume
// cannot write atomically.
func Open(v *ext4io.Volume, name string) (*Store, error) {
	f, err := v.OpenFile(name, os.O_RDWR|ext4io.O_DIRECT, 0)
	if err != nil {
		return nil, err
	}
	if info := f.AtomicWriteInfo(); info.AtomicWriteUnitMax < pageSize || pageSize%info.AtomicWriteUnitMin != 0 {
		f.Close()
		return nil, fmt.Errorf("pagestore: %s: atomic writes of %d bytes unsupported (%+v)", name, pageSize, info)
	}
	return &Store{f: f}, nil
}

// Close closes the store's file.
func (s *Store) Close() error { return s.f.Close() }

// Pages returns the number of pages.
func (s *Store) Pages() int { return int(s.f.Size() / pageSize) }

// Seal sets the page's header (number, lsn) and checksum.
func Seal(page []byte, no uint32, lsn uint64) {
	binary.LittleEndian.PutUint32(page[4:], no)
	binary.LittleEndian.PutUint64(page[8:], lsn)
	binary.LittleEndian.PutUint32(page, crc32.Checksum(page[4:], castagnoli))
}

// WritePages writes a batch of sealed pages and makes it durable with one
// Datasync. The batch goes in one File.WriteAtomicBatch: a crash leaves
// every page of it old or every page new, never a page torn, and the
// pages go to the device in one sequential write. A batch of one page is
// one File.WriteAtomic.
func (s *Store) WritePages(pages map[uint32][]byte) error {
	nos := make([]uint32, 0, len(pages))
	for no := range pages {
		nos = append(nos, no)
	}
	slices.Sort(nos)
	var err error
	switch {
	case s.Plain:
		for _, no := range nos {
			if _, err = s.f.WriteAt(pages[no], int64(no)*pageSize); err != nil {
				break
			}
		}
	case len(nos) == 1:
		_, err = s.f.WriteAtomic(pages[nos[0]], int64(nos[0])*pageSize)
	default:
		ws := make([]ext4io.AtomicWrite, len(nos))
		for i, no := range nos {
			ws[i] = ext4io.AtomicWrite{Off: int64(no) * pageSize, Data: pages[no]}
		}
		_, err = s.f.WriteAtomicBatch(ws)
	}
	if err != nil {
		return err
	}
	return s.f.Datasync()
}

// ReadPage reads page no, checking its checksum; ok is false for a page
// never written.
func (s *Store) ReadPage(no uint32, page []byte) (lsn uint64, ok bool, err error) {
	if _, err := s.f.ReadAt(page[:pageSize], int64(no)*pageSize); err != nil {
		return 0, false, err
	}
	if binary.LittleEndian.Uint32(page) == 0 && binary.LittleEndian.Uint64(page[8:]) == 0 && allZero(page) {
		return 0, false, nil
	}
	if crc32.Checksum(page[4:pageSize], castagnoli) != binary.LittleEndian.Uint32(page) ||
		binary.LittleEndian.Uint32(page[4:]) != no {
		return 0, false, fmt.Errorf("page %d: %w", no, ErrTorn)
	}
	return binary.LittleEndian.Uint64(page[8:]), true, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// workload updates batches of random pages of s: batch i changes n pages
// to lsn i+1.
func workload(s *Store, batches, n int, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 1))
	for i := range batches {
		pages := map[uint32][]byte{}
		for len(pages) < n {
			no := uint32(rng.IntN(s.Pages()))
			p := make([]byte, pageSize)
			for j := hdrLen; j < pageSize; j += 8 {
				binary.LittleEndian.PutUint64(p[j:], rng.Uint64())
			}
			Seal(p, no, uint64(i+1))
			pages[no] = p
		}
		if err := s.WritePages(pages); err != nil {
			return err
		}
	}
	return nil
}

func main() {
	if err := run(os.Stdout, 100); err != nil {
		log.Fatal(err)
	}
}

func run(w io.Writer, batches int) error {
	dev := memdev.New(64 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		return err
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		return err
	}
	c, err := Create(v, "pages", 256)
	if err != nil {
		return err
	}
	c.Close()
	s, err := Open(v, "pages")
	if err != nil {
		return err
	}
	info := s.f.AtomicWriteInfo()
	fmt.Fprintf(w, "atomic write units: %d to %d bytes\n", info.AtomicWriteUnitMin, info.AtomicWriteUnitMax)
	if err := workload(s, batches, 16, 7); err != nil {
		return err
	}
	exts, err := s.f.Extents()
	if err != nil {
		return err
	}
	written, page := 0, make([]byte, pageSize)
	for no := range uint32(s.Pages()) {
		if _, ok, err := s.ReadPage(no, page); err != nil {
			return err
		} else if ok {
			written++
		}
	}
	fmt.Fprintf(w, "%d batches of 16 pages: %d of %d pages written, all checksums good; the file has %d extents\n",
		batches, written, s.Pages(), len(exts))
	if err := s.Close(); err != nil {
		return err
	}
	return v.Close()
}
