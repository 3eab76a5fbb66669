//go:build !unix

package main

import "io/fs"

// umask returns the usual default where the platform has none.
func umask() fs.FileMode { return 0o022 }
