package iomap_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/iomap"
)

// A device write error in the second mapping: EndIO and End see only the
// first mapping's bytes, the failed blocks stay unwritten and read zeroes.
func TestDirectWritePartialFailure(t *testing.T) {
	const bs = 4096
	mem := patternDev(t, 1<<20)
	dev := errordev.New(mem, errordev.OnIndex(errordev.Write, 1))
	fs := newTinyFS(bs, 0, 256)
	fs.set(0, bWritten, 10) // block 0 mapped; blocks 1-2 holes
	var ends []int64
	ops := iomap.Funcs{BeginFunc: fs.Begin, EndFunc: func(off, length, written int64, f iomap.Flags, m iomap.Mapping) error {
		ends = append(ends, written)
		return fs.End(off, length, written, f, m)
	}}
	var endio []int64
	opt := &iomap.DioOptions{BlockSize: bs, EndIO: func(off, n int64, m iomap.Mapping) error {
		endio = append(endio, off, n)
		return fs.EndIO(off, n, m)
	}}
	data := bytes.Repeat([]byte{7}, 3*bs)
	n, err := iomap.DirectWrite(dev, ops, data, 0, opt)
	if !errors.Is(err, errordev.ErrInjected) || !errors.Is(err, iomap.ErrIO) {
		t.Fatalf("err = %v, want injected I/O error", err)
	}
	if n != bs {
		t.Fatalf("wrote %d, want %d", n, bs)
	}
	if len(endio) != 2 || endio[0] != 0 || endio[1] != bs {
		t.Fatalf("EndIO calls %v, want [0 %d]", endio, bs)
	}
	if len(ends) != 2 || ends[0] != bs || ends[1] != 0 {
		t.Fatalf("End written %v, want [%d 0]", ends, bs)
	}
	for lb := int64(1); lb < 3; lb++ {
		if st := fs.state(lb); st != bUnwritten {
			t.Fatalf("block %d state %d, want unwritten", lb, st)
		}
	}
	got := make([]byte, 3*bs)
	if _, err := iomap.DirectRead(mem, fs, got, 0, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:bs], data[:bs]) || !bytes.Equal(got[bs:], make([]byte, 2*bs)) {
		t.Fatal("read back: want data then zeroes")
	}
}

func TestDirectMisaligned(t *testing.T) {
	dev := memdev.NewBlockSize(1<<20, 4096)
	fs := newTinyFS(4096, 0, 256)
	for _, tc := range []struct {
		off int64
		n   int
	}{{512, 4096}, {0, 512}, {4096, 4097}, {-4096, 4096}} {
		if _, err := iomap.DirectWrite(dev, fs, make([]byte, tc.n), tc.off, fs.dio()); !errors.Is(err, iomap.ErrInvalid) {
			t.Errorf("write (%d,%d): %v, want ErrInvalid", tc.off, tc.n, err)
		}
		if _, err := iomap.DirectRead(dev, fs, make([]byte, tc.n), tc.off, nil); !errors.Is(err, iomap.ErrInvalid) {
			t.Errorf("read (%d,%d): %v, want ErrInvalid", tc.off, tc.n, err)
		}
	}
	if fs.state(0) != 0 || fs.state(1) != 0 {
		t.Fatal("misaligned request allocated")
	}
}

// Sub-block writes into new blocks zero the rest of the block on a device
// pre-filled with a pattern; writes into mapped blocks do not.
func TestDirectSubBlockZeroing(t *testing.T) {
	const bs = 4096
	dev := patternDev(t, 1<<20)
	fs := newTinyFS(bs, 0, 256)
	fs.set(4, bWritten, 20)
	var ctr iomap.CounterSet
	opt := fs.dio()
	opt.Counters = &ctr
	data := bytes.Repeat([]byte{9}, 1024)
	// [1536, 2560) in hole block 0: head 1536 and tail 1536 zeroed.
	if _, err := iomap.DirectWrite(dev, fs, data, 1536, opt); err != nil {
		t.Fatal(err)
	}
	// Same into mapped block 4: no zeroing, pattern stays.
	if _, err := iomap.DirectWrite(dev, fs, data, 4*bs+1536, opt); err != nil {
		t.Fatal(err)
	}
	d := ctr.Read()
	if d.ZeroedBytes < bs-1024 {
		t.Errorf("zeroed %d bytes, want >= %d", d.ZeroedBytes, bs-1024)
	}
	if fs.state(0) != bWritten {
		t.Fatalf("block 0 state %d after EndIO, want written", fs.state(0))
	}
	got := make([]byte, bs)
	if _, err := iomap.DirectRead(dev, fs, got, 0, nil); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, bs)
	copy(want[1536:], data)
	if !bytes.Equal(got, want) {
		t.Fatal("new block: head/tail not zeroed")
	}
	if _, err := iomap.DirectRead(dev, fs, got, 4*bs, nil); err != nil {
		t.Fatal(err)
	}
	want = bytes.Repeat([]byte{0xA5}, bs)
	copy(want[1536:], data)
	if !bytes.Equal(got, want) {
		t.Fatal("mapped block: contents outside the write changed")
	}
}

// Iter: bad mappings and zero progress are errors, End always runs.
func TestIterContract(t *testing.T) {
	var ends int
	bad := iomap.Funcs{
		BeginFunc: func(off, length int64, f iomap.Flags) (iomap.Mapping, error) {
			return iomap.Mapping{Offset: off + 1, Length: 10, Type: iomap.Hole}, nil
		},
		EndFunc: func(off, length, written int64, f iomap.Flags, m iomap.Mapping) error { ends++; return nil },
	}
	if _, err := iomap.Iter(bad, 0, 100, 0, func(m iomap.Mapping, off, n int64) (int64, error) { return n, nil }); !errors.Is(err, iomap.ErrBadMapping) {
		t.Fatalf("bad mapping: %v", err)
	}
	good := iomap.Funcs{
		BeginFunc: func(off, length int64, f iomap.Flags) (iomap.Mapping, error) {
			return iomap.Mapping{Offset: off, Length: 7, Type: iomap.Hole}, nil
		},
		EndFunc: bad.EndFunc,
	}
	ends = 0
	if _, err := iomap.Iter(good, 0, 100, 0, func(m iomap.Mapping, off, n int64) (int64, error) { return 0, nil }); !errors.Is(err, iomap.ErrNoProgress) {
		t.Fatalf("no progress: %v", err)
	}
	if ends != 1 {
		t.Fatalf("End called %d times, want 1", ends)
	}
	var calls int
	n, err := iomap.Iter(good, 3, 30, 0, func(m iomap.Mapping, off, n int64) (int64, error) {
		calls++
		if n != min(7, 33-off) {
			t.Errorf("n = %d at %d", n, off)
		}
		return n, nil
	})
	if err != nil || n != 30 || calls != 5 {
		t.Fatalf("short mappings: n %d calls %d err %v", n, calls, err)
	}
	boom := errors.New("boom")
	ends = 0
	n, err = iomap.Iter(good, 0, 100, 0, func(m iomap.Mapping, off, n int64) (int64, error) { return 3, boom })
	if !errors.Is(err, boom) || n != 3 || ends != 1 {
		t.Fatalf("fn error: n %d ends %d err %v", n, ends, err)
	}
}

// A stale mapping is dropped and looked up again; the data lands.
func TestBufferedWriteStale(t *testing.T) {
	dev := memdev.New(1 << 20)
	fs := newTinyFS(4096, 0, 256)
	c, err := iomap.NewPageCache(dev, iomap.PageCacheOptions{PageSize: 4096, MaxPages: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var begins, staleOnce int
	ops := iomap.Funcs{
		BeginFunc: func(off, length int64, f iomap.Flags) (iomap.Mapping, error) {
			begins++
			return fs.Begin(off, length, f)
		},
		EndFunc: fs.End,
		ValidFunc: func(m iomap.Mapping) bool {
			if m.Offset == 0 && staleOnce == 0 {
				staleOnce++
				return false
			}
			return fs.Valid(m)
		},
	}
	before := c.Counters()
	data := bytes.Repeat([]byte{3}, 100)
	if n, err := iomap.BufferedWrite(c, ops, 1, data, 10, 0); err != nil || n != 100 {
		t.Fatalf("write %d %v", n, err)
	}
	if stale := c.Counters().Sub(before).StaleMappings; begins != 2 || stale != 1 {
		t.Fatalf("begins %d, stale %d; want 2, 1", begins, stale)
	}
	got := make([]byte, 110)
	if _, err := iomap.BufferedRead(c, ops, 1, got, 0, 110); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[10:], data) || !bytes.Equal(got[:10], make([]byte, 10)) {
		t.Fatal("data after stale retry")
	}
}

// TestDirectCounters: direct I/O counts each Begin and its End under the
// request's kind and Direct (one fused add per segment), and a failed
// Begin as a Begin only.
func TestDirectCounters(t *testing.T) {
	const bs = 4096
	dev := patternDev(t, 1<<20)
	fs := newTinyFS(bs, 0, 256)
	fs.set(4, bWritten, 20)
	fs.set(5, bWritten, 40) // not contiguous with block 4: two mappings
	var ctr iomap.CounterSet
	opt := fs.dio()
	opt.Counters = &ctr
	if _, err := iomap.DirectWrite(dev, fs, make([]byte, 2*bs), 4*bs, opt); err != nil {
		t.Fatal(err)
	}
	if _, err := iomap.DirectRead(dev, fs, make([]byte, bs), 4*bs, &iomap.DioOptions{Counters: &ctr}); err != nil {
		t.Fatal(err)
	}
	failing := iomap.Funcs{BeginFunc: func(off, length int64, flags iomap.Flags) (iomap.Mapping, error) {
		return iomap.Mapping{}, iomap.ErrInvalid
	}}
	if _, err := iomap.DirectWrite(dev, failing, make([]byte, bs), 0, &iomap.DioOptions{Counters: &ctr}); err == nil {
		t.Fatal("a failing Begin did not fail the write")
	}
	// Without a CounterSet nothing is counted.
	if _, err := iomap.DirectRead(dev, fs, make([]byte, bs), 4*bs, nil); err != nil {
		t.Fatal(err)
	}
	d := ctr.Read()
	want := iomap.Counters{
		Begins:       iomap.OpCounts{Read: 1, Write: 3, Direct: 4},
		Ends:         iomap.OpCounts{Read: 1, Write: 2, Direct: 3},
		DeviceReads:  1,
		DeviceWrites: 2,
	}
	d.EndIOBytes = 0
	if d != want {
		t.Fatalf("counters moved by %+v, want %+v", d, want)
	}
}

// TestReportCounters: Fiemap and SeekData count their Begin and End calls
// under Report on the CounterSet their options name.
func TestReportCounters(t *testing.T) {
	const bs = 4096
	fs := newTinyFS(bs, 0, 256)
	fs.set(4, bWritten, 20)
	var ctr iomap.CounterSet
	if err := iomap.Fiemap(fs, 0, 8*bs, iomap.FiemapOptions{Counters: &ctr}, func(iomap.Extent) error { return nil }); err != nil {
		t.Fatal(err)
	}
	d := ctr.Read()
	if d.Begins.Report == 0 || d.Ends.Report != d.Begins.Report || d.Begins.Read+d.Begins.Write != 0 {
		t.Fatalf("after Fiemap: %+v", d)
	}
	if off, err := iomap.SeekData(fs, 0, 8*bs, &iomap.SeekOptions{Counters: &ctr}); err != nil || off != 4*bs {
		t.Fatalf("SeekData: %d, %v", off, err)
	}
	if n := ctr.Read().Begins.Report; n <= d.Begins.Report {
		t.Fatalf("SeekData counted no Begin: %d, then %d", d.Begins.Report, n)
	}
}
