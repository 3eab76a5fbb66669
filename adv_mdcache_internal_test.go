package ext4io

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/stretchr/testify/require"
)

// TestMetaCacheConcurrentNoJournal runs TestMetaCacheModel's workers at
// the same time on a volume without a journal (write-through Dirty) and
// on a Tuning.NoJournal one (write-back), with a metadata cache of four
// blocks: GetWrite and Dirty (cachedIO.owned, the spare buffers) run
// from several goroutines at once, which TestMetaCacheModel's
// no-journal case does not do (its workers take turns).
func TestMetaCacheConcurrentNoJournal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		features  string
		writeBack bool
	}{{"nojournal", "^has_journal", false}, {"writeback", "", true}} {
		t.Run(tc.name, func(t *testing.T) {
			const bs = 1024
			dev := memdev.NewBlockSize(16<<20, bs)
			require.NoError(t, Format(dev, FormatOptions{BlockSize: bs, Features: tc.features}))
			v, err := Open(dev, Options{Writable: true, MetaCacheBytes: 4 * bs, PageCacheBytes: -1,
				WritebackAge: -1, CommitInterval: -1, Tuning: Tuning{NoJournal: tc.writeBack}})
			require.NoError(t, err)
			require.Nil(t, v.jm)
			const workers, ops = 4, 300
			models := make([]map[string][]byte, workers)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					models[w] = runCacheWorker(t, v, w, ops, nil)
				}()
			}
			wg.Wait()
			checkMetaCache(t, v)
			require.NoError(t, v.Close())
			checkImage(t, dev)
			ro, err := Open(dev, Options{})
			require.NoError(t, err)
			defer ro.Close()
			for w, model := range models {
				checkModel(t, ro, fmt.Sprintf("/w%d", w), model)
			}
		})
	}
}

// TestNoJournalTreeBlocksRewritten writes a sparse file, one block in
// two, on Tuning.NoJournal and no-journal volumes, so that its extent
// tree grows leaf blocks that are rewritten again and again. The extent
// package rewrites a leaf from the same buffer each time (extent.BlockIO:
// the buffer is only valid during WriteBlock), so the metadata cache must
// copy what treeIO.WriteBlock passes to Dirty: only the block GetWrite
// handed out may be kept (cachedIO.keep). Kept, the leaf buffer becomes a
// cached block, goes to the spare buffers when the leaf is dirtied again,
// and the next GetWrite copies another block into the tree.
func TestNoJournalTreeBlocksRewritten(t *testing.T) {
	for _, tc := range []struct {
		name      string
		features  string
		writeBack bool
	}{{"nojournal", "^has_journal", false}, {"writeback", "", true}} {
		t.Run(tc.name, func(t *testing.T) {
			const bs, nblk = 1024, 600
			dev := memdev.NewBlockSize(16<<20, bs)
			require.NoError(t, Format(dev, FormatOptions{BlockSize: bs, Features: tc.features}))
			v, err := Open(dev, Options{Writable: true, PageCacheBytes: -1, WritebackAge: -1,
				CommitInterval: -1, Tuning: Tuning{NoJournal: tc.writeBack}})
			require.NoError(t, err)
			f, err := v.Create("/sparse")
			require.NoError(t, err)
			blk := func(i int) []byte { return bytes.Repeat([]byte{byte(i), byte(i >> 8), 0xA5}, bs/3+1)[:bs] }
			for i := 0; i < nblk; i += 2 {
				_, err := f.WriteAt(blk(i), int64(i)*bs)
				require.NoError(t, err)
			}
			exts, err := f.Extents()
			require.NoError(t, err)
			require.Len(t, exts, nblk/2, "one extent per written block")
			require.NoError(t, f.Close())
			require.NoError(t, v.Close())
			checkImage(t, dev)

			ro, err := Open(dev, Options{})
			require.NoError(t, err)
			defer ro.Close()
			got, err := ro.ReadFile("/sparse")
			require.NoError(t, err)
			require.Len(t, got, (nblk-1)*bs)
			for i := 0; i < nblk-1; i++ {
				want := make([]byte, bs)
				if i%2 == 0 {
					want = blk(i)
				}
				require.Equal(t, want, got[i*bs:(i+1)*bs], "block %d", i)
			}
		})
	}
}

// TestWriteBackSpareNotShared: a Tuning.NoJournal volume's metadata
// cache recycles the buffer of a dirty block replaced by a newer copy
// only if nobody else refers to it. A slice Read handed out must keep its
// bytes after its block is replaced and GetWrite takes a spare buffer
// for another block.
func TestWriteBackSpareNotShared(t *testing.T) {
	dev := memdev.New(32 << 20)
	require.NoError(t, Format(dev, FormatOptions{}))
	v, err := Open(dev, Options{Writable: true, PageCacheBytes: -1, WritebackAge: -1,
		Tuning: Tuning{NoJournal: true}})
	require.NoError(t, err)
	m, ok := v.meta.(*cachedIO)
	require.True(t, ok)
	require.True(t, m.writeBack)
	x, y := v.groups[0].InodeTable, v.groups[0].BlockBitmap // different contents

	rewrite := func(blk uint64) {
		b, err := m.GetWrite(blk)
		require.NoError(t, err)
		require.NoError(t, m.Dirty(blk, b))
	}
	rewrite(x) // x dirty, its buffer referred to by the cache only
	s, err := m.Read(x)
	require.NoError(t, err)
	snap := bytes.Clone(s)
	rewrite(x) // replaces the copy s refers to
	rewrite(y) // GetWrite takes a spare buffer, if any
	require.Equal(t, snap, s, "a slice Read returned was recycled for another block")
	require.NotEqual(t, snap, func() []byte { b, _ := m.Read(y); return b }())
	require.NoError(t, v.Close())
	checkImage(t, dev)
}
