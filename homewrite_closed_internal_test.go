package ext4io

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestAtomicJournalAfterCloseStarted: a journalled atomic write whose
// stage runs once Volume.Close has set closed (it passed the File's checks
// before) fails with ErrClosed and neither commits nor registers a write
// in place, which Close, having waited for them already, would not see.
// The test sets v.closed itself, as Close does first, to hit that window
// deterministically.
func TestAtomicJournalAfterCloseStarted(t *testing.T) {
	t.Parallel()
	dev := memdev.New(64 << 20)
	require.NoError(t, Format(dev, FormatOptions{NoDiscard: true}))
	v, err := Open(dev, Options{Writable: true, CommitInterval: -1})
	require.NoError(t, err)
	const page = 16 << 10
	require.NoError(t, v.WriteFile("f", bytes.Repeat([]byte{1}, page), 0o644))
	require.NoError(t, v.Sync())
	f, err := v.OpenFile("f", os.O_RDWR, 0)
	require.NoError(t, err)
	// The path is journalled while the volume is open.
	_, err = f.WriteAtomic(bytes.Repeat([]byte{2}, page), 0)
	require.NoError(t, err)
	require.NoError(t, f.Datasync())
	c0 := v.Counters().AtomicJournalled
	require.Equal(t, uint64(1), c0, "the test needs the journalled path")
	commits := v.Counters().JournalCommits
	v.home.h.waitAll() // the first write's, in the background

	v.closed.Store(true)
	rs := []atomicRange{{p: bytes.Repeat([]byte{3}, page), nblk: page / uint64(v.bs)}}
	ok, err := f.atomicJournal(rs, page)
	require.True(t, ok)
	require.ErrorIs(t, err, ErrClosed)
	require.Equal(t, c0, v.Counters().AtomicJournalled)
	require.Equal(t, commits, v.Counters().JournalCommits, "a commit after Close started")
	require.Zero(t, v.home.h.n.Load(), "a write in place registered after Close started")
	v.closed.Store(false)
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
}
