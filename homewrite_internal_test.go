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
	big := h.add(1, [][2]int64{{0, homeMaxBytes + 4096}}, nil) // alone: admitted
	added := make(chan []*homeWrite)
	go func() { added <- h.add(2, [][2]int64{{1 << 30, 16 << 10}}, nil) }()
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

// TestHomeWritesFlushClaims: a flush that must wait for writes in place
// (waitWritten) issues the ones whose goroutine has not started them
// itself, instead of waiting for that goroutine to be scheduled; the
// goroutine then finds them claimed and only settles them. A write it
// issued fails the flush as the goroutine's would.
func TestHomeWritesFlushClaims(t *testing.T) {
	t.Parallel()
	h := newHomeWrites()
	var ran []int64
	job := &homeJob{run: func(ws []*homeWrite) {
		for _, w := range ws {
			ran = append(ran, w.off)
			w.err = ErrIO
			close(w.written)
		}
	}}
	ws := h.add(1, [][2]int64{{0, 4096}, {8192, 4096}}, job)
	// No goroutine runs the job: the flush does, and reports its error.
	errc := make(chan error, 1)
	go func() { errc <- h.waitWritten(0, -1) }()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, ErrIO)
	case <-time.After(5 * time.Second):
		t.Fatal("waitWritten waited for writes nobody had started")
	}
	require.Equal(t, []int64{0, 8192}, ran)
	require.False(t, job.claim(), "the goroutine claimed writes a flush issued")
	require.Equal(t, []int64{0, 8192}, ran)
	for _, w := range ws {
		h.remove(w)
	}
	require.Zero(t, h.n.Load())
}
