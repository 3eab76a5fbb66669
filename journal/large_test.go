package journal

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStartLarge checks that a handle of more credits than a transaction
// of a quarter of the log takes (MaxCredits) gets a transaction that holds
// all its blocks, up to the whole log (MaxLargeCredits), with committed
// transactions still to checkpoint and a running one partly full; and
// that one larger still is refused with ErrNoSpace instead of spread over
// transactions.
func TestStartLarge(t *testing.T) {
	dev := newTestDev(t)
	j, err := Create(testConfig(dev), CreateOptions{UUID: [16]byte{1}, CsumV3: true})
	require.NoError(t, err)
	defer j.Close()
	ctx := context.Background()
	maxc, large := j.MaxCredits(), j.MaxLargeCredits()
	require.Greater(t, large, 2*maxc)
	require.LessOrEqual(t, j.logBound(large), int(j.last-j.first)-logSlack)
	require.Greater(t, j.logBound(large+1), int(j.last-j.first)-logSlack)
	require.LessOrEqual(t, j.logBound(maxc), j.maxTxn)

	dirty := func(h *Handle, from, n uint64) {
		t.Helper()
		for b := from; b < from+n; b++ {
			require.NoError(t, h.GetWriteAccess(b))
			require.NoError(t, h.Dirty(b, initialBlock(b)))
		}
	}
	// A committed transaction (log space in use) and a running one.
	h, err := j.Start(10)
	require.NoError(t, err)
	dirty(h, tHome0, 10)
	require.NoError(t, h.Stop())
	require.NoError(t, j.Sync(ctx))
	h, err = j.Start(10)
	require.NoError(t, err)
	dirty(h, tHome0+10, 10)
	require.NoError(t, h.Stop())

	_, err = j.StartLarge(large + 1)
	require.ErrorIs(t, err, ErrNoSpace)

	const first = tJOff + tJLen + 1 // home blocks past the log
	require.LessOrEqual(t, first+large, tDevBlks)
	h, err = j.StartLarge(large)
	require.NoError(t, err)
	dirty(h, first, uint64(large))
	require.NoError(t, h.Stop())
	require.NoError(t, j.Sync(ctx))

	seqs := map[uint32]int{} // transaction -> blocks of the large handle
	committed := map[uint32]bool{}
	require.NoError(t, j.Scan(func(lb LogBlock) error {
		if lb.Type == 0 && lb.Home >= first && lb.Home < first+uint64(large) {
			seqs[lb.Sequence]++
		}
		if lb.Type == BlockTypeCommit {
			committed[lb.Sequence] = true
		}
		return nil
	}))
	require.Len(t, seqs, 1, "the large handle's blocks are in transactions %v", seqs)
	for s, n := range seqs {
		assert.Equal(t, large, n)
		assert.True(t, committed[s])
	}
}
