package ext4io_test

import (
	"bytes"
	"errors"
	"fmt"
	"log"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// WriteAtomic writes a database page so that a crash leaves it entirely
// old or entirely new, with no doublewrite buffer. Offsets and lengths
// are multiples of AtomicWriteUnitMin (one block) up to
// AtomicWriteUnitMax; Datasync makes the write durable.
func ExampleFile_WriteAtomic() {
	dev := memdev.New(64 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil { // a journal: needed for untorn writes
		log.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()
	f, err := v.Create("pages.db")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()

	info := f.AtomicWriteInfo()
	fmt.Println("unit min", info.AtomicWriteUnitMin, "max", info.AtomicWriteUnitMax, "batch max", info.AtomicWriteBatchMax)

	const pageSize = 16 << 10
	page := bytes.Repeat([]byte{'A'}, pageSize)
	if _, err := f.WriteAtomic(page, 3*pageSize); err != nil { // page 3: untorn
		log.Fatal(err)
	}
	if err := f.Datasync(); err != nil { // durable from here
		log.Fatal(err)
	}

	// Two pages as one untorn unit: after a crash both are old or both new.
	p0, p1 := bytes.Repeat([]byte{'B'}, pageSize), bytes.Repeat([]byte{'C'}, pageSize)
	if _, err := f.WriteAtomicBatch([]ext4io.AtomicWrite{{Off: 0, Data: p0}, {Off: pageSize, Data: p1}}); err != nil {
		log.Fatal(err)
	}
	if err := f.Datasync(); err != nil {
		log.Fatal(err)
	}

	// A range that is not block-aligned is refused, and nothing is written.
	_, err = f.WriteAtomic(page[:100], 0)
	fmt.Println("unaligned refused:", errors.Is(err, ext4io.ErrInvalid))

	got := make([]byte, 4*pageSize)
	if _, err := f.ReadAt(got, 0); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("size %d, first bytes of pages 0-3 %q\n", f.Size(), []byte{got[0], got[pageSize], got[2*pageSize], got[3*pageSize]}) // page 2 is a hole
	// Output:
	// unit min 4096 max 1048576 batch max 4194304
	// unaligned refused: true
	// size 65536, first bytes of pages 0-3 "BC\x00A"
}
