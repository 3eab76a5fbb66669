//go:build !unix

package bench

import (
	"fmt"
	"time"

	"github.com/ext4io/ext4io/blockdev"
)

// freeBytes is unknown on this platform: assume enough.
func freeBytes(string) (int64, error) { return 1 << 40, nil }

func openMmap(string) (blockdev.Device, error) {
	return nil, fmt.Errorf("mmap backend: %w", blockdev.ErrUnsupported)
}

// processUsage is not measured on this platform (the bench reports no
// CPU or fault figure).
func processUsage() (time.Duration, int64) { return 0, 0 }

// allocatedBytes is not measured on this platform.
func allocatedBytes(string) (int64, bool) { return 0, false }
