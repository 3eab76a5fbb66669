package fsprim_test

import (
	"fmt"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/fsprim"
	"github.com/ext4io/ext4io/layout"
)

// An engine makes its file visible without the root package: allocate
// an inode, write it, link a name to it, write the superblock's counts.
// Here the metadata goes straight to the device (DirectIO); an engine
// that must survive crashes uses JournalIO over a journal handle.
func Example() {
	dev := memdev.New(32 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil { // as mkfs.ext4 would
		panic(err)
	}
	sb, err := fsprim.ReadSuperblock(dev)
	if err != nil {
		panic(err)
	}
	fs, err := fsprim.Open(dev, sb, fsprim.NewDirectIO(dev, sb.BlockSize()))
	if err != nil {
		panic(err)
	}
	ino, in, err := fs.NewInode(layout.RootIno, 0o644)
	if err != nil {
		panic(err)
	}
	if err := fs.WriteInode(ino, in); err != nil {
		panic(err)
	}
	if err := fs.Link(layout.RootIno, "blob", ino, layout.FtRegFile); err != nil {
		panic(err)
	}
	if err := fs.WriteSuperblock(); err != nil {
		panic(err)
	}

	// Any ext4 reader sees it (ext4io here; e2fsck and Linux too).
	v, err := ext4io.Open(dev, ext4io.Options{})
	if err != nil {
		panic(err)
	}
	defer v.Close()
	fi, err := v.Stat("blob")
	if err != nil {
		panic(err)
	}
	fmt.Println(fi.Name(), fi.Mode(), fi.Size())
	// Output: blob -rw-r--r-- 0
}
