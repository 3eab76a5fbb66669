//go:build !linux

package main

import (
	"fmt"
	"os"

	"github.com/ext4io/ext4io"
)

// hostXattrs reports no extended attributes: reading them from the host
// is implemented for Linux only.
func hostXattrs(path string) (map[string][]byte, error) { return nil, nil }

// hostXattrsOf is hostXattrs of the open file in (named path).
func hostXattrsOf(in *srcFile, path string) (map[string][]byte, error) { return nil, nil }

func setHostXattr(f *os.File, name string, value []byte) error {
	return fmt.Errorf("%s: setting extended attribute %s on this system: %w", f.Name(), name, ext4io.ErrUnsupported)
}
