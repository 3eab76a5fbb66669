package ext4io_test

import (
	"context"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/stretchr/testify/require"
)

// TestNilDevice: Open, OpenContext, Format and FormatContext given no
// device fail with ErrInvalid, as every method of a nil Volume or File
// does, instead of panicking with a nil dereference (Open in
// blockdev.Claim or the superblock read, Format in blockdev.Claim).
func TestNilDevice(t *testing.T) {
	for _, o := range []ext4io.Options{{}, {Writable: true}, {Replay: true}} {
		v, err := ext4io.Open(nil, o)
		require.ErrorIs(t, err, ext4io.ErrInvalid, "Open %+v", o)
		require.Nil(t, v)
		_, err = ext4io.OpenContext(context.Background(), nil, o)
		require.ErrorIs(t, err, ext4io.ErrInvalid, "OpenContext %+v", o)
	}
	require.ErrorIs(t, ext4io.Format(nil, ext4io.FormatOptions{}), ext4io.ErrInvalid)
	require.ErrorIs(t, ext4io.FormatContext(context.Background(), nil, ext4io.FormatOptions{}), ext4io.ErrInvalid)
}
