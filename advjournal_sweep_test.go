package ext4io_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
)

// TestAdvJournalCrashSweepMixed crashes at every device operation (unflushed
// writes kept at random, the last one torn) of a workload that mixes, on
// one file, buffered writes of single blocks, journalled atomic writes of
// two-block pages and a Datasync or Sync (through either handle) after
// each round. In every crash image, each block reads what it held at the
// last sync that returned before the crash or something written after
// it; each atomic page reads all old or all new; e2fsck calls the image
// clean. The rounds' Datasyncs take the shortcut after a journalled
// write, which is where the buffered blocks got lost before d48b031.
func TestAdvJournalCrashSweepMixed(t *testing.T) {
	t.Parallel()
	const (
		bs     = 4096
		blocks = 64 // buffered: 0..31; atomic pages of two blocks: 32..63
		rounds = 8
	)
	start := memdev.NewBlockSize(16<<20, bs)
	require.NoError(t, ext4io.Format(start, ext4io.FormatOptions{NoDiscard: true}))
	{
		v, err := ext4io.Open(start, ext4io.Options{Writable: true})
		require.NoError(t, err)
		require.NoError(t, v.WriteFile("db", bytes.Repeat([]byte{0xEE}, blocks*bs), 0o644))
		require.NoError(t, v.Close())
	}
	type syncPoint struct {
		at    int // log entries the sync covers
		round int
		model [blocks]byte
	}
	type write struct {
		round int
		blk   int
		val   byte
	}
	var syncs []syncPoint
	var writes []write
	journalled := 0
	workload := func(dev blockdev.Device) error {
		rec := dev.(*errordev.Recorder)
		v, err := ext4io.Open(dev, ext4io.Options{Writable: true, CommitInterval: -1})
		if err != nil {
			return err
		}
		b, err := v.OpenFile("db", os.O_RDWR, 0)
		if err != nil {
			return err
		}
		d, err := v.OpenFile("db", os.O_RDWR|ext4io.O_DIRECT, 0)
		if err != nil {
			return err
		}
		var model [blocks]byte
		for i := range model {
			model[i] = 0xEE
		}
		syncs = append(syncs, syncPoint{at: 0, round: -1, model: model})
		for r := range rounds {
			vb, va := byte(2*r+1), byte(2*r+2)
			bb := (r * 7) % 32
			if _, err := b.WriteAt(bytes.Repeat([]byte{vb}, bs), int64(bb)*bs); err != nil {
				return err
			}
			writes = append(writes, write{r, bb, vb})
			model[bb] = vb
			pa := 32 + 2*((r*5)%16)
			c0 := v.Counters().AtomicJournalled
			if _, err := d.WriteAtomic(bytes.Repeat([]byte{va}, 2*bs), int64(pa)*bs); err != nil {
				return err
			}
			journalled += int(v.Counters().AtomicJournalled - c0)
			writes = append(writes, write{r, pa, va}, write{r, pa + 1, va})
			model[pa], model[pa+1] = va, va
			syncer := b
			if r%2 == 1 {
				syncer = d
			}
			if r%3 == 2 {
				err = syncer.Sync()
			} else {
				err = syncer.Datasync()
			}
			if err != nil {
				return err
			}
			syncs = append(syncs, syncPoint{at: rec.Len(), round: r, model: model})
		}
		if err := b.Close(); err != nil {
			return err
		}
		if err := d.Close(); err != nil {
			return err
		}
		return v.Close()
	}
	check := func(t *testing.T, img *memdev.Device, rep errordev.CrashReport) {
		sp := syncs[0]
		for _, s := range syncs {
			if s.at <= rep.Point+1 {
				sp = s
			}
		}
		v, err := ext4io.Open(img, ext4io.Options{Writable: true})
		require.NoError(t, err)
		got, err := v.ReadFile("db")
		require.NoError(t, err)
		require.NoError(t, v.Close())
		require.Len(t, got, blocks*bs)
		for blk := range blocks {
			data := got[blk*bs : (blk+1)*bs]
			val := data[0]
			require.Equal(t, bytes.Repeat([]byte{val}, bs), data, "block %d torn", blk)
			ok := val == sp.model[blk]
			for _, w := range writes {
				ok = ok || w.round > sp.round && w.blk == blk && w.val == val
			}
			require.True(t, ok, "block %d reads %#x; at the last sync (after round %d) it held %#x", blk, val, sp.round, sp.model[blk])
		}
		for pa := 32; pa < blocks; pa += 2 {
			require.Equal(t, got[pa*bs], got[(pa+1)*bs], "atomic page at block %d torn", pa)
		}
		ext4iotest.FsckDev(t, img)
	}
	maxPoints := 60
	if os.Getenv("EXT4IO_LONG") != "" {
		maxPoints = 0
	}
	n := ext4iotest.CrashSweep(t, start, workload, check, ext4iotest.SweepOptions{EveryOp: true, MaxPoints: maxPoints,
		CrashAt: errordev.CrashAtOptions{KeepProb: 0.5, Tear: true, TearUnit: bs}})
	require.Greater(t, journalled, rounds/2, "the test needs journalled writes")
	require.Greater(t, n, 20)
	t.Logf("%d crash images, %d of %d atomic writes journalled", n, journalled, rounds)
}
