package ext4io_test

import (
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
)

// opLogDev logs the writes (W), flushes (F) and, when it is a
// blockdev.SyncWriter (syncOpLogDev), durable writes (S) reaching a
// device.
type opLogDev struct {
	blockdev.Device
	mu  sync.Mutex
	ops strings.Builder
}

func (d *opLogDev) log(op string) {
	d.mu.Lock()
	d.ops.WriteString(op)
	d.mu.Unlock()
}

func (d *opLogDev) take() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.ops.String()
	d.ops.Reset()
	return s
}

func (d *opLogDev) WriteAt(p []byte, off int64) (int, error) {
	d.log("W")
	return d.Device.WriteAt(p, off)
}

func (d *opLogDev) Flush() error {
	d.log("F")
	return d.Device.Flush()
}

// syncOpLogDev is an opLogDev with WriteAtSync; with refuse it fails
// with EOPNOTSUPP, writing nothing, as a kernel without RWF_DSYNC.
type syncOpLogDev struct {
	*opLogDev
	refuse bool
}

func (d *syncOpLogDev) WriteAtSync(p []byte, off int64) (int, error) {
	if d.refuse {
		return 0, fmt.Errorf("test: pwritev2: %w", syscall.EOPNOTSUPP)
	}
	d.log("S")
	if _, err := d.Device.WriteAt(p, off); err != nil {
		return 0, err
	}
	return len(p), d.Device.Flush()
}

// TestFsyncWriteAtSync: on a blockdev.SyncWriter an fsynced new file's
// fast commit is its data write, the preflush and the tags as one durable
// write (WFS, not WFWF), and a full commit's commit block is a durable
// write after the preflush (…FS), as is Close's clean superblock after
// its flush; on a device without WriteAtSync, or one
// refusing it, they are writes and flushes as before. e2fsck accepts the
// results.
func TestFsyncWriteAtSync(t *testing.T) {
	for _, tc := range []struct {
		name           string
		syncer, refuse bool
		fast, fullTail string
	}{
		{"sync-writer", true, false, "WFS", "FS"},
		{"plain", false, false, "WFWF", "FWF"},
		{"refused", true, true, "WFWF", "FWF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, fc := range []bool{true, false} {
				base := memdev.New(64 << 20)
				require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{FastCommit: fc, NoDiscard: true}))
				logDev := &opLogDev{Device: base}
				var dev blockdev.Device = logDev
				if tc.syncer {
					dev = &syncOpLogDev{opLogDev: logDev, refuse: tc.refuse}
				}
				v, err := ext4io.Open(dev, ext4io.Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
				require.NoError(t, err)
				require.NoError(t, v.Mkdir("d", 0o755))
				data := make([]byte, 4096)
				for i := range 4 {
					f, err := v.Create(fmt.Sprintf("d/f%d", i))
					require.NoError(t, err)
					_, err = f.WriteAt(data, 0)
					require.NoError(t, err)
					logDev.take()
					require.NoError(t, f.Sync())
					ops := logDev.take()
					require.NoError(t, f.Close())
					if i < 2 {
						continue // the first Syncs commit the mkdir in full and checkpoint
					}
					if fc {
						assert.Equal(t, tc.fast, ops, "fast commit of file %d", i)
					} else {
						assert.True(t, strings.HasSuffix(ops, tc.fullTail) && !strings.HasSuffix(ops, "F"+tc.fullTail),
							"full commit of file %d: %s, want it to end with one flush and %s", i, ops, tc.fullTail)
					}
				}
				logDev.take()
				require.NoError(t, v.Close())
				// The last commit, flushes, and the clean superblock.
				ops := logDev.take()
				assert.True(t, strings.HasSuffix(ops, tc.fullTail), "Close: %s, want it to end with %s", ops, tc.fullTail)
				ext4iotest.FsckDev(t, base)
			}
		})
	}
}
