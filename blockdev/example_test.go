package blockdev_test

import (
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/ext4io/ext4io/blockdev"
)

// CreateFile makes a sparse image file; OpenFile opens an existing image
// or block device. Writes are durable after Flush (fdatasync).
func ExampleCreateFile() {
	dir, err := os.MkdirTemp("", "blockdev-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "disk.img")

	dev, err := blockdev.CreateFile(path, 1<<20)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := dev.WriteAt([]byte("sector zero"), 0); err != nil {
		log.Fatal(err)
	}
	if err := dev.Flush(); err != nil {
		log.Fatal(err)
	}
	_, err = dev.WriteAt([]byte("x"), dev.Size()) // devices do not grow
	fmt.Println("write past the end:", errors.Is(err, blockdev.ErrInvalid))
	dev.Close()

	ro, err := blockdev.OpenFile(path, true)
	if err != nil {
		log.Fatal(err)
	}
	defer ro.Close()
	buf := make([]byte, 11)
	if _, err := ro.ReadAt(buf, 0); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q, size %d, logical block %d\n", buf, ro.Size(), ro.LogicalBlockSize())
	_, err = ro.WriteAt(buf, 0)
	fmt.Println("write to read-only:", errors.Is(err, blockdev.ErrReadOnly))
	// Output:
	// write past the end: true
	// "sector zero", size 1048576, logical block 512
	// write to read-only: true
}

// OpenDirect bypasses the host page cache with O_DIRECT. Aligned buffers
// go straight to the kernel; Alignment says what aligned means. File
// systems that refuse O_DIRECT (tmpfs) give ErrUnsupported.
func ExampleOpenDirect() {
	dev, err := blockdev.OpenDirect("/path/to/disk.img", false)
	if errors.Is(err, blockdev.ErrUnsupported) {
		log.Fatal("no O_DIRECT here; use blockdev.OpenFile")
	}
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	mem, off := dev.Alignment()
	fmt.Println("buffer alignment", mem, "offset alignment", off)
}

// WriteZeroes writes real zero blocks, where ZeroOut on a regular file
// may only mark the range unwritten in the host file system.
func ExampleWriteZeroes() {
	dir, err := os.MkdirTemp("", "blockdev-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	dev, err := blockdev.CreateFile(filepath.Join(dir, "disk.img"), 1<<20)
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	if _, err := dev.WriteAt([]byte("old data"), 4096); err != nil {
		log.Fatal(err)
	}
	if err := blockdev.WriteZeroes(dev, 4096, 4096); err != nil {
		log.Fatal(err)
	}
	buf := make([]byte, 8)
	if _, err := dev.ReadAt(buf, 4096); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q\n", buf)
	// Output:
	// "\x00\x00\x00\x00\x00\x00\x00\x00"
}
