package errordev_test

import (
	"errors"
	"testing"

	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/stretchr/testify/require"
)

// TestAfterAny checks that the device dies after n operations of any kind
// mixed: reads, writes and flushes all count, and everything after fails
// with ErrInjected without reaching the device.
func TestAfterAny(t *testing.T) {
	mem := memdev.New(1 << 20)
	dev := errordev.New(mem, errordev.AfterAny(3))
	buf := make([]byte, 512)
	_, err := dev.ReadAt(buf, 0)
	require.NoError(t, err, "op 0 (read)")
	require.NoError(t, dev.Flush(), "op 1 (flush)")
	_, err = dev.WriteAt([]byte{1}, 0)
	require.NoError(t, err, "op 2 (write)")
	_, err = dev.WriteAt([]byte{2}, 0)
	require.ErrorIs(t, err, errordev.ErrInjected, "op 3 (write) after death")
	_, err = dev.ReadAt(buf, 0)
	require.ErrorIs(t, err, errordev.ErrInjected, "op 4 (read)")
	err = dev.Flush()
	require.True(t, errors.Is(err, errordev.ErrInjected), "op 5 (flush): %v", err)
	_, err = mem.ReadAt(buf[:1], 0)
	require.NoError(t, err)
	require.Equal(t, byte(1), buf[0], "a failed write reached the device")
}
