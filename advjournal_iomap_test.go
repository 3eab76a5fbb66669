package ext4io_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/iomap"
)

// TestAdvJournalIomapOpsOverwrite: a journalled page overwritten through
// the iomap ops the File hands out (under LockIO, as documented), then
// made durable by Sync or Datasync, survives a crash: recovery must not
// write the logged copy back over it. Those writes do not pass through
// File.WriteAt, so the sync must not trust that nothing wrote the file
// since the journalled write.
func TestAdvJournalIomapOpsOverwrite(t *testing.T) {
	t.Parallel()
	for _, kind := range []ext4io.IomapKind{ext4io.IomapOverwrite, ext4io.IomapNormal} {
		for _, datasync := range []bool{false, true} {
			dev, v, f := journalVolume(t, false)
			ops := f.IomapOps(kind)
			journalWrite(t, v, f, 1, 64<<10)
			q := bytes.Repeat([]byte{2}, 16<<10)
			l, err := f.LockIO(kind, 64<<10, int64(len(q)))
			require.NoError(t, err)
			n, err := iomap.DirectWrite(dev, ops, q, 64<<10, &iomap.DioOptions{BlockSize: 4096})
			require.NoError(t, l.Unlock(64<<10, n, err))
			if datasync {
				require.NoError(t, f.Datasync())
			} else {
				require.NoError(t, f.Sync())
			}
			require.Equal(t, q, crashRead(t, dev, "db", 64<<10, len(q)), "%v ops, datasync %v: the logged copy was replayed", kind, datasync)
			require.NoError(t, f.Close())
			require.NoError(t, v.Close())
		}
	}
}
