//go:build !unix

package main

import "os"

// openSource opens a host regular file for reading.
func openSource(name string) (*os.File, error) { return os.Open(name) }
