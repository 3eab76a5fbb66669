package bench

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestWarmedBlocksAreTheWorkloads checks that the sequential writers'
// preparation writes the device blocks their phases then write: every
// block the engine's file gets, written up to the budget after the
// preparation, was written by it (memdev starts zeroed), and raw's region
// is written too.
func TestWarmedBlocksAreTheWorkloads(t *testing.T) {
	for _, name := range []string{"seqwrite-1m", "buffered-4k"} {
		t.Run(name, func(t *testing.T) {
			ws, err := selectWorkloads([]string{name})
			require.NoError(t, err)
			w := ws[0]
			require.True(t, warmsDevice(w))
			const size = 128 << 20
			c := &config{Config: Config{Backend: "memory", Runtime: 10 * time.Millisecond, BlockSize: 4096, Seed: 1, Repeat: 1}}
			dev := memdev.New(size)
			defer dev.Close()
			r := newBenchRun(c, dev, size, regionFor(size), mustPlan(t, size, c.BlockSize))
			defer r.closeEngine()
			eng, err := r.prepareEngine(w)
			require.NoError(t, err)
			defer eng.f.Close()
			raw, _, err := r.prepareRaw(w, eng)
			require.NoError(t, err)

			snap := make([]byte, size)
			_, err = dev.ReadAt(snap, 0)
			require.NoError(t, err)
			zero := make([]byte, 4096)
			blk := make([]byte, 4096)
			for off := int64(0); off < r.region; off += 4096 {
				_, err := raw.ReadAt(blk, off)
				require.NoError(t, err)
				require.NotEqual(t, zero, blk, "raw region at %d not written", off)
			}

			f, err := r.v.OpenFile(benchFile, os.O_RDWR|ext4io.O_DIRECT, 0)
			require.NoError(t, err)
			defer f.Close()
			require.NoError(t, fillSeq(f, r.plan.SeqBudget))
			exts, err := f.Extents()
			require.NoError(t, err)
			require.NotEmpty(t, exts)
			bs := int64(r.v.BlockSize())
			for _, e := range exts {
				for b := int64(e.Physical); b < int64(e.Physical)+int64(e.Length); b++ {
					require.False(t, bytes.Equal(zero, snap[b*bs:(b+1)*bs]), "block %d of the file was not warmed", b)
				}
			}
		})
	}
}
