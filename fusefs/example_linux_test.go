package fusefs_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/fusefs"
)

// Example formats an image in memory, serves it at a directory, writes a
// file there through the operating system and reads it back through the
// library. It needs root (or fusermount3) and /dev/fuse, so go test
// compiles it but does not run it.
func Example() {
	dev := memdev.New(64 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		log.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		log.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "ext4io-mount")
	if err != nil {
		log.Fatal(err)
	}
	defer os.Remove(dir)
	s, err := fusefs.Mount(v, dir, fusefs.Options{})
	if err != nil {
		log.Fatal(err)
	}
	// The mount may be used once Mount has returned.
	werr := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hello\n"), 0o644)
	if err := s.Unmount(); err != nil {
		log.Fatal(err)
	}
	s.Wait()
	if werr != nil {
		log.Fatal(werr)
	}
	b, err := v.ReadFile("hello.txt")
	if err != nil {
		log.Fatal(err)
	}
	if err := v.Close(); err != nil { // writes back, commits, marks the image clean
		log.Fatal(err)
	}
	fmt.Printf("%s", b)
}
