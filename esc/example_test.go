package esc_test

import (
	"fmt"
	"log"

	"github.com/ext4io/ext4io/esc"
)

// Insert records what the caller changed (an allocation, a delayed write);
// Lookup answers from memory. Adjacent ranges with contiguous physical
// blocks merge into one entry.
func ExampleTree_Insert() {
	c := esc.New(esc.Options{Budget: 1 << 20})
	t := c.Inode(12)
	for _, e := range []esc.Extent{
		{Lblk: 0, Len: 8, Pblk: 1000, Status: esc.Written},
		{Lblk: 8, Len: 8, Pblk: 1008, Status: esc.Written}, // merges with the first
		{Lblk: 16, Len: 4, Status: esc.Delayed},            // buffered, not allocated yet
	} {
		if err := t.Insert(e); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("entries:", t.Len(), "delayed blocks:", t.DelayedBlocks())
	if e, ok := t.Lookup(12); ok {
		fmt.Println(e.Status, "block 12 at", e.PblkOf(12))
	}
	_, ok := t.Lookup(40)
	fmt.Println("block 40 cached:", ok)
	// Output:
	// entries: 2 delayed blocks: 4
	// written block 12 at 1012
	// block 40 cached: false
}

// Fill answers a miss by asking the on-disk extent tree (here a fake) and
// caches the whole extent or hole it returns, so later lookups anywhere in
// it are hits.
func ExampleTree_Fill() {
	c := esc.New(esc.Options{})
	t := c.Inode(12)
	// The inode's on-disk mapping: blocks [100, 200) at 5000, holes around.
	lookup := func(lblk uint32) (esc.Extent, bool, error) {
		switch {
		case lblk < 100:
			return esc.Extent{Lblk: 0, Len: 100, Status: esc.Hole}, false, nil
		case lblk < 200:
			return esc.Extent{Lblk: 100, Len: 100, Pblk: 5000, Status: esc.Written}, false, nil
		default:
			return esc.Extent{Lblk: 200, Len: esc.MaxBlocks - 200, Status: esc.Hole}, false, nil
		}
	}
	for _, lblk := range []uint32{150, 120, 199, 50} {
		e, err := t.Fill(lblk, lookup)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(lblk, e.Status, e.Lblk, e.Len)
	}
	s := c.Stats()
	fmt.Println("hits", s.Hits, "misses", s.Misses, "lookups on disk", s.Fills)
	// Output:
	// 150 written 100 100
	// 120 written 100 100
	// 199 written 100 100
	// 50 hole 0 100
	// hits 2 misses 2 lookups on disk 2
}

// SetStatus converts blocks after I/O completion: here the middle of a
// preallocated range became written. Range lists the result.
func ExampleTree_SetStatus() {
	c := esc.New(esc.Options{})
	t := c.Inode(12)
	if err := t.Insert(esc.Extent{Lblk: 0, Len: 30, Pblk: 700, Status: esc.Unwritten}); err != nil {
		log.Fatal(err)
	}
	n, err := t.SetStatus(10, 5, esc.Unwritten, esc.Written)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("converted", n)
	t.Range(0, 30, func(e esc.Extent) bool {
		fmt.Println(e.Lblk, e.End(), e.Pblk, e.Status)
		return true
	})
	// Output:
	// converted 5
	// 0 10 700 unwritten
	// 10 15 710 written
	// 15 30 715 unwritten
}
