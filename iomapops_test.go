package ext4io_test

import (
	"bytes"
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/ext4io/ext4io/iomap"
	"github.com/stretchr/testify/require"
)

// TestPublicIomapOps drives ext4's public ops through iomap's iterators as
// an engine would: NormalOps allocates under LockIO(IomapNormal),
// OverwriteOps overwrites under the shared lock and answers ErrNeedNormal
// for a hole, the request flags reach Begin, ReportOps feeds Fiemap, and
// e2fsck accepts the image.
func TestPublicIomapOps(t *testing.T) {
	dev := memdev.New(64 << 20)
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{}))
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, WritebackAge: -1})
	require.NoError(t, err)
	f, err := v.Create("blob")
	require.NoError(t, err)
	d, err := v.OpenFile("blob", os.O_RDWR|ext4io.O_DIRECT, 0)
	require.NoError(t, err)

	const bs = 4096
	data := bytes.Repeat([]byte("0123456789abcdef"), 4*bs/16)
	write := func(kind ext4io.IomapKind, p []byte, off int64, flags iomap.Flags) (int, error) {
		l, err := d.LockIO(kind, off, int64(len(p)))
		require.NoError(t, err)
		n, err := iomap.DirectWrite(dev, d.IomapOps(kind), p, off, &iomap.DioOptions{BlockSize: bs, Flags: flags})
		return n, l.Unlock(off, n, err)
	}

	// A hole: the overwrite ops refuse it, as the normal ops do with the
	// OverwriteOnly and NoWait flags; nothing is written.
	_, err = write(ext4io.IomapOverwrite, data, 0, 0)
	require.ErrorIs(t, err, iomap.ErrNeedNormal)
	require.True(t, errors.Is(err, syscall.EAGAIN), "ErrNeedNormal matches EAGAIN: %v", err)
	_, err = write(ext4io.IomapNormal, data, 0, iomap.OverwriteOnly)
	require.ErrorIs(t, err, iomap.ErrNeedNormal)
	_, err = write(ext4io.IomapNormal, data, 0, iomap.NoWait)
	require.ErrorIs(t, err, iomap.ErrWouldBlock)
	require.Zero(t, f.Size())

	// The normal ops allocate, and the file grows at Unlock.
	n, err := write(ext4io.IomapNormal, data, 0, 0)
	require.NoError(t, err)
	require.Equal(t, len(data), n)
	require.Equal(t, int64(len(data)), d.Size())

	// The overwrite ops write the allocated blocks in place, and refuse
	// what lies past the on-disk size after the bytes inside it.
	over := bytes.Repeat([]byte{'x'}, bs)
	_, err = write(ext4io.IomapOverwrite, over, bs, iomap.OverwriteOnly)
	require.NoError(t, err)
	copy(data[bs:], over)
	n, err = write(ext4io.IomapOverwrite, make([]byte, 2*bs), int64(len(data))-bs, 0)
	require.ErrorIs(t, err, iomap.ErrNeedNormal)
	require.Equal(t, bs, n, "the block inside the size is written")
	clear(data[len(data)-bs:])

	// DirectRead with either op and a shared lock; past the end is a hole.
	got := make([]byte, len(data)+bs)
	l, err := d.LockIO(ext4io.IomapOverwrite, 0, int64(len(got)))
	require.NoError(t, err)
	_, err = iomap.DirectRead(dev, d.NormalOps(), got, 0, nil)
	require.NoError(t, l.Unlock(0, 0, err))
	require.Equal(t, data, got[:len(data)])
	require.Equal(t, make([]byte, bs), got[len(data):])

	// Buffered requests belong to the page cache's ops.
	_, err = d.NormalOps().Begin(0, bs, iomap.Write)
	require.ErrorIs(t, err, ext4io.ErrUnsupported)

	// ReportOps needs no lock of the caller.
	var exts []iomap.Extent
	require.NoError(t, iomap.Fiemap(d.ReportOps(), 0, d.Size(), iomap.FiemapOptions{}, func(e iomap.Extent) error {
		exts = append(exts, e)
		return nil
	}))
	require.Len(t, exts, 1)
	require.Equal(t, int64(len(data)), exts[0].Length)

	require.NoError(t, d.Close())
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, dev)
}
