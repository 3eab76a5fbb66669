package ext4io

import (
	"testing"
	"time"
)

// TestFCGroupWaitsForRecentWriters: a step waits for as many fsyncs as a
// run built lately had, not only for the writers the last flush released
// (waitReturning, recentWriters). With none of those returning and one
// fsync in the open run, after a run of three, it waits until the
// deadline (the average flush after the last one, here fcMaxWait) when
// no other fsync joins; without the second condition it returns at once.
// A single writer never waits, and the size of runs older than two
// fcPeakWindows no longer counts.
func TestFCGroupWaitsForRecentWriters(t *testing.T) {
	g := &fcGroup{}
	g.cond.L = &g.mu
	g.built(3)
	g.built(1)
	if got := g.recentWriters(); got != 3 {
		t.Fatalf("recentWriters() = %d after runs of 3 and 1, want 3", got)
	}
	g.mu.Lock()
	g.open = &fcRun{members: 1}
	g.flushAvg, g.flushDone = time.Second, time.Now()
	g.waitReturning()
	waited := time.Since(g.flushDone)
	g.mu.Unlock()
	if waited < fcMaxWait {
		t.Fatalf("waited %v for the writers of a run of 3 with 1 joined, want the deadline, %v", waited, fcMaxWait)
	}

	// The fsyncs a recent run had joined: nothing to wait for.
	g.open.members = 3
	if g.shortOfWriters() {
		t.Fatal("waits with as many fsyncs as the recent runs had")
	}

	// Runs older than two windows do not count: a writer left alone
	// no longer waits for the others.
	g.peakStart = g.peakStart.Add(-3 * fcPeakWindow)
	if got := g.recentWriters(); got != 0 {
		t.Fatalf("recentWriters() = %d after three windows, want 0", got)
	}
	g.built(1)
	if got := g.recentWriters(); got != 1 {
		t.Fatalf("recentWriters() = %d after a run of 1 in a new window, want 1", got)
	}
	g.open.members = 1
	if g.shortOfWriters() {
		t.Fatal("a single writer waits")
	}
}
