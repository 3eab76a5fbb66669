package alloc_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/alloc"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/layout"
)

// An Allocator works on the bitmaps and group descriptors of a formatted
// device. NewDirectIO writes them in place, without a journal.
func ExampleAllocator_Alloc() {
	dev := memdev.New(64 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		log.Fatal(err)
	}
	raw := make([]byte, layout.SuperblockSize)
	if _, err := dev.ReadAt(raw, layout.SuperblockOffset); err != nil {
		log.Fatal(err)
	}
	sb, err := layout.DecodeSuperblock(raw)
	if err != nil {
		log.Fatal(err)
	}
	a, err := alloc.New(sb, alloc.NewDirectIO(dev, sb.BlockSize()), alloc.Options{})
	if err != nil {
		log.Fatal(err)
	}

	free := a.FreeBlocks()
	start, n, err := a.Alloc(0, 16, 64) // one run of 16 to 64 blocks
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("got", n, "blocks; free went down by", free-a.FreeBlocks())

	if err := a.Free(start, n); err != nil {
		log.Fatal(err)
	}
	err = a.Free(start, 1) // already free
	fmt.Println("double free is corruption:", errors.Is(err, alloc.ErrCorrupt))

	// The caller writes the counters into the superblock.
	a.FillSuperblock(sb)
	fmt.Println("superblock free count matches:", sb.FreeBlocksCount == free)
	// Output:
	// got 64 blocks; free went down by 64
	// double free is corruption: true
	// superblock free count matches: true
}

// AllocInode picks an inode near its parent directory; FreeInode gives
// it back. The caller writes the inode itself.
func ExampleAllocator_AllocInode() {
	dev := memdev.New(64 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		log.Fatal(err)
	}
	raw := make([]byte, layout.SuperblockSize)
	if _, err := dev.ReadAt(raw, layout.SuperblockOffset); err != nil {
		log.Fatal(err)
	}
	sb, err := layout.DecodeSuperblock(raw)
	if err != nil {
		log.Fatal(err)
	}
	a, err := alloc.New(sb, alloc.NewDirectIO(dev, sb.BlockSize()), alloc.Options{})
	if err != nil {
		log.Fatal(err)
	}

	free := a.FreeInodes()
	ino, err := a.AllocInode(layout.RootIno, false)
	if err != nil {
		log.Fatal(err)
	}
	// 11 is lost+found and 12 the orphan file.
	fmt.Println("new inode:", ino, "free inodes down by", free-a.FreeInodes())
	if err := a.FreeInode(ino, false); err != nil {
		log.Fatal(err)
	}
	fmt.Println("after FreeInode, free inodes down by", free-a.FreeInodes())
	// Output:
	// new inode: 13 free inodes down by 1
	// after FreeInode, free inodes down by 0
}

// Delayed allocation: Reserve sets blocks aside when data is buffered,
// and write-back later allocates them with the Delalloc flag, which
// cannot fail for space.
func ExampleAllocator_Reserve() {
	dev := memdev.New(64 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		log.Fatal(err)
	}
	raw := make([]byte, layout.SuperblockSize)
	if _, err := dev.ReadAt(raw, layout.SuperblockOffset); err != nil {
		log.Fatal(err)
	}
	sb, err := layout.DecodeSuperblock(raw)
	if err != nil {
		log.Fatal(err)
	}
	a, err := alloc.New(sb, alloc.NewDirectIO(dev, sb.BlockSize()), alloc.Options{})
	if err != nil {
		log.Fatal(err)
	}

	avail := a.Available(0)
	if err := a.Reserve(8); err != nil {
		log.Fatal(err)
	}
	fmt.Println("reserved:", a.Reserved(), "available down by", avail-a.Available(0))

	_, n, err := a.Allocate(alloc.Request{Min: 8, Max: 8, Flags: alloc.Delalloc})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("allocated", n, "reserved now", a.Reserved())
	// Output:
	// reserved: 8 available down by 8
	// allocated 8 reserved now 0
}
