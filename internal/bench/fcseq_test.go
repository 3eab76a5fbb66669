package bench

import (
	"testing"
	"time"
)

// TestBenchSeqWriteFastCommit: with fast commits, the sequential writers'
// starts over (a truncate) still free their blocks for the next pass, so
// the direct writer takes the warmed file's blocks again and raw follows
// it there (checkWarmBlocks would stop the workload otherwise). A fast
// commit of the truncate alone leaves the freed blocks busy until the
// next full commit.
func TestBenchSeqWriteFastCommit(t *testing.T) {
	c := mem(128<<20, 400*time.Millisecond, "seqwrite-1m", "buffered-4k")
	c.FastCommit = true
	c.Repeat = 2
	rep, _ := run(t, c)
	for _, w := range rep.Workloads {
		if w.Engine.Wraps == 0 {
			t.Errorf("%s: no pass started over: the test does not reach the restart", w.Name)
		}
	}
}
