//go:build unix

package nbd_test

import (
	"os"
	"syscall"
)

// stop stops p (SIGSTOP), as a server that hangs.
func stop(p *os.Process) error { return p.Signal(syscall.SIGSTOP) }

// resume continues p if a test stopped it.
func resume(p *os.Process) { p.Signal(syscall.SIGCONT) }
