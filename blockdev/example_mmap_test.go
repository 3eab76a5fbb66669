//go:build unix

package blockdev_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/ext4io/ext4io/blockdev"
)

// OpenMmap maps an image file: reads and writes are memory copies, and
// Flush msyncs the pages written since the last Flush.
func ExampleOpenMmap() {
	dir, err := os.MkdirTemp("", "blockdev-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "pmem.img")
	if err := os.WriteFile(path, make([]byte, 1<<20), 0o644); err != nil {
		log.Fatal(err)
	}

	m, err := blockdev.OpenMmap(path, false)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := m.WriteAt([]byte("mapped"), 512); err != nil {
		log.Fatal(err)
	}
	if err := m.Flush(); err != nil {
		log.Fatal(err)
	}
	if err := m.Close(); err != nil {
		log.Fatal(err)
	}

	data, err := os.ReadFile(path) // the file itself changed
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q\n", data[512:518])
	// Output:
	// "mapped"
}
