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
	"github.com/stretchr/testify/assert"
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

// TestPublicBufferedOps drives the file's buffered ops through iomap's
// page-cache iterators as File's own buffered writes do: a write into a
// hole reserves (Delalloc, no allocation), Unlock grows the size, the
// data reads back from the cache, write-back maps it, and the image is
// clean with the data in place after a reopen.
func TestPublicBufferedOps(t *testing.T) {
	dev := memdev.New(64 << 20)
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{}))
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, WritebackAge: -1})
	require.NoError(t, err)
	f, err := v.Create("blob")
	require.NoError(t, err)
	ops, key := f.BufferedOps()
	require.NotNil(t, ops)
	require.Same(t, ops, f.IomapOps(ext4io.IomapBuffered))
	pc := v.PageCache()
	require.NotNil(t, pc)

	data := bytes.Repeat([]byte("buffered"), 3*4096/8+100) // not block-aligned
	l, err := f.LockIO(ext4io.IomapBuffered, 0, int64(len(data)))
	require.NoError(t, err)
	n, err := iomap.BufferedWrite(pc, ops, key, data, 0, l.Size())
	require.NoError(t, l.Unlock(0, n, err))
	require.Equal(t, len(data), n)
	require.Equal(t, int64(len(data)), f.Size(), "Unlock grows the size")
	m, err := ops.Begin(0, 4096, 0)
	require.NoError(t, err)
	require.Equal(t, iomap.Delalloc, m.Type, "reserved, not allocated: %v", m)
	require.NoError(t, ops.End(0, 4096, 0, 0, m))

	got := make([]byte, len(data))
	_, err = f.ReadAt(got, 0)
	require.NoError(t, err)
	require.Equal(t, data, got)

	require.NoError(t, f.Sync())
	m, err = ops.Begin(0, 4096, 0)
	require.NoError(t, err)
	require.Equal(t, iomap.Mapped, m.Type, "mapped by write-back: %v", m)
	require.NoError(t, ops.End(0, 4096, 0, 0, m))
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, dev)

	v, err = ext4io.Open(dev, ext4io.Options{})
	require.NoError(t, err)
	defer v.Close()
	r, err := v.Open("blob")
	require.NoError(t, err)
	got = make([]byte, len(data))
	_, err = r.ReadAt(got, 0)
	require.NoError(t, err)
	require.Equal(t, data, got)
}

// TestMapOverwriteAgreesWithBegin: the ops' single-extent fast path
// (iomap.Overwriter) answers only where Begin returns one flagless
// Mapped mapping over the whole request, with the same address, for
// both ops and every request-flag combination, over written, unwritten,
// hole and past-the-size ranges.
func TestMapOverwriteAgreesWithBegin(t *testing.T) {
	const bs = 4096
	dev := memdev.New(64 << 20)
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{}))
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, WritebackAge: -1})
	require.NoError(t, err)
	defer v.Close()
	d, err := v.OpenFile("f", os.O_RDWR|os.O_CREATE|ext4io.O_DIRECT, 0o644)
	require.NoError(t, err)
	defer d.Close()
	// Blocks [0, 8) written, [8, 12) a hole, [12, 16) unwritten, [16, 20)
	// written in a second extent; the size ends inside block 19.
	_, err = d.WriteAt(make([]byte, 8*bs), 0)
	require.NoError(t, err)
	require.NoError(t, d.Fallocate(ext4io.FallocAllocate, 12*bs, 4*bs))
	_, err = d.WriteAt(make([]byte, 4*bs), 16*bs)
	require.NoError(t, err)
	require.NoError(t, d.Truncate(20*bs-100))

	served, refused := 0, 0
	for _, kind := range []ext4io.IomapKind{ext4io.IomapNormal, ext4io.IomapOverwrite} {
		ops := d.IomapOps(kind)
		ow, ok := ops.(iomap.Overwriter)
		require.True(t, ok, "%v ops implement iomap.Overwriter", kind)
		for _, flags := range []iomap.Flags{iomap.Direct, iomap.Direct | iomap.Write, iomap.Direct | iomap.Write | iomap.OverwriteOnly, iomap.Direct | iomap.Write | iomap.NoWait} {
			for first := int64(0); first < 21; first++ {
				for n := int64(1); first+n <= 22; n++ {
					off, length := first*bs, n*bs
					l, err := d.LockIO(kind, off, length)
					require.NoError(t, err)
					addr, ok := ow.MapOverwrite(off, length, flags)
					if !ok {
						refused++
						require.NoError(t, l.Unlock(off, 0, nil))
						continue
					}
					served++
					m, err := ops.Begin(off, length, flags)
					require.NoError(t, err, "%v %#x [%d, +%d)", kind, flags, off, length)
					require.NoError(t, ops.End(off, length, 0, flags, m))
					require.NoError(t, l.Unlock(off, 0, nil))
					require.Equal(t, iomap.Mapped, m.Type, "%v %#x [%d, +%d): %v", kind, flags, off, length, m)
					require.Zero(t, m.Flags, "%v", m)
					require.LessOrEqual(t, m.Offset, off)
					require.GreaterOrEqual(t, m.End(), off+length, "%v %#x [%d, +%d): %v", kind, flags, off, length, m)
					require.Equal(t, m.Addr+off-m.Offset, addr)
				}
			}
		}
	}
	require.NotZero(t, served)
	require.NotZero(t, refused)
}

// TestDirectWriteIntoHoleAfterWrittenBlocks: an aligned direct write
// whose first blocks are written and whose next blocks are a punched hole
// inside the size is written by the overwrite ops up to the hole (outside
// any operation) and by the normal ops from there, each byte once: the
// data reads back, and the counters show two shared attempts that were
// not overwrites (the one outside the operation and the one inside,
// which finds the hole too) and one exclusive write.
func TestDirectWriteIntoHoleAfterWrittenBlocks(t *testing.T) {
	const bs = 4096
	dev := memdev.New(64 << 20)
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{}))
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true, WritebackAge: -1})
	require.NoError(t, err)
	d, err := v.OpenFile("f", os.O_RDWR|os.O_CREATE|ext4io.O_DIRECT, 0o644)
	require.NoError(t, err)
	_, err = d.WriteAt(bytes.Repeat([]byte{1}, 6*bs), 0)
	require.NoError(t, err)
	require.NoError(t, d.Fallocate(ext4io.FallocPunchHole, 2*bs, 2*bs))

	before := v.Counters()
	want := bytes.Repeat([]byte{2}, 5*bs)
	n, err := d.WriteAt(want, 0)
	require.NoError(t, err)
	require.Equal(t, len(want), n)
	require.Equal(t, int64(6*bs), d.Size())
	c := v.Counters()
	assert.Equal(t, uint64(2), c.SharedLocks-before.SharedLocks, "shared")
	assert.Equal(t, uint64(0), c.Overwrites-before.Overwrites, "overwrites")
	assert.Equal(t, uint64(1), c.ExclusiveLocks-before.ExclusiveLocks, "exclusive")

	got := make([]byte, 6*bs)
	_, err = d.ReadAt(got, 0)
	require.NoError(t, err)
	require.Equal(t, want, got[:len(want)])
	require.Equal(t, bytes.Repeat([]byte{1}, bs), got[len(want):])
	require.NoError(t, d.Close())
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, dev)
}
