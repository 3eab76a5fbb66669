package ext4io

import "time"

// MMPTestWait replaces the MMP open protocol's wait (the kernel's
// min(2c+1, c+60) seconds, 11 s for the 1 s update interval of the test
// images) in the whole test binary, set once before any test runs, so
// that tests opening MMP images can run in parallel: it is longer than
// two update intervals of 1 s, so a holder's updates show within it.
const MMPTestWait = 2500 * time.Millisecond

func init() { mmpTestWait = MMPTestWait }

// SetMMPWait replaces the MMP open protocol's wait with d until the
// returned function restores it (tests only). It changes a package-level
// variable that every Open reads: only a test that does not call
// t.Parallel may use it, and no Volume of it may be opening in the
// background (parallel tests run only after every sequential test).
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
// Like SetMMPWait, only for tests that do not call t.Parallel.
func SetMMPRecheck(d time.Duration) (restore func()) {
	old := mmpTestCheck
	mmpTestCheck = d
	return func() { mmpTestCheck = old }
}
