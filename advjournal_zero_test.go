package ext4io_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
)

// TestAdvJournalZeroedInPlace: a journalled block whose bytes an
// operation zeroes in place (the tail cut by a truncate to 100 bytes and
// grown again, a punch inside the block, write-zeroes over it) reads
// zeroes there after a crash that follows the commit of that operation's
// inode (made by another file's Sync), as in Linux, whose ordered mode
// writes the zeroed block before the transaction with the operation
// commits; and with fast commits after the file's own fast commit. The
// zeroes go to the device without the journal: unless the operation
// revokes the block's logged copy in its own transaction, replay writes
// the old bytes back.
func TestAdvJournalZeroedInPlace(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"truncate", "punch", "write-zeroes", "truncate-fc"} {
		t.Run(op, func(t *testing.T) { advJournalZeroed(t, op) })
	}
}

// advJournalZeroed is one operation of TestAdvJournalZeroedInPlace.
func advJournalZeroed(t *testing.T, op string) {
	const at = 64 << 10
	fc := op == "truncate-fc"
	dev, v, f := journalVolume(t, fc)
	// One block: the operations free none of the record's blocks (a
	// free revokes the whole record).
	p := bytes.Repeat([]byte{1}, 4096)
	c0 := v.Counters().AtomicJournalled
	_, err := f.WriteAtomic(p, at)
	require.NoError(t, err)
	require.Equal(t, c0+1, v.Counters().AtomicJournalled, "the write was not journalled")
	want := bytes.Repeat([]byte{0xEE}, 8192)
	switch op {
	case "truncate", "truncate-fc":
		require.NoError(t, f.Truncate(at+100))
		require.NoError(t, f.Truncate(at+8192))
		clear(want)
		copy(want, p[:100])
	case "punch":
		require.NoError(t, f.Fallocate(ext4io.FallocPunchHole, at+100, 3000))
		copy(want, p)
		clear(want[100:3100])
	case "write-zeroes":
		require.NoError(t, f.Fallocate(ext4io.FallocWriteZeroes, at, 4096))
		clear(want[:4096])
	}
	g, err := v.Create("other")
	require.NoError(t, err)
	_, err = g.WriteAt([]byte("other"), 0)
	require.NoError(t, err)
	if fc {
		// The file's own Sync takes a fast commit of the sizes, without
		// the revoke; it checkpoints the log first (the first fast
		// commit after a full one), so the logged copy is gone.
		fc0 := v.Counters().FastCommits
		require.NoError(t, f.Sync())
		require.Equal(t, fc0+1, v.Counters().FastCommits, "the test needs a fast commit")
	} else {
		require.NoError(t, g.Sync()) // a full commit: f's inode goes with it
	}
	got := make([]byte, 8192)
	_, err = f.ReadAt(got, at)
	require.NoError(t, err)
	require.Equal(t, want, got, "%s: before the crash", op)
	require.Equal(t, want, crashRead(t, dev, "db", at, len(want)), "%s: the logged bytes came back", op)
	require.NoError(t, g.Close())
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
}
