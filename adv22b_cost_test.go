package ext4io_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/ext4iotest"
)

// adv22bReads counts the reads reaching a device.
type adv22bReads struct {
	blockdev.Device
	reads atomic.Int64
}

func (d *adv22bReads) ReadAt(p []byte, off int64) (int, error) {
	d.reads.Add(1)
	return d.Device.ReadAt(p, off)
}

// TestAdv22bDotDotReadOnce: the ".." a directory's load reads costs one
// device read per directory per volume lifetime: ReadDir of a directory
// of many subdirectories reads none of their blocks, Stat of each loads
// it once, and a second ReadDir+Stat pass, a walk into each and an Open
// read nothing more than the first pass did (with the metadata cache of a
// writable volume; a read-only one reads its directories' blocks again on
// every lookup, and the log shows it).
func TestAdv22bDotDotReadOnce(t *testing.T) {
	const subdirs = 400
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	for i := range subdirs {
		require.NoError(t, os.MkdirAll(filepath.Join(src, "big", fmt.Sprintf("d%04d", i)), 0o755))
	}
	img := filepath.Join(dir, "img")
	ext4iotest.Mkfs(t, img, "32M", "-d", src)
	for _, writable := range []bool{false, true} {
		t.Run(fmt.Sprint("writable=", writable), func(t *testing.T) {
			fdev, err := blockdev.OpenFile(img, !writable)
			require.NoError(t, err)
			t.Cleanup(func() { fdev.Close() })
			dev := &adv22bReads{Device: fdev}
			v, err := ext4io.Open(dev, ext4io.Options{Writable: writable})
			require.NoError(t, err)
			pass := func() int64 {
				r0 := dev.reads.Load()
				ents, err := v.ReadDir("big")
				require.NoError(t, err)
				require.Len(t, ents, subdirs)
				for _, e := range ents {
					_, err := v.Stat("big/" + e.Name())
					require.NoError(t, err)
				}
				return dev.reads.Load() - r0
			}
			first := pass()
			second := pass()
			r0 := dev.reads.Load()
			for i := range subdirs {
				f, err := v.Open(fmt.Sprintf("big/d%04d", i))
				require.NoError(t, err)
				require.NoError(t, f.Close())
			}
			opens := dev.reads.Load() - r0
			t.Logf("device reads: first ReadDir+Stat pass %d (%.2f per subdirectory), second %d, Open of each %d", first, float64(first)/subdirs, second, opens)
			if !writable {
				return // no metadata cache: every lookup reads its directory's blocks again
			}
			assert.LessOrEqual(t, first, int64(subdirs)+subdirs/2, "one read per subdirectory (its \"..\"), plus inode table blocks")
			assert.Zero(t, second, "the second pass reads no subdirectory's block again")
			assert.Zero(t, opens, "Open reads no subdirectory's block again")
			require.NoError(t, v.Close())
		})
	}
}
