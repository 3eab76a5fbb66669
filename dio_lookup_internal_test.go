package ext4io

import (
	"bytes"
	"testing"

	"github.com/ext4io/ext4io/iomap"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDirectOverwriteAttemptOneBlock: the overwrite attempt of a one-block
// direct write (directOverwrite, counted through v.owOpts) is iomap's fast
// path alone. Into an unwritten block, which the fast path refuses, it
// calls no Begin: the overwrite ops' iterator would look the block up a
// second time only to refuse it again, and the write inside the operation
// (directShared) maps it anyway. An overwrite of the block written since
// is the fast path's one device write. A write of several blocks still
// goes through the iterator there, which can write written blocks of
// several extents outside the operation (TestDirectWriteIntoHoleAfterWrittenBlocks).
func TestDirectOverwriteAttemptOneBlock(t *testing.T) {
	const bs = 4096
	_, v := memVolume(t, 64<<20, bs)
	defer v.Close()
	var ctr iomap.CounterSet
	v.owOpts.Counters = &ctr // before any direct write; read-only after
	f, d := preallocated(t, v, "f", 1<<20)
	defer f.Close()
	defer d.Close()

	data := bytes.Repeat([]byte{0x3c}, 2*bs)
	_, err := d.WriteAt(data[:bs], 16*bs)
	require.NoError(t, err)
	assert.Equal(t, iomap.Counters{}, ctr.Read(), "the attempt on an unwritten block maps nothing with Begin and writes nothing")
	assert.EqualValues(t, 1, v.Counters().Conversions)

	_, err = d.WriteAt(data[:bs], 16*bs)
	require.NoError(t, err)
	overwrite := iomap.Counters{
		Begins: iomap.OpCounts{Write: 1, Direct: 1}, Ends: iomap.OpCounts{Write: 1, Direct: 1}, DeviceWrites: 1,
	}
	assert.Equal(t, overwrite, ctr.Read(), "an overwrite is the fast path's one device write")

	_, err = d.WriteAt(data, 32*bs)
	require.NoError(t, err)
	assert.Equal(t, iomap.Counters{Begins: iomap.OpCounts{Write: 1, Direct: 1}}, ctr.Read().Sub(overwrite),
		"two unwritten blocks: the iterator's Begin refuses them")
	assert.EqualValues(t, 2, v.Counters().Conversions)

	got := make([]byte, 2*bs)
	_, err = d.ReadAt(got[:bs], 16*bs)
	require.NoError(t, err)
	_, err = d.ReadAt(got[bs:], 33*bs)
	require.NoError(t, err)
	assert.Equal(t, data, got)
}
