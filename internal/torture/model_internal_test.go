package torture

import (
	"bytes"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
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

// TestCompareX: a file's attributes must equal one of the candidate sets,
// values included; an extra, a missing or a changed attribute fails.
func TestCompareX(t *testing.T) {
	dev := memdev.New(8 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	f, err := v.Create("/f")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	big := bytes.Repeat([]byte{7}, 2000) // in the external block
	if err := v.Setxattr("/f", "user.a", []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	if err := v.Setxattr("/f", "trusted.b", big, 0); err != nil {
		t.Fatal(err)
	}
	have := xset{"user.a": []byte("1"), "trusted.b": big}
	for _, c := range []struct {
		name  string
		cands []xset
		ok    bool
	}{
		{"equal", []xset{have}, true},
		{"one of several", []xset{{}, {"user.a": []byte("1")}, have}, true},
		{"none", []xset{nil}, false},
		{"missing one", []xset{{"user.a": []byte("1")}}, false},
		{"extra one", []xset{{"user.a": []byte("1"), "trusted.b": big, "user.c": nil}}, false},
		{"value differs", []xset{{"user.a": []byte("2"), "trusted.b": big}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := compareX(v, "/f", c.cands)
			if (err == nil) != c.ok {
				t.Fatalf("compareX: %v, want ok=%v", err, c.ok)
			}
		})
	}
}
