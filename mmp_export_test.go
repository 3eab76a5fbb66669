package ext4io

import "time"

// SetMMPWait replaces the MMP open protocol's wait (the kernel's
// min(2c+1, c+60) seconds) with d until the returned function restores it
// (tests only; not safe while a writable Open runs).
func SetMMPWait(d time.Duration) (restore func()) {
	old := mmpTestWait
	mmpTestWait = d
	return func() { mmpTestWait = old }
}

// MMPWait is the kernel's wait for update interval update and the MMP
// block's check interval check.
func MMPWait(update, check uint16) time.Duration { return mmpWait(update, check) }

// SetMMPRecheck makes the MMP updaters of volumes opened from now on
// re-read their block before each update older than d (the kernel only
// does so for updates later than the check interval), until restore.
func SetMMPRecheck(d time.Duration) (restore func()) {
	old := mmpTestCheck
	mmpTestCheck = d
	return func() { mmpTestCheck = old }
}
