//go:build !linux

package main

import (
	"errors"
	"fmt"
	"io"
)

// cmdMount fails: the FUSE front end (package fusefs) is Linux-only.
func cmdMount(args []string, w io.Writer) error {
	return fmt.Errorf("mount: FUSE mounts are supported on Linux only: %w", errors.ErrUnsupported)
}
