package ext4io

import (
	"bytes"
	"io"
	"testing"

	"github.com/ext4io/ext4io/iomap"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDelayedRunAppends: 4 KiB buffered appends into holes are batched
// into the mapper's appended Delayed run (delayrun.go) instead of one
// extent-status insert each, and nothing can tell: the run stops at a
// written extent in its way (which the writes overwrite in place) and at
// a preallocated range made while it grew; a report, a read, a truncate
// and write-back see its blocks Delayed; reservations are one per
// Delayed block and all released or allocated in the end; e2fsck is
// clean and the data reads back.
func TestDelayedRunAppends(t *testing.T) {
	t.Parallel()
	dev, v := memVolume(t, 64<<20, 4096)
	f, err := v.Create("f")
	require.NoError(t, err)
	const bs = 4096
	page := func(b int) []byte { return bytes.Repeat([]byte{byte(b*7 + 1)}, bs) }
	model := make([]byte, 0, 128*bs)
	put := func(b int, p []byte) {
		if need := (b + 1) * bs; len(model) < need {
			model = model[:need]
		}
		copy(model[b*bs:], p)
	}

	// A written extent at blocks 40-41, on disk before the appends.
	for b := 40; b < 42; b++ {
		_, err := f.WriteAt(page(b), int64(b)*bs)
		require.NoError(t, err)
		put(b, page(b))
	}
	require.NoError(t, f.Sync())
	require.Zero(t, v.reserved())
	m := f.n.m
	written, err := m.lookup(40)
	require.NoError(t, err)
	require.Equal(t, mapWritten, written.kind)
	require.EqualValues(t, 2, written.n)

	// Appends over blocks 0-63: 0-39 and 42-63 are holes, 40-41 written.
	for b := range 64 {
		_, err := f.WriteAt(page(b+100), int64(b)*bs)
		require.NoError(t, err)
		put(b, page(b+100))
	}
	assert.EqualValues(t, 22, m.run.n.Load(), "blocks 42-63 wait in the run, not in the extent-status cache")
	assert.EqualValues(t, 62, v.reserved(), "one reservation per block written into a hole")
	assert.EqualValues(t, 62, f.n.delayed)

	// A preallocated range ahead of the run, in the hole it was started
	// in: appends stop being batched there and write into it.
	require.NoError(t, f.Fallocate(FallocKeepSize, 70*bs, 10*bs))
	assert.Zero(t, m.run.n.Load(), "a mapping change flushes the run")
	for b := 64; b < 90; b++ {
		_, err := f.WriteAt(page(b+100), int64(b)*bs)
		require.NoError(t, err)
		put(b, page(b+100))
	}
	assert.EqualValues(t, 62+6+10, v.reserved(), "blocks 64-69 and 80-89 reserved, the preallocated 70-79 not")

	// The report (fiemap) sees the batched blocks Delayed.
	want := []iomap.Mapping{
		{Offset: 0, Length: 40 * bs, Type: iomap.Delalloc},
		{Offset: 40 * bs, Length: 2 * bs, Type: iomap.Mapped, Addr: int64(written.pblk) * bs},
		{Offset: 42 * bs, Length: 28 * bs, Type: iomap.Delalloc},
		{Offset: 70 * bs, Length: 10 * bs, Type: iomap.Unwritten},
		{Offset: 80 * bs, Length: 10 * bs, Type: iomap.Delalloc},
	}
	rep := f.ReportOps()
	for _, w := range want {
		got, err := rep.Begin(w.Offset, w.Length, 0)
		require.NoError(t, err)
		got.Length = min(got.Length, w.Length)
		if w.Type != iomap.Mapped {
			w.Addr = iomap.NoAddr
		}
		if w.Type == iomap.Unwritten {
			w.Addr = got.Addr
		}
		assert.Equal(t, w, iomap.Mapping{Offset: got.Offset, Length: got.Length, Type: got.Type, Addr: got.Addr}, "mapping at block %d", w.Offset/bs)
	}

	// More appends, a read, then a truncate into the run: the blocks cut
	// off give their reservations back.
	for b := 90; b < 100; b++ {
		_, err := f.WriteAt(page(b+100), int64(b)*bs)
		require.NoError(t, err)
		put(b, page(b+100))
	}
	assert.EqualValues(t, 10, m.run.n.Load())
	got := make([]byte, len(model))
	_, err = f.ReadAt(got, 0)
	if err != io.EOF {
		require.NoError(t, err)
	}
	require.True(t, bytes.Equal(model, got), "read back before write-back")
	require.NoError(t, f.Truncate(95*bs))
	model = model[:95*bs]
	assert.EqualValues(t, 62+6+10+5, v.reserved(), "truncate released blocks 95-99")
	assert.EqualValues(t, 62+6+10+5, f.n.delayed)

	require.NoError(t, f.Sync())
	assert.Zero(t, v.reserved())
	assert.Zero(t, f.n.delayed)
	after, err := m.lookup(40)
	require.NoError(t, err)
	assert.Equal(t, mapWritten, after.kind)
	assert.Equal(t, written.pblk, after.pblk, "block 40 overwritten in place")
	require.NoError(t, f.Close())

	ro := reopenChecked(t, v, dev, "f")
	got = make([]byte, len(model)+1)
	n, err := ro.ReadAt(got, 0)
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, len(model), n)
	require.True(t, bytes.Equal(model, got[:n]), "read back after reopening")
}

// TestDelayedRunConcurrentReaders: readers and reports racing with 4 KiB
// appends flush the appended run from under the shared inode lock while
// the writer grows it again (run under -race); every block read is either
// not yet written or the appended data, and after Sync nothing stays
// reserved and e2fsck is clean.
func TestDelayedRunConcurrentReaders(t *testing.T) {
	t.Parallel()
	dev, v := memVolume(t, 64<<20, 4096)
	f, err := v.Create("f")
	require.NoError(t, err)
	const bs, blocks = 4096, 2048
	page := func(b int) []byte { return bytes.Repeat([]byte{byte(b%251 + 1)}, bs) }
	done := make(chan struct{})
	errc := make(chan error, 3)
	for r := range 2 {
		go func() {
			buf := make([]byte, bs)
			rep := f.ReportOps()
			for i := 0; ; i++ {
				select {
				case <-done:
					errc <- nil
					return
				default:
				}
				b := (i*7 + r*13) % blocks
				if r == 0 {
					if _, err := rep.Begin(int64(b)*bs, bs, 0); err != nil {
						errc <- err
						return
					}
					continue
				}
				n, err := f.ReadAt(buf, int64(b)*bs)
				if err != nil && err != io.EOF {
					errc <- err
					return
				}
				if n == bs && !bytes.Equal(buf, page(b)) {
					errc <- assert.AnError
					return
				}
			}
		}()
	}
	for b := range blocks {
		_, err := f.WriteAt(page(b), int64(b)*bs)
		require.NoError(t, err)
	}
	close(done)
	for range 2 {
		require.NoError(t, <-errc)
	}
	require.NoError(t, f.Sync())
	assert.Zero(t, v.reserved())
	require.NoError(t, f.Close())
	ro := reopenChecked(t, v, dev, "f")
	got := make([]byte, bs)
	for b := range blocks {
		_, err := ro.ReadAt(got, int64(b)*bs)
		require.NoError(t, err)
		require.True(t, bytes.Equal(page(b), got), "block %d", b)
	}
}
