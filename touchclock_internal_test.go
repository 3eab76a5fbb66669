package ext4io

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// TestTouchClockBounds: the time take gives an inode is never before the
// start of a write stamped since the last take, nor after take returns,
// with 16 goroutines stamping across ticks.
func TestTouchClockBounds(t *testing.T) {
	var c touchClock
	c.init()
	defer c.close()
	n := new(inode)
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 100 {
		starts := make([]time.Time, 16)
		var wg sync.WaitGroup
		for g := range starts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 20 {
					starts[g] = time.Now()
					c.stamp(n)
				}
			}()
		}
		wg.Wait()
		if d := rng.IntN(3); d > 0 {
			time.Sleep(time.Duration(d) * touchTick)
		}
		at, ok := c.take(n)
		hi := time.Now()
		if !ok {
			t.Fatalf("round %d: take found no stamp", round)
		}
		for g, s := range starts {
			if at.Before(s) {
				t.Fatalf("round %d: time %v is before goroutine %d's last write started (%v)", round, at, g, s)
			}
		}
		if at.After(hi) {
			t.Fatalf("round %d: time %v is after take returned (%v)", round, at, hi)
		}
		if _, ok := c.take(n); ok {
			t.Fatalf("round %d: a second take found a stamp", round)
		}
	}
}

// TestTouchClockEndsEveryStamp: the epoch of an inode's last stamp ends,
// and its end time is recorded, also when the stamps come after the
// ticker has stopped for idleness.
func TestTouchClockEndsEveryStamp(t *testing.T) {
	var c touchClock
	c.init()
	defer c.close()
	nodes := make([]*inode, 4)
	for i := range nodes {
		nodes[i] = new(inode)
	}
	running := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.running
	}
	for round := range 12 {
		// Wait for the ticker to stop (touchIdleTicks quiet ticks) on
		// even rounds; stamp right away on odd ones.
		deadline := time.Now().Add(time.Second)
		for round%2 == 0 && running() {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the ticker did not stop when idle", round)
			}
			time.Sleep(touchTick)
		}
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 50 {
					c.stamp(nodes[(g+i)%len(nodes)])
				}
			}()
		}
		wg.Wait()
		for i, n := range nodes {
			e := n.touchEpoch.Load()
			for {
				c.mu.Lock()
				done := n.touchEndEpoch == e
				c.mu.Unlock()
				if done {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("round %d: inode %d stamped in epoch %d; its end was not recorded (epoch now %d)", round, i, e, c.epoch.Load())
				}
				time.Sleep(touchTick)
			}
		}
	}
}
