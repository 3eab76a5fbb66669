package ext4io_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
)

// TestFastCommitOverOldFilesystem: the device held an ext4 filesystem of
// the same geometry before Format (a reused disk), so the new files take
// inode slots that hold the old files' inodes: their i_block has the
// extent magic and extents to blocks the new files now use.
func TestFastCommitOverOldFilesystem(t *testing.T) {
	for _, fo := range []ext4io.FormatOptions{
		{},
		{InodeSize: 128},
		{InodeSize: 512},
		{BlockSize: 1024},
	} {
		t.Run(fmt.Sprintf("bs=%d,is=%d", fo.BlockSize, fo.InodeSize), func(t *testing.T) {
			const size = 64 << 20
			base := memdev.New(size)
			old := fo
			old.NoDiscard = true
			require.NoError(t, ext4io.Format(base, old))
			ov, err := ext4io.Open(base, ext4io.Options{Writable: true})
			require.NoError(t, err)
			// Directories in most groups (the new volume's a and b may
			// land in any of them), their files' inodes next to them.
			rng := rand.New(rand.NewPCG(7, 7))
			for d := range 16 {
				require.NoError(t, ov.Mkdir(fmt.Sprintf("d%d", d), 0o755))
			}
			for i := range 64 {
				f, err := ov.Create(fmt.Sprintf("d%d/old%d", i%16, i))
				require.NoError(t, err)
				b := make([]byte, 1+rng.IntN(200000))
				for j := range b {
					b[j] = byte(rng.UintN(256))
				}
				_, err = f.WriteAt(b, 0)
				require.NoError(t, err)
				require.NoError(t, f.Close())
			}
			require.NoError(t, ov.Close())

			nf := fo
			nf.FastCommit, nf.NoDiscard = true, true
			require.NoError(t, ext4io.Format(base, nf))
			crash, err := errordev.NewCrashable(base)
			require.NoError(t, err)
			v, err := ext4io.Open(crash, ext4io.Options{Writable: true})
			require.NoError(t, err)
			want := fcWorkload(t, v, rand.New(rand.NewPCG(33, 3)))
			c := v.Counters()
			t.Logf("fast commits %d, fallbacks %d, journal commits %d", c.FastCommits, c.FastCommitFallbacks, c.JournalCommits)
			img, err := crash.Crash(errordev.CrashOptions{})
			require.NoError(t, err)
			require.NoError(t, v.Close())
			crashImg := ext4iotest.ImageOf(t, img)
			fcCheckCrashImage(t, t.TempDir(), crashImg, want)
		})
	}
}
