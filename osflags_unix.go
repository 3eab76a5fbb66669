//go:build unix

package ext4io

import "syscall"

// The open(2) flags OpenFile honours besides os's: the host's values, so
// that flags built for os.OpenFile carry over.
const (
	oDirectory = syscall.O_DIRECTORY
	oNoFollow  = syscall.O_NOFOLLOW
)
