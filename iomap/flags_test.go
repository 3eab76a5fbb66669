package iomap_test

import (
	"syscall"
	"testing"

	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/iomap"
	"github.com/stretchr/testify/require"
)

// completerOps maps everything written in place and counts EndIO calls.
type completerOps struct {
	iomap.Funcs
	endIO int
}

func (c *completerOps) EndIO(off, n int64, m iomap.Mapping) error { c.endIO++; return nil }

// TestDioRequestFlags checks that DioOptions.Flags reach Begin and End,
// that other flags are refused, that an Ops' Completer serves as EndIO,
// and that an overwrite-style ErrNeedNormal stops the write after the
// bytes done, matching EAGAIN.
func TestDioRequestFlags(t *testing.T) {
	const bs = 4096
	dev := memdev.New(1 << 20)
	var begins, ends []iomap.Flags
	ops := &completerOps{}
	ops.BeginFunc = func(off, length int64, f iomap.Flags) (iomap.Mapping, error) {
		begins = append(begins, f)
		if f&iomap.OverwriteOnly != 0 && off >= 2*bs {
			return iomap.Mapping{}, iomap.ErrNeedNormal // "not mine": a hole
		}
		return iomap.Mapping{Offset: off, Length: bs, Type: iomap.Mapped, Addr: off}, nil
	}
	ops.EndFunc = func(off, length, written int64, f iomap.Flags, m iomap.Mapping) error {
		ends = append(ends, f)
		return nil
	}
	buf := make([]byte, 3*bs)
	n, err := iomap.DirectWrite(dev, ops, buf, 0, &iomap.DioOptions{Flags: iomap.OverwriteOnly | iomap.NoWait})
	require.ErrorIs(t, err, iomap.ErrNeedNormal)
	require.ErrorIs(t, err, iomap.ErrWouldBlock)
	require.ErrorIs(t, err, syscall.EAGAIN)
	require.Equal(t, 2*bs, n)
	want := iomap.Write | iomap.Direct | iomap.OverwriteOnly | iomap.NoWait
	require.Equal(t, []iomap.Flags{want, want, want}, begins)
	require.Equal(t, []iomap.Flags{want, want}, ends)
	require.Equal(t, 2, ops.endIO, "the Completer ran for each completed segment")

	begins = nil
	_, err = iomap.DirectRead(dev, ops, buf[:bs], 0, &iomap.DioOptions{Flags: iomap.NoWait})
	require.NoError(t, err)
	require.Equal(t, []iomap.Flags{iomap.Direct | iomap.NoWait}, begins)

	_, err = iomap.DirectWrite(dev, ops, buf, 0, &iomap.DioOptions{Flags: iomap.Report})
	require.ErrorIs(t, err, iomap.ErrInvalid)
}
