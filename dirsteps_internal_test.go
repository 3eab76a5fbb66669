package ext4io

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bigDirName is the i-th of the 255-byte names bigEmptyDir links: three
// fill a 1 KiB directory block.
func bigDirName(i int) string {
	s := fmt.Sprintf("%06d", i)
	return s + strings.Repeat("x", 255-len(s))
}

// bigEmptyDir formats dev with 1 KiB blocks and the smallest journal
// (1024 blocks), grows directory "d" (and the other dirs named) to more
// blocks than one transaction can revoke (names linked to one file, then
// removed), and syncs: each is empty and keeps its blocks, as ext4 never
// shrinks a directory. It returns the volume and the number of blocks d
// maps.
func bigEmptyDir(t *testing.T, dev blockdev.Device, more ...string) (*Volume, int) {
	t.Helper()
	require.NoError(t, Format(dev, FormatOptions{BlockSize: 1024, JournalBlocks: 1024}))
	v, err := Open(dev, Options{Writable: true, PageCacheBytes: -1})
	require.NoError(t, err)
	f, err := v.Create("t")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	limit := v.jm.j.MaxLargeCredits()
	var blocks int
	for _, dir := range append([]string{"d"}, more...) {
		require.NoError(t, v.Mkdir(dir, 0o755))
		const n = 3 * 1200
		for i := 0; i < n; i++ {
			require.NoError(t, v.Link("t", dir+"/"+bigDirName(i)))
		}
		for i := 0; i < n; i++ {
			require.NoError(t, v.Remove(dir+"/"+bigDirName(i)))
		}
		d, err := v.Open(dir)
		require.NoError(t, err)
		exts, err := d.Extents()
		require.NoError(t, err)
		b := 0
		for _, e := range exts {
			b += int(e.Length)
		}
		require.NoError(t, d.Close())
		require.Greater(t, b, limit, "the directory's blocks do not fit one transaction")
		if dir == "d" {
			blocks = b
		}
	}
	require.NoError(t, v.Sync())
	return v, blocks
}

// TestRmdirLargerThanLog removes an empty directory whose blocks are more
// than one transaction can revoke, by Rmdir and by renaming an empty
// directory over it: freeing it in one operation did not fit the log
// (ErrNoSpace) and stopped the volume, so every later write failed with
// ErrReadOnly, Close failed and the directory was back after a reopen.
// It is freed in steps (orphanSteps); later writes work, the blocks are
// free, and e2fsck accepts the image.
func TestRmdirLargerThanLog(t *testing.T) {
	t.Parallel()
	for _, rename := range []bool{false, true} {
		t.Run(map[bool]string{false: "rmdir", true: "rename"}[rename], func(t *testing.T) {
			mem := memdev.NewBlockSize(64<<20, 1024)
			v, blocks := bigEmptyDir(t, mem)
			require.NoError(t, v.Mkdir("e", 0o755))
			st, err := v.Statfs()
			require.NoError(t, err)
			steps := 0
			v.stepHook = func(bool) { steps++ }
			if rename {
				require.NoError(t, v.Rename("e", "d"))
			} else {
				require.NoError(t, v.Rmdir("d"))
			}
			t.Logf("%d directory blocks freed in %d steps", blocks, steps)
			// Each step revokes at most about a step's weight of blocks.
			assert.GreaterOrEqual(t, steps, blocks/(2*v.treeStepWeight()), "the directory was freed in steps")
			require.NoError(t, v.Sync()) // the freed blocks become allocatable
			st2, err := v.Statfs()
			require.NoError(t, err)
			assert.InDelta(t, st.BlocksFree+uint64(blocks), st2.BlocksFree, 16, "the directory's blocks are free")
			f, err := v.Create("after")
			require.NoError(t, err)
			_, err = f.WriteAt([]byte("still writable"), 0)
			require.NoError(t, err)
			require.NoError(t, f.Close())
			require.NoError(t, v.Close())
			ext4iotest.FsckDev(t, mem)
			v, err = Open(mem, Options{})
			require.NoError(t, err)
			_, err = v.Open("e")
			assert.Equal(t, rename, errors.Is(err, fs.ErrNotExist), "e was renamed")
			d, err := v.Open("d")
			if rename {
				require.NoError(t, err)
				require.NoError(t, d.Close())
			} else {
				require.ErrorIs(t, err, fs.ErrNotExist)
			}
			require.NoError(t, v.Close())
		})
	}
}

// TestRmdirStepsCrash crashes around every flush of a stepped rmdir of
// such a directory followed by a file written over the blocks it freed
// and synced: every image opens writable (finishing the orphan), e2fsck
// accepts it, the directory is there and empty or gone, and the file's
// data reads back whole. A step that freed directory blocks without
// revoking them let the journal's replay write their old copies over the
// file's data.
func TestRmdirStepsCrash(t *testing.T) {
	t.Parallel()
	start := memdev.NewBlockSize(64<<20, 1024)
	v, blocks := bigEmptyDir(t, start)
	require.NoError(t, v.Close())
	pat := bytes.Repeat([]byte{0xA5}, blocks*1024)
	ext4iotest.CrashSweep(t, start, func(dev blockdev.Device) error {
		v, err := Open(dev, Options{Writable: true, PageCacheBytes: -1})
		if err != nil {
			return err
		}
		if err := v.Rmdir("d"); err != nil {
			return err
		}
		if err := v.Sync(); err != nil { // the freed blocks become allocatable
			return err
		}
		f, err := v.Create("new")
		if err != nil {
			return err
		}
		if _, err := f.WriteAt(pat, 0); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		return v.Close()
	}, func(t *testing.T, crashed *memdev.Device, _ errordev.CrashReport) {
		v, err := Open(crashed, Options{Writable: true, PageCacheBytes: -1})
		require.NoError(t, err)
		if d, err := v.Open("d"); err == nil {
			names, err := d.ReadDir(-1)
			require.NoError(t, err)
			assert.Empty(t, names)
			require.NoError(t, d.Close())
		} else {
			require.ErrorIs(t, err, fs.ErrNotExist)
		}
		if f, err := v.Open("new"); err == nil {
			got := make([]byte, f.Size())
			_, err := f.ReadAt(got, 0)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(pat[:len(got)], got), "the file's %d bytes read back", len(got))
			require.NoError(t, f.Close())
		} else {
			require.ErrorIs(t, err, fs.ErrNotExist)
		}
		require.NoError(t, v.Close())
		ext4iotest.FsckDev(t, crashed)
	}, ext4iotest.SweepOptions{MaxPoints: 24})
}

// TestRmdirStepsRevoke frees such a directory in steps while the journal
// still logs its blocks (the names were just removed), fills the volume
// with a file, so that the file takes the freed blocks, and crashes:
// replaying the journal must not write the directory's logged blocks over
// the file's data, so each step revokes the blocks it frees.
func TestRmdirStepsRevoke(t *testing.T) {
	t.Parallel()
	mem := memdev.NewBlockSize(64<<20, 1024)
	c, err := errordev.NewCrashable(mem)
	require.NoError(t, err)
	v, _ := bigEmptyDir(t, c)
	require.NoError(t, v.Rmdir("d"))
	require.NoError(t, v.Sync())
	f, err := v.Create("fill")
	require.NoError(t, err)
	chunk := bytes.Repeat([]byte{0xA5}, 1<<20)
	var size int64
	for {
		n, err := f.WriteAt(chunk, size)
		size += int64(n)
		if err != nil {
			require.ErrorIs(t, err, ErrNoSpace)
			break
		}
	}
	require.NoError(t, f.Sync())
	img, err := c.Crash(errordev.CrashOptions{})
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())

	v, err = Open(img, Options{Writable: true, PageCacheBytes: -1})
	require.NoError(t, err)
	f, err = v.Open("fill")
	require.NoError(t, err)
	require.Equal(t, size, f.Size())
	got := make([]byte, len(chunk))
	for off := int64(0); off < size; off += int64(len(chunk)) {
		n, err := f.ReadAt(got, off)
		if err != nil {
			require.ErrorIs(t, err, io.EOF)
		}
		require.True(t, bytes.Equal(chunk[:n], got[:n]), "data at %d", off)
	}
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, img)
}

// TestRmdirStepsConcurrent removes two such directories at once while
// other goroutines read a file, list another directory and create and
// remove files beside them, under -race: both are freed in steps, every
// read sees the file's data, and e2fsck accepts the image. (Listing the
// parent itself races the removal of the entries it lists: ReadDir may
// read an inode whose name is already gone and report it corrupt, also
// for a small directory; not a matter of the steps.)
func TestRmdirStepsConcurrent(t *testing.T) {
	t.Parallel()
	mem := memdev.NewBlockSize(64<<20, 1024)
	v, _ := bigEmptyDir(t, mem, "d2")
	data := bytes.Repeat([]byte("0123456789abcdef"), 4096)
	r, err := v.Create("r")
	require.NoError(t, err)
	_, err = r.WriteAt(data, 0)
	require.NoError(t, err)
	require.NoError(t, v.Mkdir("q", 0o755))
	for i := range 20 {
		require.NoError(t, v.Link("r", fmt.Sprintf("q/%d", i)))
	}
	var (
		wg    sync.WaitGroup
		stop  atomic.Bool
		steps atomic.Int32
	)
	v.stepHook = func(bool) { steps.Add(1) }
	var rw sync.WaitGroup
	for _, dir := range []string{"d", "d2"} {
		rw.Add(1)
		go func() {
			defer rw.Done()
			assert.NoError(t, v.Rmdir(dir))
		}()
	}
	wg.Add(3)
	go func() {
		defer wg.Done()
		got := make([]byte, len(data))
		for !stop.Load() {
			_, err := r.ReadAt(got, 0)
			if !assert.NoError(t, err) || !assert.True(t, bytes.Equal(data, got), "read sees the file's data") {
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for !stop.Load() {
			q, err := v.Open("q")
			if !assert.NoError(t, err) {
				return
			}
			ents, err := q.ReadDir(-1)
			assert.NoError(t, err)
			assert.Len(t, ents, 20)
			assert.NoError(t, q.Close())
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			name := fmt.Sprintf("x%d", i%8)
			f, err := v.Create(name)
			if !assert.NoError(t, err) {
				return
			}
			_, err = f.WriteAt(data[:4096], 0)
			assert.NoError(t, err)
			assert.NoError(t, f.Close())
			if i%2 == 1 {
				assert.NoError(t, v.Remove(name))
			}
		}
	}()
	rw.Wait()
	stop.Store(true)
	wg.Wait()
	for _, dir := range []string{"d", "d2"} {
		_, err := v.Open(dir)
		require.ErrorIs(t, err, fs.ErrNotExist)
	}
	assert.Greater(t, int(steps.Load()), 20, "both were freed in steps")
	require.NoError(t, r.Close())
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, mem)
}
