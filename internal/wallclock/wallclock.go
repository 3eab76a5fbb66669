// Package wallclock gives the wall-clock seconds that ext4io stamps into a
// superblock (mount, write and mkfs times).
//
// On Linux it reads CLOCK_REALTIME_COARSE, the tick-updated clock behind
// the kernel's ktime_get_real_seconds (which ext4 stamps) and behind the C
// library's time(2) (which e2fsck compares against). The precise clock
// time.Now reads can be up to a tick ahead of it: a superblock stamped
// with it just after a second began looks "in the future" to an e2fsck
// run in that tick.
package wallclock

import "time"

// Seconds returns the current time in seconds since the Unix epoch, never
// ahead of time(2).
func Seconds() int64 { return seconds() }

// Now returns Seconds as a time.Time.
func Now() time.Time { return time.Unix(seconds(), 0) }
