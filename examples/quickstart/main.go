// Quickstart: format an in-memory ext4 volume, create a file, write it,
// read it back and list its extents (what filefrag/fiemap shows).
//
//	go run ./examples/quickstart
package main

import (
	"fmt"
	"io"
	"log"
	"os"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(w io.Writer) error {
	// A sparse 64 MiB device in memory. For an image file use
	// blockdev.CreateFile(path, size) or blockdev.OpenFile(path, false).
	dev := memdev.New(64 << 20)
	defer dev.Close()
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil { // mkfs.ext4 defaults
		return err
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		return err
	}
	defer v.Close()

	f, err := v.Create("/hello.txt")
	if err != nil {
		return err
	}
	defer f.Close()
	msg := []byte("hello from ext4io\n")
	if _, err := f.WriteAt(msg, 0); err != nil {
		return err
	}
	// A second write 1 MiB further leaves a hole between the two.
	if _, err := f.WriteAt(msg, 1<<20); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}

	got := make([]byte, len(msg))
	if _, err := f.ReadAt(got, 0); err != nil {
		return err
	}
	fmt.Fprintf(w, "read back: %q\n", got)
	fmt.Fprintf(w, "size: %d bytes\n", f.Size())

	exts, err := f.Extents()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%d extents (logical block -> physical block, length):\n", len(exts))
	for _, e := range exts {
		fmt.Fprintf(w, "  %6d -> %8d  %d block(s) unwritten=%v\n", e.Logical, e.Physical, e.Length, e.Unwritten)
	}
	// Close writes the free counts and marks the filesystem clean: the
	// device now holds an image e2fsck accepts and Linux mounts.
	return v.Close()
}
