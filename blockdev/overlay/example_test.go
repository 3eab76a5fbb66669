package overlay_test

import (
	"fmt"
	"log"

	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/blockdev/overlay"
)

// An overlay takes writes its base never sees: here a pristine image is
// patched for one test case and stays pristine for the next.
func ExampleNew() {
	base := memdev.New(1 << 20)
	if _, err := base.WriteAt([]byte("pristine"), 0); err != nil {
		log.Fatal(err)
	}
	o := overlay.New(base)
	if _, err := o.WriteAt([]byte("PATCHED"), 0); err != nil {
		log.Fatal(err)
	}
	a, b := make([]byte, 8), make([]byte, 8)
	o.ReadAt(a, 0)
	base.ReadAt(b, 0)
	fmt.Printf("overlay %q, base %q, memory %d\n", a, b, o.Allocated())
	// Output:
	// overlay "PATCHEDe", base "pristine", memory 4096
}
