package ext4io_test

import (
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/stretchr/testify/require"
)

// TestChtimesOutOfRange: a time outside what an inode holds (1901-12-13
// to 2446-05-10 with 256-byte inodes, to 2038-01-19 with 128-byte ones)
// is clamped to the nearest one it holds, as Linux's timestamp_truncate
// does, both in Stat and on the device. It was encoded with its epoch
// bits wrapped: Stat said 3000-01-01 until the volume was opened again,
// which then said another date (year 3000 became 1902 and so on).
func TestChtimesOutOfRange(t *testing.T) {
	var (
		min      = time.Date(1901, 12, 13, 20, 45, 52, 0, time.UTC)
		max      = time.Date(2446, 5, 10, 22, 38, 55, 0, time.UTC)
		max128   = time.Date(2038, 1, 19, 3, 14, 7, 0, time.UTC)
		inRange  = time.Date(2300, 6, 1, 12, 0, 0, 123456789, time.UTC)
		inRange2 = time.Date(1930, 6, 1, 12, 0, 0, 5, time.UTC)
	)
	for _, inodeSize := range []int{256, 128} {
		top := max
		if inodeSize == 128 {
			top, inRange = max128, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			inRange2 = time.Date(1930, 6, 1, 12, 0, 0, 0, time.UTC) // no nanoseconds without the extra field
		}
		cases := map[string]struct{ set, want time.Time }{
			"3000":       {time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), top},
			"max+1s":     {top.Add(time.Second), top},
			"year 36812": {time.Unix(1<<40, 0), top},
			"1800":       {time.Date(1800, 1, 1, 0, 0, 0, 0, time.UTC), min},
			"min-1s":     {min.Add(-time.Second), min},
			"in range":   {inRange, inRange},
			"in range 2": {inRange2, inRange2},
		}
		img := formatImage(t, 32<<20, ext4io.FormatOptions{InodeSize: inodeSize})
		v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
		require.NoError(t, err)
		for name, c := range cases {
			require.NoError(t, v.WriteFile(name, nil, 0o644))
			require.NoError(t, v.Chtimes(name, c.set, c.set))
			fi, err := v.Stat(name)
			require.NoError(t, err)
			require.True(t, c.want.Equal(fi.ModTime()), "inode size %d, %s: Stat says mtime %v, want %v", inodeSize, name, fi.ModTime().UTC(), c.want)
		}
		require.NoError(t, v.Close())
		e2fs.Fsck(t, img)
		ro, err := ext4io.OpenImage(img, ext4io.Options{})
		require.NoError(t, err)
		for name, c := range cases {
			fi, err := ro.Stat(name)
			require.NoError(t, err)
			require.True(t, c.want.Equal(fi.ModTime()), "inode size %d, %s: reopened, mtime %v, want %v", inodeSize, name, fi.ModTime().UTC(), c.want)
			require.True(t, c.want.Equal(fi.Atime), "inode size %d, %s: reopened, atime %v, want %v", inodeSize, name, fi.Atime.UTC(), c.want)
		}
		require.NoError(t, ro.Close())
	}
}
