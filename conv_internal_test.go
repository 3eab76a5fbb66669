package ext4io

import (
	"bytes"
	"cmp"
	"errors"
	"github.com/ext4io/ext4io/alloc"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/esc"
	"github.com/ext4io/ext4io/extent"
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/ext4io/ext4io/iomap"
	"github.com/stretchr/testify/require"
)

func TestConvQueueOverlay(t *testing.T) {
	var q convQueue
	e := esc.Extent{Lblk: 100, Len: 100, Pblk: 1000, Status: esc.Unwritten}
	if got := q.overlay(e, 150); got != e {
		t.Fatalf("empty queue changed %v to %v", e, got)
	}
	q.add(convRun{lblk: 120, n: 5, pblk: 1020})
	q.add(convRun{lblk: 90, n: 15, pblk: 990}) // overlaps e's start
	q.add(convRun{lblk: 160, n: 1, pblk: 1060})
	q.add(convRun{lblk: 500, n: 10, pblk: 5000}) // outside e
	for _, c := range []struct {
		lblk uint32
		want esc.Extent
	}{
		{100, esc.Extent{Lblk: 100, Len: 5, Pblk: 1000, Status: esc.Written}},
		{104, esc.Extent{Lblk: 100, Len: 5, Pblk: 1000, Status: esc.Written}},
		{105, esc.Extent{Lblk: 105, Len: 15, Pblk: 1005, Status: esc.Unwritten}},
		{119, esc.Extent{Lblk: 105, Len: 15, Pblk: 1005, Status: esc.Unwritten}},
		{122, esc.Extent{Lblk: 120, Len: 5, Pblk: 1020, Status: esc.Written}},
		{125, esc.Extent{Lblk: 125, Len: 35, Pblk: 1025, Status: esc.Unwritten}},
		{160, esc.Extent{Lblk: 160, Len: 1, Pblk: 1060, Status: esc.Written}},
		{161, esc.Extent{Lblk: 161, Len: 39, Pblk: 1061, Status: esc.Unwritten}},
		{199, esc.Extent{Lblk: 161, Len: 39, Pblk: 1061, Status: esc.Unwritten}},
	} {
		if got := q.overlay(e, c.lblk); got != c.want {
			t.Errorf("overlay at %d: %v, want %v", c.lblk, got, c.want)
		}
	}
	w := esc.Extent{Lblk: 100, Len: 100, Pblk: 1000, Status: esc.Written}
	if got := q.overlay(w, 122); got != w {
		t.Errorf("a written extent changed to %v", got)
	}
}

// TestQueuedConversions: direct writes into preallocated space under the
// shared lock leave the extent tree alone (their conversions queue), read
// back at once, also after the extent-status cache forgot them (a miss is
// answered from the tree corrected by the queue), go into the tree with a
// full queue, Extents, an exclusive operation or a commit, and the image
// passes e2fsck with the data in place.
func TestQueuedConversions(t *testing.T) {
	t.Parallel()
	dev, v := memVolume(t, 256<<20, 4096)
	const blocks = 3 * convQueueMax // 96 MiB: one unwritten extent, room to fill the queue
	f, d := preallocated(t, v, "f", blocks*4096)
	// Stale bytes in the preallocated blocks, which no read may return.
	err := f.Fiemap(0, blocks*4096, func(e iomap.Extent) error {
		_, err := dev.WriteAt(bytes.Repeat([]byte{0xAB}, int(e.Length)), e.Physical)
		return err
	})
	require.NoError(t, err)
	require.NoError(t, v.Sync())
	model := make([]byte, blocks*4096)
	rng := rand.New(rand.NewPCG(3, 4))
	write := func(blk int) {
		t.Helper()
		p := bytes.Repeat([]byte{byte(1 + rng.IntN(250))}, 4096)
		if _, err := d.WriteAt(p, int64(blk)*4096); err != nil {
			t.Fatal(err)
		}
		copy(model[blk*4096:], p)
	}
	check := func(what string) {
		t.Helper()
		got := make([]byte, len(model))
		if _, err := d.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, model) {
			i := 0
			for got[i] == model[i] {
				i++
			}
			t.Fatalf("%s: block %d holds %#x, want %#x", what, i/4096, got[i], model[i])
		}
	}
	treeExtents := func() int {
		k := 0
		if err := f.m.tree.Walk(func(extent.Extent) error { k++; return nil }); err != nil {
			t.Fatal(err)
		}
		return k
	}
	before := v.Counters()
	for i := 0; i < 100; i++ {
		write(rng.IntN(blocks))
	}
	c := v.Counters()
	if q := c.ConversionsQueued - before.ConversionsQueued; q == 0 || q != c.Conversions-before.Conversions {
		t.Fatalf("%d conversions queued of %d", q, c.Conversions-before.Conversions)
	}
	if c.MetaUpdates != before.MetaUpdates || c.ConversionBatches != before.ConversionBatches {
		t.Fatalf("queued writes made %d metadata updates, %d batches", c.MetaUpdates-before.MetaUpdates, c.ConversionBatches-before.ConversionBatches)
	}
	if k := treeExtents(); k != 1 {
		t.Fatalf("the tree changed before any batch: %d extents", k)
	}
	check("after the writes")
	// Forget the cached mappings: lookups go to the tree and the queue.
	f.n.dataMu.Lock()
	f.m.drop(0, blocks)
	f.n.dataMu.Unlock()
	check("after the cache forgot the written blocks")
	if k := treeExtents(); k != 1 {
		t.Fatalf("the tree changed on reads: %d extents", k)
	}
	// Extents applies the queue.
	ext, err := d.Extents()
	require.NoError(t, err)
	written := 0
	for _, e := range ext {
		if !e.Unwritten {
			written += int(e.Length)
		}
	}
	if written == 0 || f.n.conv.pending() {
		t.Fatalf("after Extents: %d written blocks, queue pending %v", written, f.n.conv.pending())
	}
	check("after Extents")
	// A full queue is applied by the write that fills it.
	before = v.Counters()
	for i := 0; v.Counters().ConversionsQueued-before.ConversionsQueued < convQueueMax-1; i++ {
		if i > 10*convQueueMax {
			t.Fatal("writes stopped queueing conversions")
		}
		write(rng.IntN(blocks))
	}
	if b := v.Counters().ConversionBatches - before.ConversionBatches; b != 0 || !f.n.conv.pending() {
		t.Fatalf("%d batches with %d queued, want 0", b, convQueueMax-1)
	}
	for v.Counters().ConversionsQueued-before.ConversionsQueued < convQueueMax {
		write(rng.IntN(blocks))
	}
	if b := v.Counters().ConversionBatches - before.ConversionBatches; b != 1 || f.n.conv.pending() {
		t.Fatalf("%d batches, queue pending %v after the queue filled; want 1, false", b, f.n.conv.pending())
	}
	check("after a full queue")
	// An exclusive operation (punch) applies the queue first.
	for i := 0; i < 20; i++ {
		write(rng.IntN(blocks))
	}
	require.NoError(t, d.Fallocate(FallocPunchHole, 100*4096, 4096))
	clear(model[100*4096 : 101*4096])
	if f.n.conv.pending() {
		t.Fatal("the queue survived a punch")
	}
	check("after a punch")
	// The commit applies what is left.
	for i := 0; i < 20; i++ {
		write(rng.IntN(blocks))
	}
	before = v.Counters()
	require.NoError(t, d.Sync())
	if f.n.conv.pending() || v.Counters().ConversionBatches == before.ConversionBatches {
		t.Fatal("Sync left the queue")
	}
	check("after Sync")
	for i := 0; i < 30; i++ {
		write(rng.IntN(blocks))
	}
	g := reopenChecked(t, v, dev, "f")
	got := make([]byte, len(model))
	if _, err := g.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, model) {
		t.Fatal("the reopened file differs from the model")
	}
}

// TestQueuedConversionsNearFull: with less free space than a queued
// conversion must reserve, writes into preallocated space split at
// submission instead of queueing (see conv.go's ENOSPC paragraph).
func TestQueuedConversionsNearFull(t *testing.T) {
	_, v := memVolume(t, 64<<20, 4096)
	defer v.Close()
	_, d := preallocated(t, v, "f", 1<<20)
	p := bytes.Repeat([]byte{7}, 4096)
	before := v.Counters()
	if _, err := d.WriteAt(p, 0); err != nil {
		t.Fatal(err)
	}
	if q := v.Counters().ConversionsQueued - before.ConversionsQueued; q != 1 {
		t.Fatalf("%d conversions queued with free space, want 1", q)
	}
	filler, err := v.Create("filler")
	require.NoError(t, err)
	if err := v.Sync(); err != nil { // gives back the first write's reservation
		t.Fatal(err)
	}
	for off := int64(0); v.alloc.Available(0) >= inodeResv; {
		n := max(int64(v.alloc.Available(0))-inodeResv, 1)
		if err := filler.Fallocate(FallocAllocate, off, n*4096); err != nil && !errors.Is(err, ErrNoSpace) {
			t.Fatal(err)
		}
		off += n * 4096
	}
	before = v.Counters()
	if _, err := d.WriteAt(p, 64<<10); err != nil {
		t.Fatal(err)
	}
	c := v.Counters()
	if q, k := c.ConversionsQueued-before.ConversionsQueued, c.Conversions-before.Conversions; q != 0 || k != 1 {
		t.Fatalf("near full: %d queued, %d conversions; want 0, 1", q, k)
	}
	got := make([]byte, 4096)
	for _, off := range []int64{0, 64 << 10} {
		if _, err := d.ReadAt(got, off); err != nil || !bytes.Equal(got, p) {
			t.Fatalf("read at %d: %v, %#x", off, err, got[0])
		}
	}
}

// checkImage runs e2fsck -fn on a copy of dev's contents.
func checkImage(t *testing.T, dev *memdev.Device) {
	t.Helper()
	img := filepath.Join(t.TempDir(), "img")
	b := make([]byte, dev.Size())
	if _, err := dev.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	require.NoError(t, os.WriteFile(img, b, 0o644))
	e2fs.Fsck(t, img)
}

// TestQueuedConversionsNoSpace: writes that queued their conversions
// reserved the tree blocks those need, so when the free space runs out
// after them (no reserved pool), Sync still applies the queue: the
// acknowledged writes are durable, the data reads back, and the image
// passes e2fsck. Or a truncate to zero drops the queue with the blocks
// and the next Sync commits.
func TestQueuedConversionsNoSpace(t *testing.T) {
	t.Parallel()
	t.Run("free-space", func(t *testing.T) { queuedNoSpace(t, false) })
	t.Run("truncate", func(t *testing.T) { queuedNoSpace(t, true) })
}

func queuedNoSpace(t *testing.T, truncate bool) {
	dev := memdev.NewBlockSize(32<<20, 1024)
	require.NoError(t, Format(dev, FormatOptions{BlockSize: 1024, ReservedPercent: -1}))
	v, err := Open(dev, Options{Writable: true, WritebackAge: -1, Tuning: Tuning{ReservedPool: -1}, CommitInterval: -1})
	require.NoError(t, err)
	const blocks = 4096
	f, d := preallocated(t, v, "f", blocks*1024)
	require.NoError(t, v.Sync())
	model := make([]byte, blocks*1024)
	rng := rand.New(rand.NewPCG(9, 9))
	before := v.Counters()
	for i := 0; i < 200; i++ {
		off := int64(rng.IntN(blocks)) * 1024
		p := bytes.Repeat([]byte{byte(1 + rng.IntN(250))}, 1024)
		if _, err := d.WriteAt(p, off); err != nil {
			t.Fatal(err)
		}
		copy(model[off:], p)
	}
	if q := v.Counters().ConversionsQueued - before.ConversionsQueued; q < 150 {
		t.Fatalf("%d conversions queued", q)
	}
	fill, err := v.Create("fill")
	require.NoError(t, err)
	for off := int64(0); v.alloc.Available(alloc.MustSucceed) > 0; {
		n := max(int64(v.alloc.Available(alloc.MustSucceed))-8, 1)
		if err := fill.Fallocate(FallocAllocate, off, n*1024); err != nil && !errors.Is(err, ErrNoSpace) {
			t.Fatal(err)
		}
		off += n * 1024
	}
	if a := v.alloc.Available(alloc.MustSucceed); a > 0 {
		t.Fatalf("%d blocks left after filling", a)
	}
	check := func(r interface {
		ReadAt([]byte, int64) (int, error)
	}, what string) {
		t.Helper()
		got := make([]byte, len(model))
		if _, err := r.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, model) {
			t.Fatalf("%s: the file differs from the model", what)
		}
	}
	if truncate {
		if err := d.Truncate(0); err != nil {
			t.Fatalf("truncate with queued conversions and no space: %v", err)
		}
		if err := v.Sync(); err != nil || f.n.conv.pending() {
			t.Fatalf("Sync after the truncate: %v, queue pending %v", err, f.n.conv.pending())
		}
		require.NoError(t, v.Close())
		checkImage(t, dev)
		return
	}
	if err := v.Sync(); err != nil || f.n.conv.pending() {
		t.Fatalf("Sync with queued conversions and no free space: %v, queue pending %v", err, f.n.conv.pending())
	}
	check(d, "after the queue went in")
	fill.Close()
	check(reopenChecked(t, v, dev, "f"), "reopened")
}

// TestPromoteWritten: once direct writes have written every block of a
// cache region of a preallocated file and a batch has applied them, the
// region's cache entry is written (lookups stop consulting the bitmap);
// a region with blocks left unwritten keeps its unwritten entry. A punch
// afterwards, overwrites and reads behave, and the image passes e2fsck.
func TestPromoteWritten(t *testing.T) {
	t.Parallel()
	dev, v := memVolume(t, 256<<20, 4096)
	const blocks = escRegion + escRegion/2 // one full region, half of the next
	f, d := preallocated(t, v, "p", blocks*4096)
	f.Close()
	model := make([]byte, blocks*4096)
	rng := rand.New(rand.NewPCG(3, 9))
	// Every block of region 0, the first half of region 1 but one.
	for _, b := range rng.Perm(blocks) {
		if b == escRegion+7 {
			continue
		}
		p := bytes.Repeat([]byte{byte(1 + b%250)}, 4096)
		if _, err := d.WriteAt(p, int64(b)*4096); err != nil {
			t.Fatal(err)
		}
		copy(model[b*4096:], p)
	}
	entry := func(lblk uint32) esc.Extent {
		t.Helper()
		var got esc.Extent
		d.m.escRange(lblk, 1, func(e esc.Extent) bool { got = e; return false })
		return got
	}
	if e := entry(0); e.Status != esc.Unwritten {
		t.Fatalf("before any batch, region 0 is cached as %v, want the unwritten entry the writes left", e)
	}
	if err := v.Sync(); err != nil { // applies the queue
		t.Fatal(err)
	}
	if e := entry(0); e.Status != esc.Written || e.Lblk != 0 || e.Len != escRegion {
		t.Fatalf("region 0 cached as %+v after the batch, want one written entry", e)
	}
	if e := entry(escRegion); e.Status != esc.Unwritten {
		t.Fatalf("region 1 (a block never written) cached as %+v, want unwritten", e)
	}
	// A punch in the promoted region, then overwrites and a read of all.
	require.NoError(t, d.Fallocate(FallocPunchHole, 100*4096, 3*4096))
	clear(model[100*4096 : 103*4096])
	for _, b := range []int{0, 99, 103, escRegion - 1, escRegion + 7} {
		p := bytes.Repeat([]byte{0xee}, 4096)
		if _, err := d.WriteAt(p, int64(b)*4096); err != nil {
			t.Fatal(err)
		}
		copy(model[b*4096:], p)
	}
	got := make([]byte, len(model))
	if _, err := d.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, model) {
		t.Fatal("file differs from the model")
	}
	d.Close()
	again := reopenChecked(t, v, dev, "p")
	if _, err := again.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, model) {
		t.Fatal("file differs from the model after reopening")
	}
}

// TestSortRuns checks sortRuns against a stable comparison sort on random
// queues of both sizes, keys confined to a few digits and full 32-bit keys.
func TestSortRuns(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	var tmp []convRun
	for _, n := range []int{0, 1, 100, 255, 256, 1000, 8192, 20000} {
		for _, bits := range []uint{3, 11, 12, 22, 32} {
			runs := make([]convRun, n)
			for i := range runs {
				runs[i] = convRun{lblk: uint32(rng.Uint64() & (1<<bits - 1)), n: uint32(i), pblk: rng.Uint64()}
			}
			want := slices.Clone(runs)
			slices.SortStableFunc(want, func(a, b convRun) int { return cmp.Compare(a.lblk, b.lblk) })
			var got []convRun
			got, tmp = sortRuns(runs, tmp)
			if !slices.Equal(got, want) {
				t.Fatalf("%d runs of %d-bit keys: sorted wrongly", n, bits)
			}
			if n > 0 && len(tmp) > 0 && &got[0] == &tmp[0] {
				t.Fatalf("%d runs: the returned buffers alias", n)
			}
		}
	}
}

// BenchmarkApplyBatch measures the batches alone: conversions of single
// blocks in random order in a preallocated 1 GiB file, queued as direct
// writes' completions queue them and applied convQueueMax at a time,
// without the data writes. ns/op is per queued run, batch included. Run it
// with -benchtime at most 262144x.
//
//	go test -run XXX -bench ApplyBatch -benchtime 262144x .
func BenchmarkApplyBatch(b *testing.B) {
	const size = 1 << 30
	_, v := memVolume(b, 2<<30, 4096)
	defer v.Close()
	f, d := preallocated(b, v, "f", size)
	defer f.Close()
	defer d.Close()
	perm := rand.New(rand.NewPCG(3, 4)).Perm(size / 4096)
	i := 0
	for b.Loop() {
		if i == len(perm) {
			b.Fatal("more iterations than blocks: use -benchtime 262144x or less")
		}
		lblk := uint32(perm[i])
		m, err := d.n.m.lookup(uint64(lblk))
		if err != nil || m.kind != mapUnwritten {
			b.Fatalf("block %d: %+v, %v", lblk, m, err)
		}
		// As a direct write's completion: inside an operation, under the
		// shared inode lock.
		op, err := v.beginOpAt(i)
		if err != nil {
			b.Fatal(err)
		}
		s := d.n.mu.RLockAt(i)
		r := convRun{lblk: lblk, n: 1, pblk: m.pblk}
		full := d.queueConversion(r)
		d.n.conv.bits.set(r.lblk, r.n)
		if full {
			err = v.applyFull(d.n)
		}
		d.n.mu.RUnlockAt(s)
		if eerr := v.endOpAt(op); err == nil {
			err = eerr
		}
		if err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.StopTimer()
	if err := d.Sync(); err != nil {
		b.Fatal(err)
	}
}
