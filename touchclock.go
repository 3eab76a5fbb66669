package ext4io

import (
	"sync"
	"sync/atomic"
	"time"
)

// touchClock stamps the times of shared-lock direct writes and of buffered
// writes without reading the clock in each write. Reading it (time.Since
// on the monotonic clock) was the largest single cost of an overwrite
// (BenchmarkEngineOverwrite; docs/performance.md, "The touch clock"). ext4
// takes these times from the kernel's coarse clock, a memory load; this is
// the same idea with a bound that the coarse clock does not give: a file's
// time is never before the start of its last write.
//
// Time is cut into epochs. A ticker goroutine ends the current epoch every
// touchTick while writes come, and stops after touchIdleTicks quiet ticks.
// A write stamps its inode with the current epoch (inode.touchEpoch); only
// the first write of an inode in an epoch takes mu, to put the inode on
// the epoch's list. Ending an epoch stores the next epoch number and then
// reads the clock once: every write that saw the old epoch started before
// that reading, which becomes the end time of each inode on the list.
// When the time is applied to the inode (applyTouchLocked), it is that end
// time, or the current time while the inode's epoch has not ended: never
// before the last write started, and at most about one tick after it
// (more if the ticker runs late).
type touchClock struct {
	// epoch is the current epoch, from 1; stored under mu, loaded by
	// every shared-lock direct write. The padding keeps it off mu's line.
	epoch atomic.Uint64
	_     [56]byte

	mu      sync.Mutex
	list    []*inode // inodes stamped with the current epoch (guarded by mu)
	running bool     // the ticker goroutine runs (guarded by mu)
	closed  bool     // Volume.Close stopped the clock (guarded by mu)
	idle    int      // epochs in a row that ended with an empty list (guarded by mu)
	stop    chan struct{}
	done    chan struct{} // closed when the ticker goroutine returns
}

// touchTick is the length of an epoch: a time is at most about this much
// after its write started. Linux's coarse clock, which ext4 stamps with,
// moves every jiffy (4 ms at HZ=250), and its times are up to that much
// before the write. Shorter ticks cost the writes: the ticker goroutine's
// wake-ups take the CPUs from running writers and raise their tail
// latency, which a lock-free register did not cure (docs/performance.md,
// "The touch clock", has the runs with 1, 4 and 10 ms).
const (
	touchTick      = 10 * time.Millisecond
	touchIdleTicks = 16
)

func (c *touchClock) init() {
	c.epoch.Store(1)
	c.stop = make(chan struct{})
}

// stamp records that a shared-lock direct write of n starts now.
func (c *touchClock) stamp(n *inode) {
	if n.touchEpoch.Load() != c.epoch.Load() {
		c.register(n)
	}
}

func (c *touchClock) register(n *inode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.epoch.Load() // the epoch cannot end while mu is held
	if n.touchEpoch.Load() == e {
		return
	}
	n.touchEpoch.Store(e)
	c.list = append(c.list, n)
	c.idle = 0
	if !c.running && !c.closed {
		c.running = true
		c.done = make(chan struct{})
		go c.run(c.done)
	}
}

func (c *touchClock) run(done chan struct{}) {
	defer close(done)
	t := time.NewTicker(touchTick)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-c.stop:
		}
		if !c.tick() {
			return
		}
	}
}

// tick ends the current epoch and reports whether the ticker goes on.
func (c *touchClock) tick() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.list) == 0 {
		c.idle++
	}
	c.endEpochLocked()
	if c.closed || c.idle >= touchIdleTicks {
		c.running = false
		return false
	}
	return true
}

func (c *touchClock) endEpochLocked() {
	e := c.epoch.Load()
	c.epoch.Store(e + 1)
	if len(c.list) == 0 {
		return
	}
	// After the store: every write that loaded e started before this.
	end := time.Now().UnixNano()
	for _, n := range c.list {
		if n.touchEpoch.Load() == e { // else applied meanwhile
			n.touchEndEpoch, n.touchEnd = e, end
		}
	}
	clear(c.list)
	c.list = c.list[:0]
}

// take clears n's stamp and returns the time to give it, or false if it
// has none.
func (c *touchClock) take(n *inode) (time.Time, bool) {
	if n.touchEpoch.Load() == 0 {
		return time.Time{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := n.touchEpoch.Swap(0)
	if e == 0 {
		return time.Time{}, false
	}
	if e != c.epoch.Load() && n.touchEndEpoch == e {
		return time.Unix(0, n.touchEnd), true
	}
	return time.Now(), true // the epoch runs: now is after the write started
}

// close stops the ticker and waits for it. Stamps stay valid: take gives
// the current time for an epoch that has not ended.
func (c *touchClock) close() {
	c.mu.Lock()
	c.closed = true
	done := c.done
	running := c.running
	c.mu.Unlock()
	if running {
		close(c.stop)
		<-done
	}
}
