package wallclock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSecondsNotAhead: Seconds never runs ahead of the precise clock and
// lags it by at most two seconds.
func TestSecondsNotAhead(t *testing.T) {
	for range 10000 {
		s := Seconds()
		now := time.Now().Unix()
		require.LessOrEqual(t, s, now)
		require.GreaterOrEqual(t, s, now-2)
	}
}
