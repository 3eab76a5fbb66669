//go:build unix

package bench

import (
	"syscall"
	"time"

	"github.com/ext4io/ext4io/blockdev"
)

func openMmap(path string) (blockdev.Device, error) { return blockdev.OpenMmap(path, false) }

// processUsage is the user and system CPU time this process has used
// and the page faults it has taken (minor and major).
func processUsage() (time.Duration, int64) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), int64(ru.Minflt + ru.Majflt)
}

// allocatedBytes is the bytes the file at path holds on its filesystem
// (st_blocks); below its size when it has holes.
func allocatedBytes(path string) (int64, bool) {
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil {
		return 0, false
	}
	return st.Blocks * 512, true
}
