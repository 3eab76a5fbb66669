package ext4io

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHomeWritesCap: the bytes of writes in place in flight are capped: a
// writer over the cap waits until earlier writes settle, and one write
// larger than the cap alone goes through.
func TestHomeWritesCap(t *testing.T) {
	t.Parallel()
	h := newHomeWrites()
	big := h.add(1, [][2]int64{{0, homeMaxBytes + 4096}}) // alone: admitted
	added := make(chan []*homeWrite)
	go func() { added <- h.add(2, [][2]int64{{1 << 30, 16 << 10}}) }()
	select {
	case <-added:
		t.Fatal("a write over the cap did not wait")
	case <-time.After(50 * time.Millisecond):
	}
	close(big[0].written)
	h.remove(big[0])
	ws := <-added
	close(ws[0].written)
	h.remove(ws[0])
	require.Zero(t, h.n.Load())
	require.Zero(t, h.bytes)
}
