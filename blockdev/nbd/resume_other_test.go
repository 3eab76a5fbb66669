//go:build !unix

package nbd_test

import (
	"errors"
	"os"
)

// stop fails where processes cannot be stopped by a signal.
func stop(*os.Process) error { return errors.ErrUnsupported }

// resume does nothing where processes cannot be stopped by a signal.
func resume(*os.Process) {}
