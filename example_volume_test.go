package ext4io_test

import (
	"fmt"
	"io"
	"log"
	"os"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// A File is an io.Reader and io.Seeker too, so the standard library's
// helpers work on it.
func ExampleFile_Read() {
	dev := memdev.New(64 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		log.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()
	f, err := v.Create("motd")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte("skip this line\nwelcome\n"), 0); err != nil {
		log.Fatal(err)
	}
	if _, err := f.Seek(15, io.SeekStart); err != nil {
		log.Fatal(err)
	}
	if _, err := io.Copy(os.Stdout, f); err != nil {
		log.Fatal(err)
	}
	// Output:
	// welcome
}

// Symlink stores short targets in the inode; Readlink and Lstat look at
// the link itself, Stat and Open follow it. Link adds a hard link.
func ExampleVolume_Symlink() {
	dev := memdev.New(64 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		log.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()
	f, err := v.Create("target")
	if err != nil {
		log.Fatal(err)
	}
	f.Close()
	if err := v.Symlink("target", "soft"); err != nil {
		log.Fatal(err)
	}
	if err := v.Link("target", "hard"); err != nil {
		log.Fatal(err)
	}

	dest, err := v.Readlink("soft")
	if err != nil {
		log.Fatal(err)
	}
	li, err := v.Lstat("soft")
	if err != nil {
		log.Fatal(err)
	}
	si, err := v.Stat("soft")
	if err != nil {
		log.Fatal(err)
	}
	hi, err := v.Stat("hard")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("soft ->", dest, li.Mode().Type() == os.ModeSymlink)
	fmt.Println("same inode:", si.Ino == hi.Ino, "links:", hi.Nlink)
	// Output:
	// soft -> target true
	// same inode: true links: 2
}

// Counters show which write path ran. Writes into blocks that are already
// written (here zeroed with FallocWriteZeroes) through an O_DIRECT file are
// overwrites: no metadata update, no journal commit.
func ExampleVolume_Counters() {
	dev := memdev.New(64 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		log.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()
	f, err := v.Create("table")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	if err := f.Fallocate(ext4io.FallocWriteZeroes, 0, 1<<20); err != nil {
		log.Fatal(err)
	}
	d, err := v.OpenFile("table", os.O_RDWR|ext4io.O_DIRECT, 0)
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()

	before := v.Counters()
	page := make([]byte, 4096)
	for i := range int64(10) {
		if _, err := d.WriteAt(page, i*4096); err != nil {
			log.Fatal(err)
		}
	}
	after := v.Counters()
	fmt.Println("overwrites:", after.Overwrites-before.Overwrites)
	fmt.Println("metadata updates:", after.MetaUpdates-before.MetaUpdates)
	// Output:
	// overwrites: 10
	// metadata updates: 0
}

// A read-only Open of an image whose journal needs recovery replays it
// in memory and leaves the image untouched; NoRecovery skips the replay.
func ExampleVolume_Recovery() {
	c, err := errordev.NewCrashable(memdev.New(64 << 20))
	if err != nil {
		log.Fatal(err)
	}
	if err := ext4io.Format(c, ext4io.FormatOptions{}); err != nil {
		log.Fatal(err)
	}
	v, err := ext4io.Open(c, ext4io.Options{Writable: true, CommitInterval: -1})
	if err != nil {
		log.Fatal(err)
	}
	if err := v.Mkdir("committed", 0o755); err != nil {
		log.Fatal(err)
	}
	if err := v.Sync(); err != nil {
		log.Fatal(err)
	}
	img, err := c.Crash(errordev.CrashOptions{}) // power cut after Sync
	if err != nil {
		log.Fatal(err)
	}
	v.Close()

	for _, opts := range []ext4io.Options{{}, {}, {NoRecovery: true}} {
		ro, err := ext4io.Open(img, opts)
		if err != nil {
			log.Fatal(err)
		}
		_, err = ro.Stat("committed")
		fmt.Printf("NoRecovery=%v: replayed %v, dir found %v\n", opts.NoRecovery, ro.Recovery() != nil, err == nil)
		ro.Close()
	}
	// Output:
	// NoRecovery=false: replayed true, dir found true
	// NoRecovery=false: replayed true, dir found true
	// NoRecovery=true: replayed false, dir found false
}

// ParseFallocMode reads the mode names a command line would use. Punching
// a hole frees whole blocks and zeroes the partial ones; the size stays.
func ExampleParseFallocMode() {
	dev := memdev.New(64 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		log.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()
	f, err := v.Create("f")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, 3*4096), 0); err != nil {
		log.Fatal(err)
	}

	mode, err := ext4io.ParseFallocMode(ext4io.FallocPunchHole.String())
	if err != nil {
		log.Fatal(err)
	}
	if err := f.Fallocate(mode, 4096, 4096); err != nil { // the middle block
		log.Fatal(err)
	}
	if err := f.Sync(); err != nil { // write-back allocates blocks 0 and 2
		log.Fatal(err)
	}
	exts, err := f.Extents()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(mode, "size", f.Size())
	for _, e := range exts {
		fmt.Println("logical", e.Logical, "length", e.Length)
	}
	// Output:
	// punch-hole size 12288
	// logical 0 length 1
	// logical 2 length 1
}
