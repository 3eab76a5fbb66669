package ext4io_test

import (
	"errors"
	"os"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// noWriteDev fails its test on any write, zeroing or discard.
type noWriteDev struct {
	blockdev.Device
	t      *testing.T
	writes atomic.Int64
}

func (d *noWriteDev) bad(what string, off int64) {
	d.writes.Add(1)
	d.t.Errorf("read-only volume: device %s at %d", what, off)
}

func (d *noWriteDev) WriteAt(p []byte, off int64) (int, error) {
	d.bad("write", off)
	return 0, errors.New("no write expected")
}

func (d *noWriteDev) ZeroOut(off, n int64) error {
	d.bad("zero-out", off)
	return errors.New("no write expected")
}

func (d *noWriteDev) Discard(off, n int64) error {
	d.bad("discard", off)
	return errors.New("no write expected")
}

// TestReadOnlyVolumeWritesNothing: on a volume opened read-only, clean or
// with a journal to replay (a crash image with committed, unchecked-
// pointed transactions and fast commits), every Volume and File method
// that could change something fails with an error (ErrReadOnly where the
// target exists), and nothing reaches the device.
func TestReadOnlyVolumeWritesNothing(t *testing.T) {
	for _, dirty := range []bool{false, true} {
		base := memdev.New(32 << 20)
		require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{NoDiscard: true, FastCommit: true}))
		cdev, err := errordev.NewCrashable(base)
		require.NoError(t, err)
		v, err := ext4io.Open(cdev, ext4io.Options{Writable: true, CommitInterval: -1})
		require.NoError(t, err)
		require.NoError(t, v.WriteFile("f", make([]byte, 8192), 0o644))
		require.NoError(t, v.Mkdir("d", 0o755))
		require.NoError(t, v.Setxattr("f", "user.a", []byte("v"), 0))
		require.NoError(t, v.Sync())
		f, err := v.OpenFile("f", os.O_RDWR|ext4io.O_DIRECT, 0)
		require.NoError(t, err)
		_, err = f.WriteAtomic(make([]byte, 4096), 0) // journalled
		require.NoError(t, err)
		require.NoError(t, f.Sync())
		_, err = f.WriteAt(make([]byte, 4096), 8192) // appended: a fast commit
		require.NoError(t, err)
		require.NoError(t, f.Sync())
		var img blockdev.Device
		if dirty {
			img, err = cdev.Crash(errordev.CrashOptions{})
			require.NoError(t, err)
		} else {
			require.NoError(t, f.Close())
			require.NoError(t, v.Close())
			img = base
		}
		nw := &noWriteDev{Device: img, t: t}
		ro, err := ext4io.Open(nw, ext4io.Options{})
		require.NoError(t, err)
		if dirty {
			require.NotNil(t, ro.Recovery(), "the crash image's journal needs recovery")
		}
		got, err := ro.ReadFile("f")
		require.NoError(t, err)
		require.Len(t, got, 12288)
		_, err = ro.OpenFile("f", os.O_RDWR, 0)
		require.ErrorIs(t, err, ext4io.ErrReadOnly, "OpenFile O_RDWR")
		for _, tc := range volumeCalls {
			switch tc.name {
			case "Close", "Open", "OpenIno", "Stat", "Lstat", "ReadDir", "FS.Open", "FS.Stat", "FS.ReadDir",
				"FileSystem.Open", "ReadFile", "DirEntries", "Getxattr", "Lgetxattr", "Listxattr", "Llistxattr",
				"Statfs", "Journal", "Group", "Readlink", "Sync", "SyncContext":
				continue
			}
			err := tc.call(ro)
			require.Error(t, err, "Volume.%s on a read-only volume", tc.name)
			if tc.name != "Rmdir" && tc.name != "Mkdir" && tc.name != "MkdirAll" {
				require.ErrorIs(t, err, ext4io.ErrReadOnly, "Volume.%s", tc.name)
			}
		}
		for _, name := range []string{"f", "d"} {
			rf, err := ro.Open(name)
			require.NoError(t, err)
			for _, tc := range fileCalls {
				switch tc.name {
				case "Close", "ReadAt", "Read", "Seek", "SeekData", "SeekHole", "Stat", "Extents", "Fiemap",
					"ReportOps", "ReadDir", "WriteTo", "Getxattr", "Listxattr", "Sync", "Datasync":
					continue
				}
				if err := tc.call(rf); err == nil {
					t.Errorf("File.%s of %s on a read-only volume succeeded", tc.name, name)
				}
			}
			require.NoError(t, rf.Sync())
			require.NoError(t, rf.Close())
		}
		require.NoError(t, ro.Sync())
		require.NoError(t, ro.Close())
		require.Zero(t, nw.writes.Load(), "device writes of a read-only volume (dirty %v)", dirty)
	}
}
