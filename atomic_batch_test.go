package ext4io_test

import (
	"bytes"
	"cmp"
	"math/rand/v2"
	"os"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/stretchr/testify/require"
)

// vecDev is a memory device that writes several buffers in one request
// (blockdev.VectorWriter) and counts the requests of each kind.
type vecDev struct {
	*memdev.Device
	writes, vwrites atomic.Int64
}

func (d *vecDev) WriteAt(p []byte, off int64) (int, error) {
	d.writes.Add(1)
	return d.Device.WriteAt(p, off)
}

func (d *vecDev) WriteVAt(bufs [][]byte, off int64) (int, error) {
	d.vwrites.Add(1)
	return d.Device.WriteAt(bytes.Join(bufs, nil), off)
}

var _ blockdev.VectorWriter = (*vecDev)(nil)

// directDev is a memory device that claims direct-I/O alignment
// (blockdev.Aligner) and takes one buffer per request, counted.
type directDev struct {
	*memdev.Device
	writes atomic.Int64
}

func (d *directDev) Alignment() (mem, off int) { return 512, 512 }

func (d *directDev) WriteAt(p []byte, off int64) (int, error) {
	d.writes.Add(1)
	return d.Device.WriteAt(p, off)
}

// physOf maps the file's logical blocks to physical ones (0: unmapped).
func physOf(t *testing.T, f *ext4io.File) map[uint64]uint64 {
	t.Helper()
	exts, err := f.Extents()
	require.NoError(t, err)
	m := map[uint64]uint64{}
	for _, e := range exts {
		for i := range e.Length {
			m[e.Logical+i] = e.Physical + i
		}
	}
	return m
}

// TestWriteAtomicBatch writes batches of ranges given in any order over
// written, unwritten and hole ranges and past the end, and checks what
// reads back, that a batch lands in one physical run in offset order
// written with one device request (on a vectored device and on a
// direct-I/O one), that the free space stays right, and that e2fsck
// calls the image clean; and that batches that cannot be atomic are
// refused with nothing written.
func TestWriteAtomicBatch(t *testing.T) {
	t.Parallel()
	const bs = 4096
	for _, kind := range []string{"vectored", "direct", "memory"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			mem := memdev.New(64 << 20)
			var dev blockdev.Device = mem
			requests := func() int64 { return 0 }
			switch kind {
			case "vectored":
				d := &vecDev{Device: mem}
				dev, requests = d, func() int64 { return d.writes.Load() + d.vwrites.Load() }
			case "direct":
				d := &directDev{Device: mem}
				dev, requests = d, d.writes.Load
			}
			require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{}))
			v, err := ext4io.Open(dev, ext4io.Options{Tuning: ext4io.Tuning{AtomicJournalMax: -1} /* the remap path */, Writable: true})
			require.NoError(t, err)
			f, err := v.Create("db")
			require.NoError(t, err)
			require.Equal(t, int64(4<<20), f.AtomicWriteInfo().AtomicWriteBatchMax)

			rng := rand.New(rand.NewPCG(3, 4))
			want, st0 := atomicLayout(t, v, f, rng)

			for _, batch := range [][]struct{ off, n int64 }{
				{{4 * bs, 4 * bs}}, // one range
				{{40 * bs, 8 * bs}, {4 * bs, 4 * bs}, {28 * bs, 4 * bs}, {9 * bs, bs}}, // out of order, in all kinds of blocks
				{{60 * bs, 16 * bs}, {0, 2 * bs}},                                      // past the end: the file grows
				{{100 * bs, 1 << 20}, {2 * bs, 2 * bs}, {70 * bs, 2 * bs}},             // the largest range, after a hole
				{{0, bs}, {bs, bs}, {2 * bs, bs}, {3 * bs, bs}},                        // adjacent ranges
			} {
				ws := make([]ext4io.AtomicWrite, len(batch))
				total := 0
				for i, w := range batch {
					ws[i] = ext4io.AtomicWrite{Off: w.off, Data: randBytes(rng, int(w.n))}
					total += int(w.n)
				}
				r0 := requests()
				n, err := f.WriteAtomicBatch(ws)
				require.NoError(t, err, "batch %v", batch)
				require.Equal(t, total, n)
				if kind != "memory" {
					require.Equal(t, int64(1), requests()-r0, "batch %v: the data is one device request", batch)
				}
				for _, w := range ws {
					if end := w.Off + int64(len(w.Data)); end > int64(len(want)) {
						want = append(want, make([]byte, end-int64(len(want)))...)
					}
					copy(want[w.Off:], w.Data)
				}
				got := make([]byte, len(want))
				_, err = f.ReadAt(got, 0)
				require.NoError(t, err)
				require.True(t, bytes.Equal(want, got), "after batch %v: first difference at %d", batch, firstDiff(want, got))
				require.Equal(t, int64(len(want)), f.Size())

				// One run, the ranges one after the other in offset order.
				phys := physOf(t, f)
				sorted := append([]ext4io.AtomicWrite(nil), ws...)
				slices.SortFunc(sorted, func(a, b ext4io.AtomicWrite) int { return cmp.Compare(a.Off, b.Off) })
				next := uint64(0)
				for i, w := range sorted {
					first := uint64(w.Off / bs)
					if i > 0 {
						require.Equal(t, next, phys[first], "batch %v: range at %d does not follow the one before it", batch, w.Off)
					}
					for b := range uint64(len(w.Data) / bs) {
						require.Equal(t, phys[first]+b, phys[first+b], "batch %v: range at %d is not contiguous", batch, w.Off)
					}
					next = phys[first] + uint64(len(w.Data)/bs)
				}
			}

			// Refused: nothing written, nothing changed.
			big := make([]ext4io.AtomicWrite, 5)
			for i := range big {
				big[i] = ext4io.AtomicWrite{Off: int64(i) << 20, Data: make([]byte, 1<<20)}
			}
			many := make([]ext4io.AtomicWrite, 1025)
			for i := range many {
				many[i] = ext4io.AtomicWrite{Off: int64(i) * bs, Data: make([]byte, bs)}
			}
			for name, ws := range map[string][]ext4io.AtomicWrite{
				"empty batch":     nil,
				"empty range":     {{Off: 0, Data: make([]byte, bs)}, {Off: 8 * bs}},
				"overlap":         {{Off: 8 * bs, Data: make([]byte, 4*bs)}, {Off: 0, Data: make([]byte, 9*bs)}},
				"same range":      {{Off: 8 * bs, Data: make([]byte, bs)}, {Off: 8 * bs, Data: make([]byte, bs)}},
				"unaligned":       {{Off: 0, Data: make([]byte, bs)}, {Off: 8*bs + 512, Data: make([]byte, bs)}},
				"range too large": {{Off: 0, Data: make([]byte, 1<<20+bs)}, {Off: 2 << 20, Data: make([]byte, bs)}},
				"batch too large": big,
				"too many ranges": many,
				"negative offset": {{Off: -bs, Data: make([]byte, bs)}, {Off: 0, Data: make([]byte, bs)}},
			} {
				n, err := f.WriteAtomicBatch(ws)
				require.ErrorIs(t, err, ext4io.ErrInvalid, name)
				var pe *os.PathError
				require.ErrorAs(t, err, &pe, name)
				require.Zero(t, n, name)
			}
			got := make([]byte, len(want))
			_, err = f.ReadAt(got, 0)
			require.NoError(t, err)
			require.True(t, bytes.Equal(want, got), "a refused batch changed the file")
			require.Equal(t, int64(len(want)), f.Size())

			// The file holds its size in blocks, no more: the old blocks of
			// every swap went back to free space once the swap committed.
			require.NoError(t, f.Sync())
			st1, err := v.Statfs()
			require.NoError(t, err)
			mapped := uint64(len(physOf(t, f)))
			require.Equal(t, uint64(len(want))/bs-12-24, mapped, "every block of the file but the holes at 48-59 and 76-99 is mapped once")
			fi, err := f.Stat()
			require.NoError(t, err)
			held := fi.Sys().(*ext4io.FileInfo).Blocks * 512 / bs // data and extent-tree blocks
			require.LessOrEqual(t, held-mapped, uint64(1), "a tree leaf at most")
			require.Equal(t, st0.BlocksFree-(held-48), st1.BlocksFree, "blocks leaked or freed twice")
			require.NoError(t, f.Close())
			require.NoError(t, v.Close())
			ext4iotest.FsckDev(t, mem)
		})
	}
}

// TestWriteAtomicBatchInPlace: on a device that keeps writes of a page's
// size untorn, a batch of one range writes in place, as WriteAtomic does,
// but a batch of two moves its blocks: the device keeps each write
// untorn, not the batch.
func TestWriteAtomicBatchInPlace(t *testing.T) {
	t.Parallel()
	_, v, f := untornFileTuned(t, ext4io.Tuning{AtomicJournalMax: -1}) // the remap path
	defer v.Close()
	defer f.Close()
	before, err := f.Extents()
	require.NoError(t, err)
	require.Len(t, before, 1)
	require.Zero(t, before[0].Physical%16, "the test needs a 64 KiB-aligned extent")

	page := bytes.Repeat([]byte{7}, 16<<10)
	_, err = f.WriteAtomicBatch([]ext4io.AtomicWrite{{Off: 64 << 10, Data: page}})
	require.NoError(t, err)
	after, err := f.Extents()
	require.NoError(t, err)
	require.Equal(t, before, after, "a batch of one range went in place")

	_, err = f.WriteAtomicBatch([]ext4io.AtomicWrite{{Off: 128 << 10, Data: page}, {Off: 256 << 10, Data: page}})
	require.NoError(t, err)
	after, err = f.Extents()
	require.NoError(t, err)
	require.Len(t, after, 5, "both pages of the batch moved, next to each other")
	got := make([]byte, 16<<10)
	for _, off := range []int64{64 << 10, 128 << 10, 256 << 10} {
		_, err = f.ReadAt(got, off)
		require.NoError(t, err)
		require.Equal(t, page, got)
	}
}

// TestWriteAtomicBatchDurable: with fast commits on, the Datasync after a
// batch commits the journal in full (its two swaps leave the file more
// extents than i_block holds, and a deeper tree is not eligible for a fast
// commit: fcInodeTags) and a crash keeping no unflushed write shows the batch; on an
// O_SYNC file the batch is durable when WriteAtomicBatch returns; an
// O_APPEND file refuses it.
func TestWriteAtomicBatchDurable(t *testing.T) {
	t.Parallel()
	base := memdev.New(256 << 20)
	require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{FastCommit: true, NoDiscard: true, JournalBlocks: 16384}))
	dev, err := errordev.NewCrashable(base)
	require.NoError(t, err)
	// No background commits: a tick between the counters would change them.
	v, err := ext4io.Open(dev, ext4io.Options{Tuning: ext4io.Tuning{AtomicJournalMax: -1} /* the remap path */, Writable: true, CommitInterval: -1})
	require.NoError(t, err)
	f, err := v.Create("db")
	require.NoError(t, err)
	s, err := v.OpenFile("sync", os.O_RDWR|os.O_CREATE|os.O_SYNC, 0o644)
	require.NoError(t, err)
	_, err = f.WriteAt(make([]byte, 1<<20), 0)
	require.NoError(t, err)
	require.NoError(t, v.Sync())
	_, err = f.WriteAt(make([]byte, 4096), 1<<20) // a fast commit: eligible
	require.NoError(t, err)
	require.NoError(t, f.Datasync())
	c0 := v.Counters()
	require.Positive(t, c0.FastCommits, "the test needs fast commits")

	a := ext4io.AtomicWrite{Off: 64 << 10, Data: bytes.Repeat([]byte{1}, 16<<10)}
	b := ext4io.AtomicWrite{Off: 512 << 10, Data: bytes.Repeat([]byte{2}, 32<<10)}
	_, err = f.WriteAtomicBatch([]ext4io.AtomicWrite{b, a})
	require.NoError(t, err)
	require.NoError(t, f.Datasync())
	c1 := v.Counters()
	require.Equal(t, c0.FastCommits, c1.FastCommits, "a swap in a deep tree went into a fast commit")
	require.Equal(t, c0.FastCommitFallbacks+1, c1.FastCommitFallbacks)

	c := ext4io.AtomicWrite{Off: 0, Data: bytes.Repeat([]byte{3}, 16<<10)}
	d := ext4io.AtomicWrite{Off: 64 << 10, Data: bytes.Repeat([]byte{4}, 16<<10)}
	_, err = s.WriteAtomicBatch([]ext4io.AtomicWrite{c, d})
	require.NoError(t, err)

	img, err := dev.Crash(errordev.CrashOptions{KeepProb: 0})
	require.NoError(t, err)
	cv, err := ext4io.Open(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	for name, ws := range map[string][]ext4io.AtomicWrite{"db": {a, b}, "sync": {c, d}} {
		cf, err := cv.Open(name)
		require.NoError(t, err)
		for _, w := range ws {
			got := make([]byte, len(w.Data))
			_, err = cf.ReadAt(got, w.Off)
			require.NoError(t, err)
			require.Equal(t, w.Data, got, "%s: the batch's range at %d was not durable", name, w.Off)
		}
		require.NoError(t, cf.Close())
	}
	require.NoError(t, cv.Close())
	ext4iotest.FsckDev(t, img)

	ap, err := v.OpenFile("db", os.O_RDWR|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = ap.WriteAtomicBatch([]ext4io.AtomicWrite{a})
	require.Error(t, err)
	require.NoError(t, ap.Close())
	require.NoError(t, s.Close())
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
}

// TestWriteAtomicBatchCrash crashes (atomicCrashSweep) a workload of
// concurrent atomic batches of 1 to 64 ranges of 4 KiB to 64 KiB into
// written, unwritten and hole ranges of two files: after every crash
// each batch reads all old or all new. EXT4IO_LONG=1 checks every crash
// point; the default checks a spread of them.
func TestWriteAtomicBatchCrash(t *testing.T) {
	t.Parallel()
	const slot = 16 // a batch has at most one range in each slot of 16 blocks
	start := memdev.NewBlockSize(96<<20, 4096)
	// A 16 MiB journal: a transaction takes a batch of 64 ranges.
	require.NoError(t, ext4io.Format(start, ext4io.FormatOptions{NoDiscard: true, JournalBlocks: 4096}))
	_, checked := atomicCrashSweep(t, atomicCrash{start: start, perWriter: sized(2, 3, 12), seed: 77, batch: true,
		ranges: func(rng *rand.Rand) [][2]uint64 {
			c := 1 << rng.IntN(7) // 1..64 ranges
			c = min(c+rng.IntN(c), 1024/slot)
			var rs [][2]uint64
			for _, s := range rng.Perm(1024 / slot)[:c] {
				n := 1 + rng.IntN(slot)
				rs = append(rs, [2]uint64{uint64(s*slot + rng.IntN(slot-n+1)), uint64(n)})
			}
			return rs
		},
		syncOneIn: 3, maxPoints: sized(20, 30, 0), linuxAt: 2})
	require.Greater(t, checked, 10)
}

// TestWriteAtomicBatchCrashJournalled is TestWriteAtomicBatchCrash with
// batches of 1 to 16 ranges in the files' written blocks, journalled
// when they total at most 1 MiB (Tuning.AtomicJournalMax) and the file
// was synced since its last atomic write.
func TestWriteAtomicBatchCrashJournalled(t *testing.T) {
	t.Parallel()
	const slot = 16
	start := memdev.NewBlockSize(96<<20, 4096)
	require.NoError(t, ext4io.Format(start, ext4io.FormatOptions{NoDiscard: true, JournalBlocks: 4096}))
	_, checked := atomicCrashSweep(t, atomicCrash{start: start, perWriter: sized(3, 6, 16), seed: 78, batch: true,
		ranges: func(rng *rand.Rand) [][2]uint64 {
			c := 1 + rng.IntN(16)
			var rs [][2]uint64
			for _, s := range rng.Perm(512 / slot)[:c] {
				n := 1 + rng.IntN(4)
				rs = append(rs, [2]uint64{uint64(s*slot + rng.IntN(slot-n+1)), uint64(n)})
			}
			return rs
		},
		syncOneIn: 2, maxPoints: sized(20, 30, 0), linuxAt: 2,
		tuning: ext4io.Tuning{AtomicJournalMax: 1 << 20}, journalled: true})
	require.Greater(t, checked, 10)
}

// BenchmarkWriteAtomicBatch writes batches of 64 distinct random 16 KiB
// pages of a 64 MiB file with WriteAtomicBatch, a Datasync after each, as
// BenchmarkWriteAtomicPages writes them one WriteAtomic at a time, and
// reports the file's extents at the end. An operation is one batch.
func BenchmarkWriteAtomicBatch(b *testing.B) {
	const page, size, batch = 16 << 10, 64 << 20, 64
	_, f, one := atomicBatchWriter(b, 256<<20, size, page, batch)
	b.SetBytes(page * batch)
	b.ResetTimer()
	for range b.N {
		one()
	}
	b.StopTimer()
	exts, err := f.Extents()
	require.NoError(b, err)
	b.ReportMetric(float64(len(exts)), "extents")
}

// atomicBatchWriter formats a memory device of devSize bytes, creates a
// size-byte file prepared with write-zeroes, and returns the volume, the
// file and a function that writes one batch of batch distinct random
// pages of page bytes with WriteAtomicBatch, then Datasync. The volume
// and file close when b ends.
func atomicBatchWriter(b *testing.B, devSize, size int64, page, batch int) (*ext4io.Volume, *ext4io.File, func()) {
	dev := memdev.New(devSize)
	require.NoError(b, ext4io.Format(dev, ext4io.FormatOptions{}))
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	require.NoError(b, err)
	b.Cleanup(func() { v.Close() })
	f := directFile(b, v, "db", ext4io.FallocWriteZeroes, size)
	b.Cleanup(func() { f.Close() })
	buf := bytes.Repeat([]byte{1}, page*batch)
	ws := make([]ext4io.AtomicWrite, batch)
	rng := rand.New(rand.NewPCG(1, 1))
	pages := make([]int64, size/int64(page))
	for i := range pages {
		pages[i] = int64(i)
	}
	return v, f, func() {
		for i := range batch { // distinct pages: a partial shuffle
			j := i + rng.IntN(len(pages)-i)
			pages[i], pages[j] = pages[j], pages[i]
			ws[i] = ext4io.AtomicWrite{Off: pages[i] * int64(page), Data: buf[i*page : (i+1)*page]}
		}
		if _, err := f.WriteAtomicBatch(ws); err != nil {
			b.Fatal(err)
		}
		require.NoError(b, f.Datasync())
	}
}
