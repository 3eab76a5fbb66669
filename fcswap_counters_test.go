package ext4io_test

import (
	"math/rand/v2"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
)

// TestFastCommitAtomicCounters: an atomic 16 KiB page write followed by
// Datasync costs 2 device writes (the page in its new blocks, the
// fast-commit block with its ADD_RANGE and INODE tags) and 2 flushes
// (before and after that block) with fast commits, as an emulated
// doublewrite does; without fast commits the swap is a full jbd2 commit:
// 3 writes (the page, the log run, the commit block) and 2 flushes. The
// file has 4 pages, so its tree stays in i_block (at most 4 extents) and
// its fsyncs stay eligible.
func TestFastCommitAtomicCounters(t *testing.T) {
	const (
		page  = 16 << 10
		pages = 4
		n     = 60
	)
	for _, tc := range []struct {
		name       string
		fc         bool
		deep       bool // the file's extent tree is deeper than i_block
		oneFlush   bool // Tuning.FastCommitOneFlush
		minW, maxW float64
	}{
		{"fastcommit", true, false, false, 2, 2},
		{"full", false, false, false, 3, 3.3}, // a checkpoint now and then
		// A file of more than 4 extents falls back to full commits
		// (fcInodeTags), each as cheap as without fast commits: the
		// fallback is found before the log's checkpoint that the first
		// fast commit of an area needs.
		{"fastcommit-deep-tree", true, true, false, 3, 3.3},
		// With one flush per fast commit the tags could reach the device
		// before the page: swaps commit in full.
		{"fastcommit-oneflush", true, false, true, 3, 3.3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := memdev.New(256 << 20)
			// A 16384-block log: its 256-block fast-commit area holds the
			// fast commits below (one block each).
			require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{FastCommit: tc.fc, NoDiscard: true, JournalBlocks: 16384}))
			dev := &countDev{Device: base}
			v, err := ext4io.Open(dev, ext4io.Options{Writable: true, WritebackAge: -1, CommitInterval: -1,
				Tuning: ext4io.Tuning{FastCommitOneFlush: tc.oneFlush, AtomicJournalMax: -1}}) // the remap path
			require.NoError(t, err)
			f, err := v.OpenFile("db", os.O_RDWR|os.O_CREATE|ext4io.O_DIRECT, 0o644)
			require.NoError(t, err)
			want := make([]byte, pages*page)
			_, err = f.WriteAt(want, 0)
			require.NoError(t, err)
			if tc.deep {
				// 16 blocks after the pages, every other one written: 8
				// extents the writes below leave alone.
				for b := int64(pages * page / 4096); b < pages*page/4096+16; b += 2 {
					_, err = f.WriteAt(make([]byte, 4096), b*4096)
					require.NoError(t, err)
				}
			}
			require.NoError(t, v.Sync())
			rng := rand.New(rand.NewPCG(1, 2))
			write := func() {
				off := rng.IntN(pages) * page
				p := want[off : off+page]
				for i := range p {
					p[i] = byte(rng.Uint32())
				}
				_, err := f.WriteAtomic(p, int64(off))
				require.NoError(t, err)
				require.NoError(t, f.Datasync())
			}
			// Warm up: the first fast commit after a full commit
			// checkpoints the log and starts the area.
			for range 3 {
				write()
			}
			exts, err := f.Extents()
			require.NoError(t, err)
			if tc.deep {
				require.Greater(t, len(exts), 4)
			} else {
				require.LessOrEqual(t, len(exts), 4)
			}
			c0 := v.Counters()
			w0, f0 := dev.writes.Load(), dev.flushes.Load()
			for range n {
				write()
			}
			writes := float64(dev.writes.Load()-w0) / n
			flushes := float64(dev.flushes.Load()-f0) / n
			c := v.Counters()
			t.Logf("%s: %.2f device writes, %.2f flushes per atomic 16 KiB write + Datasync (fast commits %d, fallbacks %d)",
				tc.name, writes, flushes, c.FastCommits-c0.FastCommits, c.FastCommitFallbacks-c0.FastCommitFallbacks)
			assert.GreaterOrEqual(t, writes, tc.minW)
			assert.LessOrEqual(t, writes, tc.maxW)
			assert.EqualValues(t, 2, flushes)
			switch {
			case tc.deep, tc.oneFlush:
				assert.Zero(t, c.FastCommits-c0.FastCommits)
				assert.EqualValues(t, n, c.FastCommitFallbacks-c0.FastCommitFallbacks, "every Datasync a full commit")
				assert.Zero(t, c.JournalCheckpoints-c0.JournalCheckpoints, "no checkpoint for a fast commit not written")
			case tc.fc:
				assert.EqualValues(t, n, c.FastCommits-c0.FastCommits, "every Datasync a fast commit")
				assert.Zero(t, c.FastCommitFallbacks-c0.FastCommitFallbacks)
			default:
				assert.Zero(t, c.FastCommits)
			}
			got := make([]byte, len(want)) // the pages
			_, err = f.ReadAt(got, 0)
			require.NoError(t, err)
			require.Equal(t, want, got)
			require.NoError(t, f.Close())
			require.NoError(t, v.Close())
			ext4iotest.FsckDev(t, base)
		})
	}
}

// BenchmarkFastCommitAtomicPage times an atomic 16 KiB page write +
// Datasync on a 4-page file (its tree stays in i_block, so every Datasync
// is a fast commit on a fast_commit volume) with and without fast
// commits, on a 256 MiB image file in EXT4IO_BENCH_DIR (default: the
// test's temporary directory), opened with O_DIRECT when
// EXT4IO_BENCH_DIRECT is set. It reports device writes and flushes per op.
func BenchmarkFastCommitAtomicPage(b *testing.B) {
	const (
		page  = 16 << 10
		pages = 4
	)
	dir := os.Getenv("EXT4IO_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	for _, fc := range []bool{true, false} {
		name := "full"
		if fc {
			name = "fastcommit"
		}
		b.Run(name, func(b *testing.B) {
			img, err := os.CreateTemp(dir, "fcswap-bench-*.img")
			require.NoError(b, err)
			path := img.Name()
			require.NoError(b, img.Truncate(256<<20))
			require.NoError(b, img.Close())
			defer os.Remove(path)
			var base blockdev.Device
			if os.Getenv("EXT4IO_BENCH_DIRECT") != "" {
				d, err := blockdev.OpenDirect(path, false)
				require.NoError(b, err)
				defer d.Close()
				base = d
			} else {
				d, err := blockdev.OpenFile(path, false)
				require.NoError(b, err)
				defer d.Close()
				base = d
			}
			require.NoError(b, ext4io.Format(base, ext4io.FormatOptions{FastCommit: fc, JournalBlocks: 16384}))
			dev := &countDev{Device: base}
			v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
			require.NoError(b, err)
			f, err := v.OpenFile("db", os.O_RDWR|os.O_CREATE|ext4io.O_DIRECT, 0o644)
			require.NoError(b, err)
			buf := make([]byte, pages*page)
			_, err = f.WriteAt(buf, 0)
			require.NoError(b, err)
			require.NoError(b, v.Sync())
			rng := rand.New(rand.NewPCG(1, 2))
			p := buf[:page]
			b.ResetTimer()
			w0, f0 := dev.writes.Load(), dev.flushes.Load()
			for range b.N {
				p[0]++
				if _, err := f.WriteAtomic(p, int64(rng.IntN(pages)*page)); err != nil {
					b.Fatal(err)
				}
				if err := f.Datasync(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(dev.writes.Load()-w0)/float64(b.N), "writes/op")
			b.ReportMetric(float64(dev.flushes.Load()-f0)/float64(b.N), "flushes/op")
			require.NoError(b, f.Close())
			require.NoError(b, v.Close())
		})
	}
}
