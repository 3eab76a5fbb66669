package iomap_test

import (
	"bytes"
	"testing"

	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/iomap"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fastOps is an Ops with the single-extent fast path: blocks [0, 8) of
// the file are written at device block 16; everything else is refused
// by MapOverwrite and mapped by Begin at device block 32 + block.
type fastOps struct {
	begins, ends, fast int
	flags              iomap.Flags // the flags MapOverwrite saw last
}

const fastBS = 4096

func (o *fastOps) MapOverwrite(off, length int64, flags iomap.Flags) (int64, bool) {
	o.flags = flags
	if off+length > 8*fastBS {
		return 0, false
	}
	o.fast++
	return 16*fastBS + off, true
}

func (o *fastOps) Begin(off, length int64, flags iomap.Flags) (iomap.Mapping, error) {
	o.begins++
	blk := off / fastBS
	if blk < 8 {
		return iomap.Mapping{Offset: 0, Length: 8 * fastBS, Type: iomap.Mapped, Addr: 16 * fastBS}, nil
	}
	return iomap.Mapping{Offset: blk * fastBS, Length: fastBS, Type: iomap.Mapped, Addr: (32 + blk) * fastBS}, nil
}

func (o *fastOps) End(off, length, written int64, flags iomap.Flags, m iomap.Mapping) error {
	o.ends++
	return nil
}

// TestOverwriterFastPath: a request one MapOverwrite answer covers is one
// device I/O with neither Begin nor End, counted as one of each; a
// refused request goes through Begin and End; the request flags reach
// MapOverwrite; the data lands where Begin would have put it.
func TestOverwriterFastPath(t *testing.T) {
	dev := memdev.New(1 << 20)
	ops := &fastOps{}
	var ctr iomap.CounterSet
	opt := &iomap.DioOptions{BlockSize: fastBS, Align: 512, Flags: iomap.OverwriteOnly, Counters: &ctr}

	data := bytes.Repeat([]byte{9}, 2*fastBS)
	n, err := iomap.DirectWrite(dev, ops, data, 3*fastBS, opt)
	require.NoError(t, err)
	require.Equal(t, len(data), n)
	assert.Equal(t, 1, ops.fast)
	assert.Zero(t, ops.begins, "the fast path calls no Begin")
	assert.Zero(t, ops.ends, "the fast path calls no End")
	assert.Equal(t, iomap.Write|iomap.Direct|iomap.OverwriteOnly, ops.flags)
	got := make([]byte, len(data))
	_, err = dev.ReadAt(got, (16+3)*fastBS)
	require.NoError(t, err)
	assert.Equal(t, data, got)

	// Read back through the fast path too.
	clear(got)
	n, err = iomap.DirectRead(dev, ops, got, 3*fastBS, &iomap.DioOptions{Align: 512, Counters: &ctr})
	require.NoError(t, err)
	require.Equal(t, len(got), n)
	assert.Equal(t, data, got)
	assert.Equal(t, iomap.Direct, ops.flags)

	// Crossing block 8: refused, so two mappings from Begin.
	n, err = iomap.DirectWrite(dev, ops, data, 7*fastBS, opt)
	require.NoError(t, err)
	require.Equal(t, len(data), n)
	assert.Equal(t, 2, ops.begins)
	assert.Equal(t, 2, ops.ends)
	_, err = dev.ReadAt(got[:fastBS], (32+8)*fastBS)
	require.NoError(t, err)
	assert.Equal(t, data[:fastBS], got[:fastBS])

	assert.Equal(t, iomap.Counters{
		Begins:       iomap.OpCounts{Read: 1, Write: 3, Direct: 4},
		Ends:         iomap.OpCounts{Read: 1, Write: 3, Direct: 4},
		DeviceReads:  1,
		DeviceWrites: 3,
	}, ctr.Read())

	// Misaligned requests fail as without the fast path.
	_, err = iomap.DirectWrite(dev, ops, data[:100], 0, opt)
	require.ErrorIs(t, err, iomap.ErrInvalid)
}

// TestDirectOverwrite: the fast path alone writes a request MapOverwrite
// answers with one device write and no Begin or End; a refused request
// comes back as ErrNeedNormal with nothing written and no Begin;
// requests and options are checked as DirectWrite checks them.
func TestDirectOverwrite(t *testing.T) {
	dev := memdev.New(1 << 20)
	ops := &fastOps{}
	var ctr iomap.CounterSet
	opt := &iomap.DioOptions{BlockSize: fastBS, Align: 512, Flags: iomap.OverwriteOnly, Counters: &ctr}

	data := bytes.Repeat([]byte{7}, 2*fastBS)
	n, err := iomap.DirectOverwrite(dev, ops, data, 2*fastBS, opt)
	require.NoError(t, err)
	require.Equal(t, len(data), n)
	assert.Equal(t, 1, ops.fast)
	assert.Equal(t, iomap.Write|iomap.Direct|iomap.OverwriteOnly, ops.flags)
	got := make([]byte, len(data))
	_, err = dev.ReadAt(got, (16+2)*fastBS)
	require.NoError(t, err)
	assert.Equal(t, data, got)

	// Crossing block 8: refused, nothing written at Begin's blocks.
	n, err = iomap.DirectOverwrite(dev, ops, data, 7*fastBS, opt)
	require.ErrorIs(t, err, iomap.ErrNeedNormal)
	require.Zero(t, n)
	_, err = dev.ReadAt(got[:fastBS], (32+8)*fastBS)
	require.NoError(t, err)
	assert.Equal(t, make([]byte, fastBS), got[:fastBS])
	assert.Zero(t, ops.begins, "DirectOverwrite calls no Begin")
	assert.Zero(t, ops.ends, "DirectOverwrite calls no End")
	assert.Equal(t, iomap.Counters{
		Begins: iomap.OpCounts{Write: 1, Direct: 1}, Ends: iomap.OpCounts{Write: 1, Direct: 1}, DeviceWrites: 1,
	}, ctr.Read(), "the answered write counts as one Begin, End and device write; the refused one as nothing")

	_, err = iomap.DirectOverwrite(dev, ops, data[:100], 0, opt)
	require.ErrorIs(t, err, iomap.ErrInvalid, "misaligned")
	_, err = iomap.DirectOverwrite(dev, ops, data, 9*fastBS, &iomap.DioOptions{Align: 512, Flags: iomap.Report})
	require.ErrorIs(t, err, iomap.ErrInvalid, "a flag DirectWrite refuses")
	_, err = iomap.DirectOverwrite(dev, ops, data, 0, nil)
	require.ErrorIs(t, err, iomap.ErrInvalid, "no options")
	_, err = iomap.DirectOverwrite(dev, ops, data, 0, &iomap.DioOptions{Align: 512, EndIO: func(int64, int64, iomap.Mapping) error { return nil }})
	require.ErrorIs(t, err, iomap.ErrInvalid, "an EndIO the fast path would not call")
	assert.Equal(t, 1, ops.fast, "no request above was written")
	assert.Zero(t, ops.begins)
}

// TestDirectWriteEndIONoFastPath: a caller's EndIO is called for a write
// MapOverwrite would answer, so DirectWrite maps it with Begin instead.
func TestDirectWriteEndIONoFastPath(t *testing.T) {
	dev := memdev.New(1 << 20)
	ops := &fastOps{}
	var ended int64
	opt := &iomap.DioOptions{BlockSize: fastBS, Align: 512, EndIO: func(off, n int64, m iomap.Mapping) error {
		ended += n
		return nil
	}}
	data := bytes.Repeat([]byte{5}, fastBS)
	n, err := iomap.DirectWrite(dev, ops, data, fastBS, opt)
	require.NoError(t, err)
	require.Equal(t, len(data), n)
	assert.Equal(t, int64(fastBS), ended, "EndIO saw the write")
	assert.Zero(t, ops.fast)
	assert.Equal(t, 1, ops.begins)
	assert.Equal(t, 1, ops.ends)
	got := make([]byte, fastBS)
	_, err = dev.ReadAt(got, (16+1)*fastBS)
	require.NoError(t, err)
	assert.Equal(t, data, got)
}
