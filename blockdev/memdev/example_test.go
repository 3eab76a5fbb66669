package memdev_test

import (
	"fmt"
	"log"

	"github.com/ext4io/ext4io/blockdev/memdev"
)

// A memdev is sparse: a 1 TiB device costs only the 4 KiB chunks written.
func ExampleNew() {
	dev := memdev.New(1 << 40)
	defer dev.Close()
	if _, err := dev.WriteAt([]byte("far out"), 1<<39); err != nil {
		log.Fatal(err)
	}
	buf := make([]byte, 7)
	if _, err := dev.ReadAt(buf, 1<<39); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q, size %d, memory %d\n", buf, dev.Size(), dev.Allocated())
	// Output:
	// "far out", size 1099511627776, memory 4096
}

// Clone is a cheap copy-on-write snapshot, handy for running many
// variants of a test from one formatted image.
func ExampleDevice_Clone() {
	base := memdev.New(1 << 20)
	if _, err := base.WriteAt([]byte("base"), 0); err != nil {
		log.Fatal(err)
	}
	snap, err := base.Clone()
	if err != nil {
		log.Fatal(err)
	}
	if _, err := base.WriteAt([]byte("BASE"), 0); err != nil { // does not reach snap
		log.Fatal(err)
	}
	a, b := make([]byte, 4), make([]byte, 4)
	base.ReadAt(a, 0)
	snap.ReadAt(b, 0)
	fmt.Printf("base %q, clone %q\n", a, b)
	// Output:
	// base "BASE", clone "base"
}
