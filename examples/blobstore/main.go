// A blob store built on ext4io's lower packages alone (blockdev, alloc,
// extent, esc, iomap, journal, layout, with fsprim's glue): no Volume, no
// File. Each blob becomes a regular file in the root directory of a real
// ext4 image, written with direct I/O through the engine's own iomap ops
// (ops.go: Begin maps or allocates, EndIO maps new blocks once their data
// is on the device, End frees what was not written), its inode and
// directory entry logged in one jbd2 transaction (store.go). e2fsck
// accepts the image and Linux reads the files.
//
// Only the formatting below uses the root package (ext4io.Format, as
// mkfs.ext4 would); the engine in store.go and ops.go does not import it.
//
//	go run ./examples/blobstore
package main

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(out io.Writer) error {
	dev := memdev.New(64 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		return err
	}
	return demo(dev, out)
}

// blobs are the demo's contents: a small one, one of a few blocks and one
// of several extents' worth of allocation requests.
func blobs() map[string][]byte {
	return map[string][]byte{
		"small.txt": []byte("hello from a blob store\n"),
		"medium":    bytes.Repeat([]byte("0123456789"), 3000),
		"large":     bytes.Repeat([]byte{0xAB, 0xCD, 0xEF}, 1<<20),
	}
}

// demo puts the blobs on dev, reads them back, closes the store and
// reopens it to read them again.
func demo(dev blockdev.Device, out io.Writer) error {
	s, err := Open(dev)
	if err != nil {
		return err
	}
	inos := map[string]uint32{}
	for _, name := range []string{"small.txt", "medium", "large"} {
		ino, err := s.Put(name, blobs()[name])
		if err != nil {
			return fmt.Errorf("put %s: %w", name, err)
		}
		inos[name] = ino
		fmt.Fprintf(out, "put %s: inode %d, %d bytes\n", name, ino, len(blobs()[name]))
	}
	if err := s.Close(); err != nil {
		return err
	}
	if s, err = Open(dev); err != nil {
		return err
	}
	for _, name := range []string{"small.txt", "medium", "large"} {
		got, err := s.Get(inos[name])
		if err != nil {
			return fmt.Errorf("get %s: %w", name, err)
		}
		if !bytes.Equal(got, blobs()[name]) {
			return fmt.Errorf("get %s: %d bytes differ from what was put", name, len(got))
		}
	}
	fmt.Fprintln(out, "read back after reopening: all equal")
	return s.Close()
}
