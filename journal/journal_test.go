package journal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

const (
	tBS      = 1024
	tJOff    = 1   // journal block 0 lives at device block 1
	tJLen    = 128 // journal blocks
	tHome0   = 200 // first home block the workload touches
	tHomeN   = 48
	tDevBlks = 300
)

func testConfig(dev *memDev) Config {
	return Config{Dev: dev, BlockSize: tBS, Blocks: tJLen, CommitInterval: -1,
		Map: func(j uint32) (uint64, error) { return uint64(j) + tJOff, nil }}
}

func initialBlock(b uint64) []byte {
	return bytes.Repeat([]byte{byte(b), 0xEE}, tBS/2)
}

func newTestDev(t testing.TB) *memDev {
	d := newMemDev(tDevBlks * tBS)
	for b := uint64(tHome0); b < tHome0+tHomeN; b++ {
		d.WriteAt(initialBlock(b), int64(b)*tBS)
	}
	d.Flush()
	return d
}

type op struct {
	blk    uint64
	data   []byte // nil: revoke
	revoke bool
}

// model applies transactions' ops in tid order.
type model struct {
	mu  sync.Mutex
	ops map[uint32][]op
}

// expect returns the expected contents (nil = unknown: revoked) of each
// home block once transactions up to and including last are applied.
func (m *model) expect(first, last uint32, committed bool) map[uint64][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[uint64][]byte{}
	for b := uint64(tHome0); b < tHome0+tHomeN; b++ {
		out[b] = initialBlock(b)
	}
	if !committed {
		return out
	}
	for tid := first; tidGEQ(last, tid); tid++ {
		for _, o := range m.ops[tid] {
			if o.revoke {
				out[o.blk] = nil
			} else {
				out[o.blk] = o.data
			}
		}
	}
	return out
}

// checkImage recovers img and compares home blocks with want. It returns
// an error rather than failing: it runs on the commit goroutine.
func checkImage(img []byte, want map[uint64][]byte, ctx string) error {
	d := memDevFrom(img)
	j, err := Open(testConfig(d))
	if err != nil {
		return fmt.Errorf("%s: open: %v", ctx, err)
	}
	if _, err := j.Recover(); err != nil {
		return fmt.Errorf("%s: recover: %v", ctx, err)
	}
	for b, w := range want {
		if w == nil {
			continue
		}
		if got := d.cur[b*tBS : (b+1)*tBS]; !bytes.Equal(got, w) {
			return fmt.Errorf("%s: block %d holds %x..., want %x...", ctx, b, got[:8], w[:8])
		}
	}
	j2, err := Open(testConfig(d))
	if err != nil || j2.NeedsRecovery() {
		return fmt.Errorf("%s: journal not empty after recovery: %v", ctx, err)
	}
	return nil
}

// commitsIn returns the commit-block sequences among writes to the journal
// area of img-bound events.
func commitSeq(data []byte, off int64) (uint32, bool) {
	if len(data) != tBS || off < tJOff*tBS || off >= (tJOff+tJLen)*tBS {
		return 0, false
	}
	h := decodeHeader(data)
	return h.Sequence, h.Magic == Magic && h.BlockType == BlockTypeCommit
}

// TestCrashAtEveryFlush runs random transactions and, at every device
// flush, recovers a copy of what a crash would leave (durable writes, plus a
// random subset of the unflushed ones): every transaction whose commit block
// survived must be at home, nothing newer may be.
func TestCrashAtEveryFlush(t *testing.T) {
	seeds := 6
	if testing.Short() {
		seeds = 2
	}
	for s := range seeds {
		seed := uint64(time.Now().UnixNano()) + uint64(s)
		t.Run(fmt.Sprint(s), func(t *testing.T) {
			t.Logf("seed %d", seed)
			crashTest(t, seed, s)
		})
	}
}

func crashTest(t *testing.T, seed uint64, variant int) {
	rng := rand.New(rand.NewPCG(seed, 1))
	dev := newTestDev(t)
	opts := CreateOptions{UUID: [16]byte{1, 2, 3}, Is64Bit: variant%2 == 0, CsumV3: variant%3 == 0, CsumV2: variant%3 == 1, CsumV1: variant == 5, Sequence: 7}
	j, err := Create(testConfig(dev), opts)
	if err != nil {
		t.Fatal(err)
	}
	m := &model{ops: map[uint32][]op{}}
	var (
		durableMax uint32 = opts.Sequence - 1
		synced     uint32 = opts.Sequence - 1
		syncMu     sync.Mutex
		checks     int
		failures   int
	)
	crng := rand.New(rand.NewPCG(seed, 2))
	dev.onFlush = func(d *memDev) {
		// Crash before this flush: durable bytes plus a torn subset.
		img := append([]byte(nil), d.durable...)
		last := durableMax
		for _, w := range d.pending {
			if crng.IntN(2) == 0 {
				copy(img[w.off:], w.data)
				if s, ok := commitSeq(w.data, w.off); ok && tidGT(s, last) {
					last = s
				}
			}
		}
		syncMu.Lock()
		if tidGT(synced, last) {
			t.Errorf("seed %d: synced tid %d not durable (last %d)", seed, synced, last)
		}
		syncMu.Unlock()
		if err := checkImage(img, m.expect(opts.Sequence, last, true), fmt.Sprintf("seed %d flush %d", seed, d.flushes)); err != nil && failures < 3 {
			failures++
			t.Error(err)
		}
		checks++
		for _, w := range d.pending {
			if s, ok := commitSeq(w.data, w.off); ok && tidGT(s, durableMax) {
				durableMax = s
			}
		}
	}
	for range 50 {
		h, err := j.Start(1 + rng.IntN(6))
		if err != nil {
			t.Fatal(err)
		}
		for range h.credits {
			b := tHome0 + uint64(rng.IntN(tHomeN))
			if rng.IntN(6) == 0 {
				if err := h.Revoke(b); err != nil {
					t.Fatal(err)
				}
				m.mu.Lock()
				m.ops[h.TID()] = append(m.ops[h.TID()], op{blk: b, revoke: true})
				m.mu.Unlock()
				continue
			}
			data := make([]byte, tBS)
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			if rng.IntN(5) == 0 {
				be.PutUint32(data, Magic) // exercise escaping
			}
			if err := h.GetWriteAccess(b); err != nil {
				t.Fatal(err)
			}
			if err := h.Dirty(b, data); err != nil {
				t.Fatal(err)
			}
			m.mu.Lock()
			m.ops[h.TID()] = append(m.ops[h.TID()], op{blk: b, data: data})
			m.mu.Unlock()
			var got [tBS]byte
			if !j.Lookup(b, got[:]) || !bytes.Equal(got[:], data) {
				t.Fatalf("Lookup(%d) does not return the running copy", b)
			}
		}
		tid := h.TID()
		if err := h.Stop(); err != nil {
			t.Fatal(err)
		}
		switch rng.IntN(4) {
		case 0:
			if err := j.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
			syncMu.Lock()
			synced = tid
			syncMu.Unlock()
		case 1:
			if rng.IntN(4) == 0 {
				if err := j.Checkpoint(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	// After Close everything is home and the journal is empty.
	j.mu.Lock()
	lastTid := j.mu.commitSeq
	j.mu.Unlock()
	want := m.expect(opts.Sequence, lastTid, true)
	for b, w := range want {
		if w != nil && !bytes.Equal(dev.cur[b*tBS:(b+1)*tBS], w) {
			t.Fatalf("after Close block %d not home", b)
		}
	}
	if sb := j.Superblock(); sb.Start != 0 {
		t.Fatalf("s_start %d after Close", sb.Start)
	}
	if checks < 5 {
		t.Fatalf("only %d crash points", checks)
	}
	t.Logf("%d crash points, last tid %d", checks, lastTid)
}

func TestConcurrentHandlesGroupCommit(t *testing.T) {
	dev := newTestDev(t)
	j, err := Create(testConfig(dev), CreateOptions{CsumV3: true, Is64Bit: true})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 30 {
				h, err := j.Start(2)
				if err != nil {
					t.Error(err)
					return
				}
				b := uint64(tHome0 + g*2 + i%2)
				h.GetWriteAccess(b)
				h.Dirty(b, bytes.Repeat([]byte{byte(g), byte(i)}, tBS/2))
				h.Stop()
				if err := j.Sync(context.Background()); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	for g := range 8 {
		want := bytes.Repeat([]byte{byte(g), 29}, tBS/2)
		b := tHome0 + g*2 + 1
		if !bytes.Equal(dev.cur[b*tBS:(b+1)*tBS], want) {
			t.Fatalf("goroutine %d's last write not home", g)
		}
	}
}

func TestHandleErrors(t *testing.T) {
	dev := newTestDev(t)
	j, err := Create(testConfig(dev), CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Start(1000); !errors.Is(err, ErrInvalid) {
		t.Fatalf("huge credits: %v", err)
	}
	h, _ := j.Start(1)
	if err := h.Dirty(tHome0, make([]byte, tBS)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("dirty without access: %v", err)
	}
	h.GetWriteAccess(tHome0)
	if err := h.GetWriteAccess(tHome0 + 1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("over credits: %v", err)
	}
	h.Stop()
	if err := h.Stop(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("double stop: %v", err)
	}
	// I/O error during commit aborts the journal.
	h, _ = j.Start(1)
	h.GetWriteAccess(tHome0)
	h.Dirty(tHome0, make([]byte, tBS))
	h.Stop()
	dev.mu.Lock()
	dev.failNext = errors.New("boom")
	dev.mu.Unlock()
	if err := j.Sync(context.Background()); !errors.Is(err, ErrIO) {
		t.Fatalf("sync after write error: %v", err)
	}
	if _, err := j.Start(1); !errors.Is(err, ErrIO) {
		t.Fatalf("start after abort: %v", err)
	}
}

func TestOpenRejectsBadSuperblocks(t *testing.T) {
	dev := newTestDev(t)
	if _, err := Create(testConfig(dev), CreateOptions{CsumV3: true}); err != nil {
		t.Fatal(err)
	}
	good := dev.snapshot()
	for i, mut := range []func(b []byte){
		func(b []byte) { b[0] ^= 1 },                    // magic
		func(b []byte) { b[0x40] ^= 1 },                 // checksum
		func(b []byte) { be.PutUint32(b[0x14:], 0) },    // s_first
		func(b []byte) { be.PutUint32(b[0x10:], 9999) }, // s_maxlen
		func(b []byte) { be.PutUint32(b[0x28:], 0x80) }, // unknown incompat
	} {
		img := append([]byte(nil), good...)
		mut(img[tJOff*tBS:])
		if i > 1 {
			sb, _ := DecodeSuperblock(img[tJOff*tBS:])
			sb.SetChecksum()
			sb.Encode(img[tJOff*tBS:])
		}
		if _, err := Open(testConfig(memDevFrom(img))); !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupported) {
			t.Fatalf("mutation %d: %v", i, err)
		}
	}
}

// BenchmarkFsync: each goroutine runs Start/Dirty/Stop/Sync on an in-memory
// device whose Flush takes 200µs. Reports commits/s and flushes per fsync.
func BenchmarkFsync(b *testing.B) {
	for _, g := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			dev := newMemDev(4096 * tBS)
			cfg := Config{Dev: dev, BlockSize: tBS, Blocks: 2048, CommitInterval: -1}
			j, err := Create(cfg, CreateOptions{CsumV3: true, Is64Bit: true})
			if err != nil {
				b.Fatal(err)
			}
			dev.latency = 200 * time.Microsecond
			f0, c0 := dev.flushCount(), j.Stats().Commits
			var wg sync.WaitGroup
			per := (b.N + g - 1) / g
			b.ResetTimer()
			start := time.Now()
			for k := range g {
				wg.Add(1)
				go func() {
					defer wg.Done()
					data := make([]byte, tBS)
					for i := range per {
						h, err := j.Start(1)
						if err != nil {
							b.Error(err)
							return
						}
						blk := uint64(2100 + k*8 + i%8)
						h.GetWriteAccess(blk)
						h.Dirty(blk, data)
						h.Stop()
						if err := j.Sync(context.Background()); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			el := time.Since(start)
			b.StopTimer()
			fsyncs := float64(per * g)
			commits := float64(j.Stats().Commits - c0)
			b.ReportMetric(commits/el.Seconds(), "commits/s")
			b.ReportMetric(float64(dev.flushCount()-f0)/fsyncs, "flushes/fsync")
			b.ReportMetric(fsyncs/el.Seconds(), "fsyncs/s")
			j.Close()
		})
	}
}
