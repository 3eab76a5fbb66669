package extent_test

import (
	"fmt"
	"log"

	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/extent"
)

// bumpAlloc is the smallest extent.Allocator: tree blocks come from a
// counter, and frees are only reported. A filesystem would update its
// bitmaps and i_blocks here (the root package uses alloc.Allocator).
type bumpAlloc struct{ next uint64 }

func (a *bumpAlloc) AllocTreeBlock(goal uint64, mustSucceed bool) (uint64, error) {
	a.next++
	return a.next - 1, nil
}

func (a *bumpAlloc) FreeTreeBlock(pblk uint64) error {
	fmt.Println("free tree block", pblk)
	return nil
}

func (a *bumpAlloc) FreeData(pblk, n uint64) error {
	fmt.Printf("free data blocks [%d, %d)\n", pblk, pblk+n)
	return nil
}

// newTree returns an empty tree whose blocks live on a 16 MiB memdev
// (4 KiB blocks), with metadata_csum tails.
func newTree() *extent.Tree {
	dev := memdev.New(16 << 20)
	root := extent.EmptyRoot() // what a new inode's i_block holds
	t, err := extent.Open(&root, extent.Config{
		BlockSize:   4096,
		Ino:         12,
		Csum:        true,
		Seed:        extent.InodeSeed(0xc0ffee, 12, 0),
		BlocksCount: 4096,
		IO:          extent.NewDeviceIO(dev, 4096),
		Alloc:       &bumpAlloc{next: 100},
	})
	if err != nil {
		log.Fatal(err)
	}
	return t
}

// Insert maps extents, merging physically contiguous neighbours. The
// in-inode root holds four extents; the fifth makes the tree grow a leaf
// block (depth 1), taken from the Allocator.
func ExampleTree_Insert() {
	t := newTree()
	for i := range uint32(6) {
		// Logical blocks 0-7, 16-23, ... at physical 1000, 1100, ...
		e := extent.Extent{Lblk: 16 * i, Len: 8, Pblk: 1000 + 100*uint64(i)}
		if err := t.Insert(e); err != nil {
			log.Fatal(err)
		}
	}
	// Contiguous with the first extent in both spaces: merged.
	if err := t.Insert(extent.Extent{Lblk: 8, Len: 8, Pblk: 1008}); err != nil {
		log.Fatal(err)
	}
	fmt.Println("depth", t.Depth())
	t.Blocks(func(pblk uint64, depth int) error {
		fmt.Println("tree block", pblk, "depth", depth)
		return nil
	})
	if err := t.Check(); err != nil {
		log.Fatal(err)
	}
	first, _, _, _ := t.Lookup(0)
	fmt.Printf("%+v\n", first)
	// Output:
	// depth 1
	// tree block 100 depth 0
	// {Lblk:0 Len:16 Pblk:1000 Unwritten:false}
}

// Lookup finds the extent holding a logical block, or the length of the
// hole around it.
func ExampleTree_Lookup() {
	t := newTree()
	if err := t.Insert(extent.Extent{Lblk: 10, Len: 5, Pblk: 2000}); err != nil {
		log.Fatal(err)
	}
	if err := t.Insert(extent.Extent{Lblk: 100, Len: 20, Pblk: 3000, Unwritten: true}); err != nil {
		log.Fatal(err)
	}
	for _, lblk := range []uint32{0, 12, 50, 110} {
		e, found, holeLen, err := t.Lookup(lblk)
		if err != nil {
			log.Fatal(err)
		}
		if !found {
			fmt.Printf("block %3d: hole of %d blocks\n", lblk, holeLen)
			continue
		}
		fmt.Printf("block %3d: physical %d (unwritten %v)\n", lblk, e.Pblk+uint64(lblk-e.Lblk), e.Unwritten)
	}
	// Output:
	// block   0: hole of 10 blocks
	// block  12: physical 2002 (unwritten false)
	// block  50: hole of 50 blocks
	// block 110: physical 3010 (unwritten true)
}

// Walk visits every extent in logical order, like a fiemap of the whole
// file. MarkWritten converts part of an unwritten extent, splitting it;
// Remove unmaps a range (truncate, punch hole) and hands the data blocks
// to Allocator.FreeData.
func ExampleTree_Walk() {
	t := newTree()
	if err := t.Insert(extent.Extent{Lblk: 0, Len: 32, Pblk: 500, Unwritten: true}); err != nil {
		log.Fatal(err)
	}
	if err := t.MarkWritten(8, 4, false); err != nil { // a write landed in blocks 8-11
		log.Fatal(err)
	}
	if err := t.Remove(24, extent.EndLblk-1); err != nil { // truncate to 24 blocks
		log.Fatal(err)
	}
	err := t.Walk(func(e extent.Extent) error {
		fmt.Printf("[%2d, %2d) -> %d unwritten=%v\n", e.Lblk, e.End(), e.Pblk, e.Unwritten)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// free data blocks [524, 532)
	// [ 0,  8) -> 500 unwritten=true
	// [ 8, 12) -> 508 unwritten=false
	// [12, 24) -> 512 unwritten=true
}

// Extents encode as the kernel's struct ext4_extent; an unwritten extent
// stores its length with a 32768 bias.
func ExampleExtent_Encode() {
	var b [extent.EntrySize]byte
	e := extent.Extent{Lblk: 7, Len: 3, Pblk: 0x1_0000_0002, Unwritten: true}
	if err := e.Encode(b[:]); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("% x\n", b)
	fmt.Printf("%+v\n", extent.DecodeExtent(b[:]))
	// Output:
	// 07 00 00 00 03 80 01 00 02 00 00 00
	// {Lblk:7 Len:3 Pblk:4294967298 Unwritten:true}
}

// Open reads a tree from an inode's i_block. Root returns the bytes to
// store back into the inode after a change; tree blocks are written
// through the BlockIO as each mutation ends.
func ExampleOpen() {
	dev := memdev.New(16 << 20)
	cfg := extent.Config{
		BlockSize:   4096,
		Ino:         12,
		BlocksCount: 4096,
		IO:          extent.NewDeviceIO(dev, 4096),
		Alloc:       &bumpAlloc{next: 100},
	}
	iblock := extent.EmptyRoot()
	t, err := extent.Open(&iblock, cfg)
	if err != nil {
		log.Fatal(err)
	}
	for i := range uint32(5) { // five extents: one more than the root holds
		if err := t.Insert(extent.Extent{Lblk: 10 * i, Len: 1, Pblk: 1000 + 10*uint64(i)}); err != nil {
			log.Fatal(err)
		}
	}
	iblock = t.Root() // the inode's new i_block
	h := extent.DecodeHeader(iblock[:])
	fmt.Printf("root: magic %#x, depth %d, entries %d\n", h.Magic, h.Depth, h.Entries)

	// Later, from the stored i_block and the device alone:
	cfg.Alloc = nil // read-only use needs no allocator
	again, err := extent.Open(&iblock, cfg)
	if err != nil {
		log.Fatal(err)
	}
	e, found, _, err := again.Lookup(40)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(found, e.Pblk)
	// Output:
	// root: magic 0xf30a, depth 1, entries 1
	// true 1040
}
