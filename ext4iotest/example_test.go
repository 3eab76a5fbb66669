package ext4iotest_test

import (
	"fmt"

	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
)

// SweepPoints picks the crash points of a recorded workload that
// CrashSweep visits: before anything, around every flush, and the last
// operation.
func ExampleSweepPoints() {
	rec, err := errordev.NewRecorder(memdev.New(1 << 20))
	if err != nil {
		panic(err)
	}
	block := make([]byte, 4096)
	for i := range 4 { // write, write, flush; write, write, flush
		if _, err := rec.WriteAt(block, int64(i)*4096); err != nil {
			panic(err)
		}
		if i%2 == 1 {
			if err := rec.Flush(); err != nil {
				panic(err)
			}
		}
	}
	fmt.Println(ext4iotest.SweepPoints(rec, ext4iotest.SweepOptions{}))
	// Output: [-1 1 2 4 5]
}

// Digest identifies a device's contents without keeping a copy: equal
// images have equal digests.
func ExampleDigest() {
	a, b := memdev.New(1<<20), memdev.New(1<<20)
	da, _ := ext4iotest.Digest(a)
	db, _ := ext4iotest.Digest(b)
	fmt.Println("empty devices equal:", da == db)
	if _, err := b.WriteAt([]byte{1}, 4096); err != nil {
		panic(err)
	}
	db, _ = ext4iotest.Digest(b)
	fmt.Println("after a write:", da == db)
	// Output:
	// empty devices equal: true
	// after a write: false
}
