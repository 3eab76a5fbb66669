package torture

import (
	"bytes"
	"testing"
)

// TestSnapshotAt: a crash after log entry p sees the state after every
// call that returned by p (post stamp <= p+1) and, for a call begun by p
// (pre stamp <= p), the state with it in flight.
func TestSnapshotAt(t *testing.T) {
	w := newWorker(nil, "/d", 1, 4096)
	clock := 0
	w.clock = func() int { return clock }
	w.hist = append(w.hist, w.snapshot(false, "start")) // 0
	clock = 3
	w.pre("fsync")                                      // begun with 3 entries logged
	clock = 7                                           // its device operations are entries 3..6
	w.hist = append(w.hist, w.snapshot(false, "fsync")) // returned with 7
	clock = 9
	w.pre("write")
	for _, c := range []struct {
		p    int
		op   string
		pre  bool
		none bool
	}{
		{-1, "start", false, false},
		{2, "start", false, false},
		{3, "fsync", true, false},
		{5, "fsync", true, false},
		{6, "fsync", false, false},
		{8, "fsync", false, false},
		{9, "write", true, false},
		{100, "write", true, false},
	} {
		s, ok := w.at(c.p)
		if !ok || s.op != c.op || s.pre != c.pre {
			t.Errorf("at(%d) = %q pre=%v ok=%v, want %q pre=%v", c.p, s.op, s.pre, ok, c.op, c.pre)
		}
	}
	w.hist = w.hist[:1]
	w.hist[0].idx = 5
	if _, ok := w.at(3); ok {
		t.Error("at before the first snapshot found one")
	}
}

// TestKnownBlocks: versions' blocks, and those blocks with bytes zeroed,
// are known; other data is stale.
func TestKnownBlocks(t *testing.T) {
	w := newWorker(nil, "/d", 1, 4096)
	v := w.randBytes(3*4096 + 100)
	w.addVersion(v)
	if !w.known(v[4096:8192]) {
		t.Error("a version's block is not known")
	}
	tail := make([]byte, 4096)
	copy(tail, v[3*4096:])
	if !w.known(tail) {
		t.Error("a version's padded last block is not known")
	}
	z := bytes.Clone(v[:4096])
	clear(z[100:300])
	if !w.known(z) {
		t.Error("a version's block with bytes zeroed is not known")
	}
	if w.known(w.randBytes(4096)) {
		t.Error("random data is known")
	}
}
