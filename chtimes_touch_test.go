package ext4io_test

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// TestChtimesAfterWrite: a time set with Chtimes right after a buffered
// or direct write is the file's time, not the write's pending stamp
// (touchclock.go), through the Volume and through the File, in memory and
// after reopening.
func TestChtimesAfterWrite(t *testing.T) {
	dev := memdev.New(32 << 20)
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{}))
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	require.NoError(t, err)
	want := time.Date(2019, 6, 20, 7, 44, 42, 15474005, time.UTC)
	for _, tc := range []struct {
		name string
		flag int
		file bool
	}{{"buffered", 0, false}, {"buffered-file", 0, true}, {"direct", ext4io.O_DIRECT, false}} {
		f, err := v.OpenFile(tc.name, os.O_RDWR|os.O_CREATE|tc.flag, 0o644)
		require.NoError(t, err)
		_, err = f.WriteAt(make([]byte, 4096), 0)
		require.NoError(t, err)
		_, err = f.WriteAt(make([]byte, 4096), 0) // an overwrite: the shared-lock path when direct
		require.NoError(t, err)
		if tc.file {
			require.NoError(t, f.Chtimes(want, want))
		} else {
			require.NoError(t, v.Chtimes(tc.name, want, want))
		}
		time.Sleep(30 * time.Millisecond) // past the touch clock's tick
		fi, err := f.Stat()
		require.NoError(t, err)
		require.True(t, want.Equal(fi.ModTime()), "%s: mtime %v, want %v", tc.name, fi.ModTime(), want)
		require.NoError(t, f.Close())
	}
	require.NoError(t, v.Close())
	v, err = ext4io.Open(dev, ext4io.Options{})
	require.NoError(t, err)
	defer v.Close()
	for _, name := range []string{"buffered", "buffered-file", "direct"} {
		fi, err := v.Stat(name)
		require.NoError(t, err)
		require.True(t, want.Equal(fi.ModTime()), "%s after reopening: mtime %v, want %v", name, fi.ModTime(), want)
	}
}

// TestCtimeAfterWriteThenRename: a change after a write (here a rename,
// which sets the ctime) keeps its later ctime when the write's pending time
// is applied afterwards, in memory and after reopening.
func TestCtimeAfterWriteThenRename(t *testing.T) {
	dev := memdev.New(32 << 20)
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{}))
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	require.NoError(t, err)
	names := map[string]int{"buffered": 0, "direct": ext4io.O_DIRECT}
	renamed := map[string]time.Time{}
	for name, flag := range names {
		f, err := v.OpenFile(name, os.O_RDWR|os.O_CREATE|flag, 0o644)
		require.NoError(t, err)
		_, err = f.WriteAt(make([]byte, 4096), 0)
		require.NoError(t, err)
		_, err = f.WriteAt(make([]byte, 4096), 0) // an overwrite: the shared-lock path when direct
		require.NoError(t, err)
		time.Sleep(30 * time.Millisecond) // past the touch clock's tick: the write's epoch ends
		before := time.Now()
		require.NoError(t, v.Rename(name, name+"-renamed"))
		renamed[name] = before.Truncate(time.Microsecond)
		fi, err := f.Stat()
		require.NoError(t, err)
		ctime := fi.Sys().(*ext4io.FileInfo).Ctime
		assert.False(t, ctime.Before(renamed[name]), "%s: ctime %v before the rename at %v", name, ctime, before)
		require.NoError(t, f.Close())
	}
	require.NoError(t, v.Close())
	v, err = ext4io.Open(dev, ext4io.Options{})
	require.NoError(t, err)
	defer v.Close()
	for name := range names {
		fi, err := v.Stat(name + "-renamed")
		require.NoError(t, err)
		ctime := fi.Sys().(*ext4io.FileInfo).Ctime
		assert.False(t, ctime.Before(renamed[name]), "%s after reopening: ctime %v before the rename at %v", name, ctime, renamed[name])
	}
}
