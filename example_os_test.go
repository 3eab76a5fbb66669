package ext4io_test

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"os"
	"strings"
	"syscall"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// A Volume is used as the os package is: io.Copy into a File, the os
// flags, and os's errors.
func ExampleVolume_FileSystem() {
	dev := memdev.New(64 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		log.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()
	var fsys ext4io.FileSystem = v.FileSystem() // or ext4io.OSFileSystem(dir)

	if err := fsys.MkdirAll("logs/2026", 0o755); err != nil {
		log.Fatal(err)
	}
	f, err := fsys.OpenFile("logs/2026/app.log", os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := io.Copy(f, strings.NewReader("started\n")); err != nil {
		log.Fatal(err)
	}
	f.WriteString("stopped\n")
	fmt.Println(f.Name())
	f.Close()

	b, _ := fsys.ReadFile("logs/2026/app.log")
	fmt.Print(string(b))

	_, err = fsys.Open("logs/2026/app.log/x")
	fmt.Println(err)
	fmt.Println(errors.Is(err, ext4io.ErrNotDir), errors.Is(err, syscall.ENOTDIR))

	err = fsys.Remove("logs")
	fmt.Println(errors.Is(err, ext4io.ErrNotEmpty), errors.Is(err, fs.ErrExist))
	fmt.Println(fsys.RemoveAll("logs"))
	// Output:
	// logs/2026/app.log
	// started
	// stopped
	// open logs/2026/app.log/x: not a directory
	// true true
	// true true
	// <nil>
}
