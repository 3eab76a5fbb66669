package ext4io

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestAdvJournalLiveBounded: journalled writes into many files, none of
// them synced again, keep live records (the logged blocks' contents) only
// for transactions still in the log: memory bounded by the journal, not
// growing with the number of files written. Without dropping the records
// whose transactions a checkpoint moved out of the log, every file's last
// journalled page stays in memory until a sync of that very file.
func TestAdvJournalLiveBounded(t *testing.T) {
	t.Parallel()
	dev := memdev.New(64 << 20)
	require.NoError(t, Format(dev, FormatOptions{JournalBlocks: 1024, NoDiscard: true}))
	v, err := Open(dev, Options{Writable: true, CommitInterval: -1})
	require.NoError(t, err)
	const files, page = 600, 16 << 10
	for i := range files {
		name := fmt.Sprintf("f%d", i)
		require.NoError(t, v.WriteFile(name, bytes.Repeat([]byte{1}, page), 0o644))
	}
	require.NoError(t, v.Sync())
	c0 := v.Counters().AtomicJournalled
	for i := range files {
		f, err := v.OpenFile(fmt.Sprintf("f%d", i), os.O_RDWR, 0)
		require.NoError(t, err)
		_, err = f.WriteAtomic(bytes.Repeat([]byte{2}, page), 0)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	require.Equal(t, c0+files, v.Counters().AtomicJournalled, "the test needs every write journalled")
	logged := uint64(files * page / v.bs)
	require.Greater(t, logged, uint64(2*1024), "the test needs writes past twice the log's size")
	live := uint64(v.jm.nlive.Load())
	require.LessOrEqual(t, live, uint64(1024), "live records hold %d blocks of %d written, more than the log's 1024", live, logged)
	require.NoError(t, v.Close())
}
