//go:build !linux

package nbd_test

import "syscall"

// dieWithParent has nothing to ask of the system outside Linux: a server
// outlives a test process killed before its cleanup.
func dieWithParent() *syscall.SysProcAttr { return nil }
