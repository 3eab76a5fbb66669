package blockdevtest_test

import (
	"bytes"
	"fmt"
	"log"
	"testing"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/blockdevtest"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// Run is called from a backend's test with a constructor for empty
// devices; the suite closes each device it gets.
func ExampleRun() {
	// In the backend's _test.go file:
	testConformance := func(t *testing.T) {
		blockdevtest.Run(t, func(t *testing.T, size int64) blockdev.Device {
			return memdev.New(size)
		})
	}
	_ = testConformance // func TestConformance(t *testing.T) { ... }
}

// Pattern makes data that depends on its offset, so a write landing in
// the wrong place, or a stale read, is caught by comparing.
func ExamplePattern() {
	dev := memdev.New(blockdevtest.Size)
	want := blockdevtest.Pattern(7, 4096, 512)
	if _, err := dev.WriteAt(want, 4096); err != nil {
		log.Fatal(err)
	}
	got := make([]byte, 512)
	if _, err := dev.ReadAt(got, 4096); err != nil {
		log.Fatal(err)
	}
	fmt.Println("round trip:", bytes.Equal(got, want))
	fmt.Println("offset-dependent:", !bytes.Equal(want, blockdevtest.Pattern(7, 4608, 512)))
	fmt.Println("seed-dependent:", !bytes.Equal(want, blockdevtest.Pattern(8, 4096, 512)))
	fmt.Println("no zero byte:", bytes.IndexByte(want, 0) < 0)
	// Output:
	// round trip: true
	// offset-dependent: true
	// seed-dependent: true
	// no zero byte: true
}
