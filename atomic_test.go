package ext4io_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWriteAtomic writes atomically over written, unwritten and hole
// ranges and past the end, checks what reads back, that the file's
// block count and the free space stay right (the old blocks are freed
// once the swap commits) and that e2fsck calls the image clean; and that
// writes that cannot be atomic are refused with nothing written.
func TestWriteAtomic(t *testing.T) {
	t.Parallel()
	dev := memdev.New(64 << 20)
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{}))
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	require.NoError(t, err)
	f, err := v.Create("db")
	require.NoError(t, err)
	const bs = 4096
	info := f.AtomicWriteInfo()
	assert.Equal(t, ext4io.AtomicWriteInfo{AtomicWriteUnitMin: bs, AtomicWriteUnitMax: 1 << 20, AtomicWriteBatchMax: 4 << 20}, info)

	rng := rand.New(rand.NewPCG(1, 2))
	want, st0 := atomicLayout(t, v, f, rng)

	for _, w := range []struct{ off, n int64 }{
		{4 * bs, 4 * bs},    // inside written blocks
		{28 * bs, 8 * bs},   // written and unwritten
		{44 * bs, 8 * bs},   // unwritten and a hole
		{0, 64 * bs},        // all of it
		{60 * bs, 16 * bs},  // past the end: the file grows
		{100 * bs, 1 << 20}, // the largest, after a hole
	} {
		p := randBytes(rng, int(w.n))
		n, err := f.WriteAtomic(p, w.off)
		require.NoError(t, err, "atomic write of %d at %d", w.n, w.off)
		require.Equal(t, len(p), n)
		if end := w.off + w.n; end > int64(len(want)) {
			want = append(want, make([]byte, end-int64(len(want)))...)
		}
		copy(want[w.off:], p)
		got := make([]byte, len(want))
		_, err = f.ReadAt(got, 0)
		require.NoError(t, err)
		require.True(t, bytes.Equal(want, got), "after the write of %d at %d: first difference at %d", w.n, w.off, firstDiff(want, got))
		require.Equal(t, int64(len(want)), f.Size())
	}

	// Refused: nothing written, nothing changed.
	for _, w := range []struct {
		off, n int64
		err    error
	}{
		{bs / 2, bs, ext4io.ErrInvalid},
		{0, bs + 512, ext4io.ErrInvalid},
		{0, 0, ext4io.ErrInvalid},
		{0, 1<<20 + bs, ext4io.ErrInvalid},
		{-bs, bs, ext4io.ErrInvalid},
	} {
		n, err := f.WriteAtomic(make([]byte, w.n), w.off)
		require.ErrorIs(t, err, w.err, "%d at %d", w.n, w.off)
		var pe *os.PathError
		require.ErrorAs(t, err, &pe)
		require.Zero(t, n)
	}
	got := make([]byte, len(want))
	_, err = f.ReadAt(got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))

	// The file holds its size in blocks, no more: the old blocks of
	// every swap went back to free space once the swap committed.
	require.NoError(t, f.Sync())
	st1, err := v.Statfs()
	require.NoError(t, err)
	var mapped uint64
	exts, err := f.Extents()
	require.NoError(t, err)
	for _, e := range exts {
		mapped += e.Length
	}
	require.Equal(t, uint64(len(want))/bs-24, mapped, "every block of the file but the hole at 76-99 is mapped once")
	require.Equal(t, st0.BlocksFree-(mapped-48), st1.BlocksFree, "blocks leaked or freed twice")
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, dev)

	// A read-only volume: nothing is atomic.
	ro, err := ext4io.Open(dev, ext4io.Options{})
	require.NoError(t, err)
	rf, err := ro.Open("db")
	require.NoError(t, err)
	require.Zero(t, rf.AtomicWriteInfo())
	_, err = rf.WriteAtomic(make([]byte, bs), 0)
	require.Error(t, err)
	require.NoError(t, ro.Close())
}

// atomicLayout gives f, empty, 64 blocks of 4 KiB: 0-31 written with
// random bytes, 32-47 unwritten, 48-63 a hole; synced. It returns the
// file's contents and v's Statfs after.
func atomicLayout(t *testing.T, v *ext4io.Volume, f *ext4io.File, rng *rand.Rand) ([]byte, ext4io.Statfs) {
	t.Helper()
	const bs = 4096
	want := make([]byte, 64*bs)
	copy(want, randBytes(rng, 32*bs))
	_, err := f.WriteAt(want[:32*bs], 0)
	require.NoError(t, err)
	require.NoError(t, f.Fallocate(ext4io.FallocKeepSize, 32*bs, 16*bs))
	require.NoError(t, f.Truncate(64*bs))
	require.NoError(t, f.Sync())
	st, err := v.Statfs()
	require.NoError(t, err)
	return want, st
}

// untornDev is a memory device that claims untorn writes of up to 64 KiB.
type untornDev struct {
	*memdev.Device
	writes atomic.Int64
}

func (d *untornDev) AtomicWriteUnitMax() int64 { return 64 << 10 }

func (d *untornDev) WriteAt(p []byte, off int64) (int, error) {
	d.writes.Add(1)
	return d.Device.WriteAt(p, off)
}

var _ blockdev.AtomicWriter = (*untornDev)(nil)

// untornFile returns a volume on an untornDev and its file "db", open
// with O_DIRECT: 1 MiB of written blocks, synced.
func untornFile(t *testing.T) (*untornDev, *ext4io.Volume, *ext4io.File) {
	t.Helper()
	return untornFileTuned(t, ext4io.Tuning{})
}

// untornFileTuned is untornFile with the volume opened with tuning.
func untornFileTuned(t *testing.T, tuning ext4io.Tuning) (*untornDev, *ext4io.Volume, *ext4io.File) {
	t.Helper()
	dev := &untornDev{Device: memdev.New(64 << 20)}
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{}))
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, Tuning: tuning})
	require.NoError(t, err)
	f := directFile(t, v, "db", 0, 1<<20)
	_, err = f.WriteAt(make([]byte, 1<<20), 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	return dev, v, f
}

// TestWriteAtomicInPlace: on a device that keeps writes of the size
// untorn, an atomic write into written blocks of one suitably aligned
// extent is one device write in place; a larger one moves blocks.
func TestWriteAtomicInPlace(t *testing.T) {
	t.Parallel()
	dev, v, f := untornFile(t)
	defer v.Close()
	defer f.Close()
	require.Equal(t, int64(64<<10), f.AtomicWriteInfo().AtomicWriteUnitInPlace)
	before, err := f.Extents()
	require.NoError(t, err)
	require.Len(t, before, 1)
	require.Zero(t, before[0].Physical%16, "the test needs a 64 KiB-aligned extent")

	w := dev.writes.Load()
	p := bytes.Repeat([]byte{7}, 16<<10)
	_, err = f.WriteAtomic(p, 32<<10)
	require.NoError(t, err)
	require.Equal(t, int64(1), dev.writes.Load()-w, "an in-place atomic write is one device write")
	after, err := f.Extents()
	require.NoError(t, err)
	require.Equal(t, before, after, "in place: nothing moved")

	_, err = f.WriteAtomic(bytes.Repeat([]byte{8}, 128<<10), 0) // larger than the device's unit
	require.NoError(t, err)
	after, err = f.Extents()
	require.NoError(t, err)
	require.NotEqual(t, before, after, "a write past the device's unit moves blocks")
	got := make([]byte, 160<<10)
	_, err = f.ReadAt(got, 0)
	require.NoError(t, err)
	require.Equal(t, bytes.Repeat([]byte{8}, 128<<10), got[:128<<10])
	require.Equal(t, make([]byte, 32<<10), got[128<<10:])
}

// TestWriteAtomicInPlaceReadahead: a read-ahead window of another File
// of the inode, read before an in-place atomic write, is not served after
// it (the write changes neither the mapping nor the size).
func TestWriteAtomicInPlaceReadahead(t *testing.T) {
	t.Parallel()
	dev, v, f := untornFile(t)
	defer v.Close()
	defer f.Close()

	r, err := v.Open("db")
	require.NoError(t, err)
	defer r.Close()
	got := make([]byte, 4096)
	for off := int64(0); off < 3*4096; off += 4096 { // sequential: reads ahead
		_, err = r.ReadAt(got, off)
		require.NoError(t, err)
	}
	w := dev.writes.Load()
	_, err = f.WriteAtomic(bytes.Repeat([]byte{7}, 16<<10), 16<<10)
	require.NoError(t, err)
	require.Equal(t, int64(1), dev.writes.Load()-w, "the write went in place")
	_, err = r.ReadAt(got, 16<<10)
	require.NoError(t, err)
	require.Equal(t, bytes.Repeat([]byte{7}, 4096), got, "a read after the atomic write returned")
}

// atomicBlock fills b, block lblk of a file, as written by write id: the
// id and lblk, then bytes derived from both, so that a block tells which
// write left it and a torn or misplaced block is seen.
func atomicBlock(b []byte, id, lblk uint64) {
	binary.LittleEndian.PutUint64(b, id)
	binary.LittleEndian.PutUint64(b[8:], lblk)
	x := id*0x9E3779B97F4A7C15 ^ lblk*0xBF58476D1CE4E5B9 | 1
	for i := 16; i+8 <= len(b); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(b[i:], x)
	}
}

// atomicID returns the write id block lblk holds, or ok false if it is
// no write's block.
func atomicID(b []byte, lblk uint64) (id uint64, ok bool) {
	id = binary.LittleEndian.Uint64(b)
	want := make([]byte, len(b))
	atomicBlock(want, id, lblk)
	return id, bytes.Equal(b, want)
}

// atomicOp is one WriteAtomic or WriteAtomicBatch of a crash workload:
// ranges of blocks (first block, blocks) of file, between ticks start and
// end of a clock shared by the writers (end 0: not finished).
type atomicOp struct {
	file       int
	ranges     [][2]uint64
	start, end uint64
}

// covers reports whether one of the op's ranges holds block b.
func (op *atomicOp) covers(b uint64) bool {
	for _, r := range op.ranges {
		if r[0] <= b && b < r[0]+r[1] {
			return true
		}
	}
	return false
}

// atomicFile creates name on v for the crash sweeps: blocks [0, written)
// hold write 0's blocks (atomicBlock), [written, written+unwritten) are
// unwritten, the rest up to blocks a hole.
func atomicFile(t *testing.T, v *ext4io.Volume, name string, written, unwritten, blocks, bs uint64) {
	t.Helper()
	f, err := v.Create(name)
	require.NoError(t, err)
	buf := make([]byte, written*bs)
	for b := range written {
		atomicBlock(buf[b*bs:(b+1)*bs], 0, b)
	}
	_, err = f.WriteAt(buf, 0)
	require.NoError(t, err)
	require.NoError(t, f.Fallocate(ext4io.FallocKeepSize, int64(written*bs), int64(unwritten*bs)))
	require.NoError(t, f.Truncate(int64(blocks*bs)))
	require.NoError(t, f.Close())
}

// atomicWrites returns write id's data for ranges ([first block, count]
// of bs-byte blocks), each block tagged by atomicBlock.
func atomicWrites(id uint64, ranges [][2]uint64, bs uint64) []ext4io.AtomicWrite {
	ws := make([]ext4io.AtomicWrite, len(ranges))
	for i, r := range ranges {
		buf := make([]byte, r[1]*bs)
		for b := range r[1] {
			atomicBlock(buf[b*bs:(b+1)*bs], id, r[0]+b)
		}
		ws[i] = ext4io.AtomicWrite{Off: int64(r[0] * bs), Data: buf}
	}
	return ws
}

// atomicOlder reports whether the block holding write j is older than
// write k: the initial contents, or a write over before k began.
func atomicOlder(byID map[uint64]*atomicOp, j uint64, k *atomicOp) bool {
	return j == 0 || byID[j].end != 0 && byID[j].end < k.start
}

// atomicCheckFile checks a crashed file's data (bs-byte blocks, the first
// written of them initially written: atomicFile) and returns the write
// each block holds (0: the initial contents or zeroes past written).
// Every block is the initial contents or a block of an op that covers
// it, and no op is torn: if any block shows op k, every block of every
// range of k shows k or an op that was not over before k began.
func atomicCheckFile(t *testing.T, byID map[uint64]*atomicOp, file int, data []byte, bs, written uint64) []uint64 {
	t.Helper()
	blocks := uint64(len(data)) / bs
	ids := make([]uint64, blocks)
	for b := range blocks {
		blk := data[b*bs : (b+1)*bs]
		if b >= written && bytes.Equal(blk, make([]byte, bs)) {
			continue // initial unwritten or hole
		}
		id, ok := atomicID(blk, b)
		require.True(t, ok, "file %d block %d is no write's block (torn inside a block or misplaced)", file, b)
		if id == 0 {
			require.Less(t, b, written, "file %d block %d: initial data where there was none", file, b)
		} else {
			op := byID[id]
			require.NotNil(t, op, "file %d block %d: unknown write %d", file, b, id)
			require.True(t, op.file == file && op.covers(b), "file %d block %d holds write %d, which did not cover it", file, b, id)
		}
		ids[b] = id
	}
	seen := map[uint64]bool{0: true}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		k := byID[id]
		for _, r := range k.ranges {
			for b := r[0]; b < r[0]+r[1]; b++ {
				require.False(t, atomicOlder(byID, ids[b], k), "file %d: write %d torn: its block %d holds write %d, which finished before it began", file, id, b, ids[b])
			}
		}
	}
	return ids
}

// atomicCrash is a crash workload of atomic writes for atomicCrashSweep.
type atomicCrash struct {
	start     *memdev.Device // formatted, the files not yet created
	perWriter int            // ops per writer
	seed      uint64         // of each writer's generator, with its number
	// ranges returns the ranges of an op; batch writes them with one
	// WriteAtomicBatch, else each op is one range written with WriteAtomic.
	ranges             func(rng *rand.Rand) [][2]uint64
	batch              bool
	syncOneIn          int // a Datasync follows one op in syncOneIn
	maxPoints, linuxAt int // SweepOptions.MaxPoints; images Linux checks at most
	// tuning opens the workload's volume; with journalled, some writes
	// must have gone through the journal and in place.
	tuning     ext4io.Tuning
	journalled bool
}

// atomicCrashSweep crashes a workload of concurrent atomic writes into
// written, unwritten and hole ranges of two 4 MiB files (blocks 0-511
// written, 512-767 unwritten, then a hole) at device writes and flushes,
// tearing the last write: three writers, two sharing one file. After each
// crash (journal replayed by ext4io) every block of both files must be
// the initial contents or a block of an op that covers it, and no op may
// be torn: if any block shows op k, every block of every range of k shows
// k or an op that was not over before k began. e2fsck must call the image
// clean, and for a sample of the images Linux, replaying the journal
// itself, must read the same bytes (root only). It returns the ops and the
// images checked.
func atomicCrashSweep(t *testing.T, c atomicCrash) (ops int, checked int) {
	const (
		bs     = 4096
		blocks = 1024 // 4 MiB files
	)
	v, err := ext4io.Open(c.start, ext4io.Options{Writable: true})
	require.NoError(t, err)
	names := []string{"db0", "db1"}
	for _, name := range names {
		atomicFile(t, v, name, 512, 256, blocks, bs)
	}
	require.NoError(t, v.Close())

	var (
		mu    sync.Mutex
		byID  = map[uint64]*atomicOp{}
		clock atomic.Uint64
		// journalled counts the writes that went through the journal and
		// in place (Tuning.AtomicJournalMax) over every run.
		journalled atomic.Uint64
	)
	writers := 3
	workload := func(dev blockdev.Device) error {
		v, err := ext4io.Open(dev, ext4io.Options{Writable: true, Tuning: c.tuning})
		if err != nil {
			return err
		}
		files := make([]*ext4io.File, len(names))
		for i, name := range names {
			if files[i], err = v.OpenFile(name, os.O_RDWR|ext4io.O_DIRECT, 0); err != nil {
				return err
			}
		}
		errc := make(chan error, writers)
		for w := range writers {
			go func() {
				rng := rand.New(rand.NewPCG(uint64(w), c.seed))
				for k := range c.perWriter {
					id := uint64(w*1000 + k + 1)
					// Writers 0 and 1 share db0; writer 2 has db1.
					op := &atomicOp{file: min(w/2, 1), ranges: c.ranges(rng)}
					ws := atomicWrites(id, op.ranges, bs)
					f := files[op.file]
					op.start = clock.Add(1)
					mu.Lock()
					byID[id] = op
					mu.Unlock()
					var err error
					if c.batch {
						_, err = f.WriteAtomicBatch(ws)
					} else {
						_, err = f.WriteAtomic(ws[0].Data, ws[0].Off)
					}
					if err != nil {
						errc <- err
						return
					}
					end := clock.Add(1)
					mu.Lock()
					op.end = end
					mu.Unlock()
					if rng.IntN(c.syncOneIn) == 0 {
						if err := f.Datasync(); err != nil {
							errc <- err
							return
						}
					}
				}
				errc <- nil
			}()
		}
		var errsAll []error
		for range writers {
			errsAll = append(errsAll, <-errc)
		}
		for _, f := range files {
			errsAll = append(errsAll, f.Close())
		}
		journalled.Add(v.Counters().AtomicJournalled)
		errsAll = append(errsAll, v.Close())
		return errors.Join(errsAll...)
	}

	linuxChecks := 0
	opts := ext4iotest.SweepOptions{EveryOp: true, MaxPoints: c.maxPoints,
		CrashAt: errordev.CrashAtOptions{KeepProb: 0.5, Tear: true, TearUnit: bs}}
	checked = ext4iotest.CrashSweep(t, c.start, workload, func(t *testing.T, dev *memdev.Device, rep errordev.CrashReport) {
		// A sample of the crashed images goes to Linux as crashed: its
		// jbd2 replays the journal itself.
		var img string
		if linuxChecks < c.linuxAt && rep.Point%5 == 3 && os.Geteuid() == 0 && !testing.Short() {
			linuxChecks++
			img = filepath.Join(t.TempDir(), "crash.img")
			saveDev(t, dev, img)
		}
		v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
		require.NoError(t, err, "recovering after %v", rep)
		contents := make([][]byte, len(names))
		for i, name := range names {
			f, err := v.Open(name)
			require.NoError(t, err)
			data := make([]byte, blocks*bs)
			_, err = f.ReadAt(data, 0)
			require.NoError(t, err)
			require.NoError(t, f.Close())
			atomicCheckFile(t, byID, i, data, bs, 512)
			contents[i] = data
		}
		require.NoError(t, v.Close())
		ext4iotest.FsckDev(t, dev)
		if img != "" {
			linuxReads(t, img, names, contents)
		}
	}, opts)
	if os.Geteuid() != 0 || testing.Short() {
		t.Log("not root or -short: Linux's view of the crash images is not checked")
	}
	t.Logf("%d atomic writes, %d crash images checked, %d by Linux too; %d writes journalled over all runs", len(byID), checked, linuxChecks, journalled.Load())
	// With -short a sweep makes a few writes per writer, and whether one
	// of them is journalled (small, over written blocks, the file synced
	// since its previous atomic write) depends on the writers' timing;
	// TestWriteAtomicCrashJournalled journals most of its writes.
	if c.journalled && !testing.Short() {
		require.Positive(t, journalled.Load(), "no write took the journalled path")
	}
	return len(byID), checked
}

// TestWriteAtomicCrash crashes (atomicCrashSweep) a workload of
// concurrent atomic writes of 4 KiB to 1 MiB, overlapping, into written,
// unwritten and hole ranges of two files. EXT4IO_LONG=1 checks every
// crash point; the default checks a spread of them.
func TestWriteAtomicCrash(t *testing.T) {
	t.Parallel()
	start := memdev.NewBlockSize(48<<20, 4096)
	require.NoError(t, ext4io.Format(start, ext4io.FormatOptions{NoDiscard: true}))
	_, checked := atomicCrashSweep(t, atomicCrash{start: start, perWriter: sized(6, 12, 40), seed: 99,
		ranges: func(rng *rand.Rand) [][2]uint64 {
			n := uint64(1) << rng.IntN(9) // 1..256 blocks
			n += uint64(rng.IntN(int(n)))
			n = min(n, 256)
			lblk := uint64(rng.IntN(1024 - int(n) + 1))
			return [][2]uint64{{lblk, n}}
		},
		syncOneIn: 4, maxPoints: sized(25, 30, 0), linuxAt: 3, journalled: true})
	require.Greater(t, checked, 10)
}

// TestWriteAtomicCrashJournalled is TestWriteAtomicCrash with writes of
// 4 KiB to 256 KiB into the files' written blocks, most of them
// journalled and written in place (Tuning.AtomicJournalMax 1 MiB, a
// Datasync after one op in two), some remapped: torn in-place writes
// must be repaired by the replay, remapped and journalled writes of the
// same blocks must not resurrect each other's data.
func TestWriteAtomicCrashJournalled(t *testing.T) {
	t.Parallel()
	start := memdev.NewBlockSize(48<<20, 4096)
	require.NoError(t, ext4io.Format(start, ext4io.FormatOptions{NoDiscard: true}))
	_, checked := atomicCrashSweep(t, atomicCrash{start: start, perWriter: sized(6, 12, 40), seed: 5,
		ranges: func(rng *rand.Rand) [][2]uint64 {
			n := uint64(1) << rng.IntN(7) // 1..64 blocks
			n += uint64(rng.IntN(int(n)))
			lblk := uint64(rng.IntN(512 - int(n) + 1))
			return [][2]uint64{{lblk, n}}
		},
		syncOneIn: 2, maxPoints: sized(25, 40, 0), linuxAt: 3,
		tuning: ext4io.Tuning{AtomicJournalMax: 1 << 20}, journalled: true})
	require.Greater(t, checked, 10)
}

// linuxReads mounts img with Linux and compares the files' bytes with
// want (ext4iotest.Mount skips, with a line, when it cannot mount).
func linuxReads(t *testing.T, img string, names []string, want [][]byte) {
	t.Helper()
	mnt := ext4iotest.Mount(t, img, false)
	for i, name := range names {
		got, err := os.ReadFile(filepath.Join(mnt, name))
		require.NoError(t, err)
		require.True(t, bytes.Equal(want[i], got), "Linux reads %s differently: first difference at %d", name, firstDiff(want[i], got))
	}
	ext4iotest.Unmount(t, mnt)
	ext4iotest.Fsck(t, img)
}

// BenchmarkWriteAtomicPages writes random 16 KiB pages of a 64 MiB file
// with WriteAtomic, a Datasync every 64 pages, and reports the file's
// extents at the end.
func BenchmarkWriteAtomicPages(b *testing.B) { benchWriteAtomicPages(b, 64) }

// BenchmarkWriteAtomicPages1 is BenchmarkWriteAtomicPages with a Datasync
// after every write: a swap and a journal commit per operation.
func BenchmarkWriteAtomicPages1(b *testing.B) { benchWriteAtomicPages(b, 1) }

// benchWriteAtomicPages writes random 16 KiB pages of a 64 MiB file with
// WriteAtomic, a Datasync every batch writes: with the default
// AtomicJournalMax (journal: a write after a Datasync is journalled and
// written in place, the rest remapped) and with journalling off (remap).
func benchWriteAtomicPages(b *testing.B, batch int) {
	for _, c := range []struct {
		name string
		max  int64
	}{{"journal", 0}, {"remap", -1}} {
		b.Run(c.name, func(b *testing.B) { benchWriteAtomicPagesTuned(b, batch, ext4io.Tuning{AtomicJournalMax: c.max}) })
	}
}

func benchWriteAtomicPagesTuned(b *testing.B, batch int, tuning ext4io.Tuning) {
	const page, size = 16 << 10, 64 << 20
	dev := memdev.New(256 << 20)
	require.NoError(b, ext4io.Format(dev, ext4io.FormatOptions{}))
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, Tuning: tuning})
	require.NoError(b, err)
	defer v.Close()
	f := directFile(b, v, "db", ext4io.FallocWriteZeroes, size)
	defer f.Close()
	buf := bytes.Repeat([]byte{1}, page)
	rng := rand.New(rand.NewPCG(1, 1))
	b.SetBytes(page)
	b.ResetTimer()
	for i := range b.N {
		if _, err := f.WriteAtomic(buf, rng.Int64N(size/page)*page); err != nil {
			b.Fatal(err)
		}
		if i%batch == batch-1 {
			require.NoError(b, f.Datasync())
		}
	}
	b.StopTimer()
	exts, err := f.Extents()
	require.NoError(b, err)
	b.ReportMetric(float64(len(exts)), "extents")
	b.ReportMetric(float64(v.Counters().AtomicJournalled)/float64(b.N), "journalled/op")
}

// TestWriteAtomicReturnsHome: a page moved by an atomic write goes back
// to its old blocks, between its neighbours, on its next atomic write
// once the first swap has committed, and the file is one extent again.
func TestWriteAtomicReturnsHome(t *testing.T) {
	t.Parallel()
	dev := memdev.New(64 << 20)
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{}))
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, Tuning: ext4io.Tuning{AtomicJournalMax: -1}} /* the remap path */)
	require.NoError(t, err)
	defer v.Close()
	f := directFile(t, v, "db", ext4io.FallocWriteZeroes, 1<<20)
	defer f.Close()
	require.NoError(t, f.Sync())
	home, err := f.Extents()
	require.NoError(t, err)
	require.Len(t, home, 1)
	page := bytes.Repeat([]byte{3}, 16<<10)
	_, err = f.WriteAtomic(page, 64<<10)
	require.NoError(t, err)
	moved, err := f.Extents()
	require.NoError(t, err)
	require.Len(t, moved, 3, "the page moved out of the extent")
	require.NoError(t, f.Datasync()) // the swap commits: the old blocks are free
	_, err = f.WriteAtomic(page, 64<<10)
	require.NoError(t, err)
	back, err := f.Extents()
	require.NoError(t, err)
	require.Equal(t, home, back, "the page went back between its neighbours")
	ext4iotest.FsckDev(t, dev)
}

// TestWriteAtomicFlags: on an O_SYNC file the write is durable when
// WriteAtomic returns (a crash keeping no unflushed write shows it); an
// O_APPEND file refuses it, as it refuses WriteAt.
func TestWriteAtomicFlags(t *testing.T) {
	t.Parallel()
	base := memdev.New(64 << 20)
	require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{}))
	dev, err := errordev.NewCrashable(base)
	require.NoError(t, err)
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	require.NoError(t, err)
	f, err := v.OpenFile("db", os.O_RDWR|os.O_CREATE|os.O_SYNC, 0o644)
	require.NoError(t, err)
	require.NoError(t, v.Sync()) // the file exists after a crash
	page := bytes.Repeat([]byte{9}, 16<<10)
	_, err = f.WriteAtomic(page, 0)
	require.NoError(t, err)
	img, err := dev.Crash(errordev.CrashOptions{KeepProb: 0})
	require.NoError(t, err)
	cv, err := ext4io.Open(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	cf, err := cv.Open("db")
	require.NoError(t, err)
	got := make([]byte, len(page))
	_, err = cf.ReadAt(got, 0)
	require.NoError(t, err)
	require.Equal(t, page, got, "an O_SYNC atomic write was not durable")
	require.NoError(t, cf.Close())
	require.NoError(t, cv.Close())

	a, err := v.OpenFile("db", os.O_RDWR|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = a.WriteAtomic(page, 0)
	require.Error(t, err)
	require.NoError(t, a.Close())
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
}
