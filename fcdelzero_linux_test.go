package ext4io_test

// A fast commit whose first range tag for an inode is a DEL_RANGE at
// logical block 0 removing the whole of a one-extent tree, followed by
// more range tags of that inode: e2fsck 1.47.0's replay keeps the emptied
// extent in its one-entry list (ex_sort_and_merge returns early below two
// entries), its end wraps (e_lblk + e_len - 1 with e_len 0), and the next
// tag "splits" it into an extent of 2^31-1 blocks. e2fsck then clears the
// file. Linux writes the same tags for a truncate to 0 (three DEL_RANGEs
// from block 0) and e2fsck wrecks its image too; ext4io writes the tag at
// block 0 after the inode's other range tags.

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
)

func TestFastCommitDelRangeAtZero(t *testing.T) {
	ino := func(t *testing.T, v *ext4io.Volume, name string) uint32 {
		fi, err := v.Stat(name)
		require.NoError(t, err)
		return fi.Sys().(*ext4io.FileInfo).Ino
	}
	for _, tc := range []struct {
		name string
		// run changes the file "f" (three blocks, one extent, committed
		// in full) and fsyncs; it returns what the fsynced files hold.
		run func(t *testing.T, v *ext4io.Volume) map[string][]byte
	}{
		{"truncate-to-0", func(t *testing.T, v *ext4io.Volume) map[string][]byte {
			f, err := v.OpenFile("f", os.O_RDWR, 0)
			require.NoError(t, err)
			require.NoError(t, f.Truncate(0))
			require.NoError(t, f.Sync())
			require.NoError(t, f.Close())
			return map[string][]byte{"f": {}}
		}},
		{"truncate-to-0-then-write", func(t *testing.T, v *ext4io.Volume) map[string][]byte {
			f, err := v.OpenFile("f", os.O_RDWR, 0)
			require.NoError(t, err)
			require.NoError(t, f.Truncate(0))
			require.NoError(t, f.Sync())
			data := bytes.Repeat([]byte{7}, 4096)
			_, err = f.WriteAt(data, 40960)
			require.NoError(t, err)
			require.NoError(t, f.Sync())
			require.NoError(t, f.Close())
			return map[string][]byte{"f": append(make([]byte, 40960), data...)}
		}},
		{"create-over-freed-inode", func(t *testing.T, v *ext4io.Volume) map[string][]byte {
			old := ino(t, v, "f")
			require.NoError(t, v.Unlink("f"))
			f, err := v.Create("g")
			require.NoError(t, err)
			require.Equal(t, old, ino(t, v, "g"), "g reuses f's inode")
			data := bytes.Repeat([]byte{9}, 4096)
			_, err = f.WriteAt(data, 409600)
			require.NoError(t, err)
			require.NoError(t, f.Sync())
			require.NoError(t, f.Close())
			return map[string][]byte{"g": append(make([]byte, 409600), data...)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := memdev.New(64 << 20)
			require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{FastCommit: true, NoDiscard: true}))
			crash, err := errordev.NewCrashable(base)
			require.NoError(t, err)
			v, err := ext4io.Open(crash, ext4io.Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
			require.NoError(t, err)
			f, err := v.Create("f")
			require.NoError(t, err)
			_, err = f.WriteAt(bytes.Repeat([]byte{1}, 3*4096), 0)
			require.NoError(t, err)
			require.NoError(t, f.Close())
			require.NoError(t, v.Sync()) // the one-extent tree in full
			want := tc.run(t, v)
			require.NotZero(t, v.Counters().FastCommits)
			img, err := crash.Crash(errordev.CrashOptions{})
			require.NoError(t, err)
			require.NoError(t, v.Close())
			fcCheckCrashImage(t, t.TempDir(), ext4iotest.ImageOf(t, img), want)
		})
	}
}
