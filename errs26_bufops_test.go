package ext4io_test

import (
	"bytes"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/ext4io/ext4io/iomap"
)

// TestBufferedOpsAfterClose: the page cache and buffered ops a File
// handed out, driven after the Volume was closed (a buffered write, its
// write-back, a sync of the cache), fail and write nothing to the device.
func TestBufferedOpsAfterClose(t *testing.T) {
	base := memdev.New(32 << 20)
	require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{NoDiscard: true}))
	d := &countingDev{Device: base}
	v, err := ext4io.Open(d, ext4io.Options{Writable: true})
	require.NoError(t, err)
	f, err := v.Create("f")
	require.NoError(t, err)
	_, err = f.Write(bytes.Repeat([]byte{1}, 64<<10))
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	ops, key := f.BufferedOps()
	pc := v.PageCache()
	require.NotNil(t, ops)
	require.NoError(t, v.Close())
	before := d.writes.Load()
	_, werr := iomap.BufferedWrite(pc, ops, key, bytes.Repeat([]byte{2}, 64<<10), 128<<10, 64<<10)
	require.ErrorIs(t, werr, ext4io.ErrClosed, "BufferedWrite after Close")
	_, _ = pc.WritebackOldest()
	_ = pc.Writeback(key, 0, 1<<20)
	_ = pc.Sync()
	require.Equal(t, before, d.writes.Load(), "device writes after Close")
}

// countingDev counts the writes, zeroings and discards that reach it.
type countingDev struct {
	blockdev.Device
	writes atomic.Int64
}

func (d *countingDev) WriteAt(p []byte, off int64) (int, error) {
	d.writes.Add(1)
	return d.Device.WriteAt(p, off)
}

func (d *countingDev) ZeroOut(off, n int64) error {
	d.writes.Add(1)
	return d.Device.ZeroOut(off, n)
}

func (d *countingDev) Discard(off, n int64) error {
	d.writes.Add(1)
	return d.Device.Discard(off, n)
}

// TestBufferedOpsOfClosedFile: the buffered ops of a File closed since
// (its file unlinked, so Close freed the inode) refuse a buffered write
// and its write-back: nothing is mapped into the freed inode, another
// file keeps its data, and e2fsck is clean.
func TestBufferedOpsOfClosedFile(t *testing.T) {
	img := formatImage(t, 32<<20, ext4io.FormatOptions{})
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	f, err := v.Create("f")
	require.NoError(t, err)
	_, err = f.Write(bytes.Repeat([]byte{1}, 64<<10))
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	ops, key := f.BufferedOps()
	pc := v.PageCache()
	require.NoError(t, v.Unlink("f"))
	require.NoError(t, f.Close())
	keep := bytes.Repeat([]byte{3}, 64<<10)
	require.NoError(t, v.WriteFile("g", keep, 0o644))
	_, werr := iomap.BufferedWrite(pc, ops, key, bytes.Repeat([]byte{2}, 64<<10), 0, 64<<10)
	require.ErrorIs(t, werr, ext4io.ErrClosed, "BufferedWrite through a closed file's ops")
	require.NoError(t, pc.Writeback(key, 0, 1<<20), "write-back of the key, now another file's")
	require.NoError(t, v.Sync())
	got, err := v.ReadFile("g")
	require.NoError(t, err)
	require.Equal(t, keep, got)
	require.NoError(t, v.Close())
	e2fs.Fsck(t, img)
}
