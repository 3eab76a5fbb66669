// Package e2fs forwards to ext4iotest, where the e2fsprogs test helpers
// now live (public, for engines built on ext4io's packages). It stays so
// the existing tests that import it need no change; new tests import
// ext4iotest.
package e2fs

import "github.com/ext4io/ext4io/ext4iotest"

// ExtentLine is ext4iotest.ExtentLine.
type ExtentLine = ext4iotest.ExtentLine

// Forwarders; see ext4iotest.
var (
	Tool          = ext4iotest.Tool
	Mkfs          = ext4iotest.Mkfs
	MkfsConf      = ext4iotest.MkfsConf
	Fsck          = ext4iotest.Fsck
	Debugfs       = ext4iotest.Debugfs
	DebugfsScript = ext4iotest.DebugfsScript
	Extents       = ext4iotest.Extents
	Dump          = ext4iotest.Dump
	Leaves        = ext4iotest.Leaves
	TreeBlocks    = ext4iotest.TreeBlocks
	Mount         = ext4iotest.Mount
	Unmount       = ext4iotest.Unmount
)
