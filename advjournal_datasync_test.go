package ext4io_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAdvJournalDatasyncOtherPage: a buffered write of one page, then a
// journalled atomic write of another page of the same file, then
// Datasync: the buffered page is durable. The journalled write's commit
// covers only what was on the device when it flushed; the buffered page
// was still dirty in the page cache then, and Datasync writes it back,
// so it must flush (or commit) after that write-back rather than take the
// shortcut of a file whose data has not changed since the journalled
// write.
func TestAdvJournalDatasyncOtherPage(t *testing.T) {
	t.Parallel()
	for _, fc := range []bool{false, true} {
		dev, v, f := journalVolume(t, fc)
		b, err := v.OpenFile("db", os.O_RDWR, 0)
		require.NoError(t, err)
		q := bytes.Repeat([]byte{3}, 4096)
		_, err = b.WriteAt(q, 128<<10) // over written blocks: no metadata
		require.NoError(t, err)
		journalWrite(t, v, f, 1, 0)
		require.NoError(t, b.Datasync())
		require.Equal(t, q, crashRead(t, dev, "db", 128<<10, len(q)), "fast commits %v: the buffered page was lost", fc)
		require.NoError(t, b.Close())
		require.NoError(t, f.Close())
		require.NoError(t, v.Close())
	}
}
