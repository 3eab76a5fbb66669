//go:build !linux

package blockdev

import "fmt"

// OpenDirect is supported on Linux only; elsewhere it returns an error
// wrapping ErrUnsupported.
func OpenDirect(path string, readOnly bool) (*Direct, error) {
	return nil, fmt.Errorf("blockdev: open %s: O_DIRECT is supported on Linux only: %w", path, ErrUnsupported)
}
