package wallclock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestSecondsNotAheadOfTime runs across a second boundary, where the
// precise clock moves on up to a tick before the tick-updated clock that
// the C library's time(2) reads through the vDSO (and e2fsck with it):
// Seconds must never be ahead of that clock read right after it.
func TestSecondsNotAheadOfTime(t *testing.T) {
	start := time.Now().Unix()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		s := Seconds()
		var ts unix.Timespec
		require.NoError(t, unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &ts))
		require.LessOrEqual(t, s, ts.Sec, "stamped a second time(2) has not reached")
		if time.Now().Unix() > start+1 { // a whole second boundary crossed
			return
		}
	}
}
