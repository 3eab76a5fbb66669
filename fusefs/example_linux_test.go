package fusefs_test

import (
	"errors"
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

// ExampleParseOptions turns the -o options of ext4io mount (the syntax of
// mount and fuse2fs) into the Options for Mount: the options fusefs knows
// set fields, the others go to the kernel as given. It needs no mount.
func ExampleParseOptions() {
	o, err := fusefs.ParseOptions("ro,allow_other,kernel_cache,attr_timeout=0.5,entry_timeout=0,fsname=/img/disk.ext4,noatime")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("read-only:", o.ReadOnly)
	fmt.Println("allow other users:", o.AllowOther)
	fmt.Println("keep cached pages:", o.KeepCache)
	fmt.Println("attribute timeout:", o.AttrTimeout)
	fmt.Println("entry timeout:", o.EntryTimeout, "(negative: no caching)")
	fmt.Println("source:", o.FsName)
	fmt.Println("to the kernel:", o.Extra)

	_, err = fusefs.ParseOptions("attr_timeout=soon")
	fmt.Println(errors.Is(err, ext4io.ErrInvalid), err)
	// Output:
	// read-only: true
	// allow other users: true
	// keep cached pages: true
	// attribute timeout: 500ms
	// entry timeout: -1ns (negative: no caching)
	// source: /img/disk.ext4
	// to the kernel: [noatime]
	// true fusefs: attr_timeout=soon: want seconds: invalid argument
}
