package ext4io_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
)

// blockReadLog records the 4 KiB blocks read from a device while on.
type blockReadLog struct {
	blockdev.Device
	mu   sync.Mutex
	on   bool
	read map[int64]int
}

func (r *blockReadLog) ReadAt(p []byte, off int64) (int, error) {
	r.mu.Lock()
	if r.on {
		for b := off / 4096; b < (off+int64(len(p))+4095)/4096; b++ {
			r.read[b]++
		}
	}
	r.mu.Unlock()
	return r.Device.ReadAt(p, off)
}

// inodeBlocks returns the inode table block of each inode, from debugfs's
// imap (the oracle's own geometry).
func inodeBlocks(t *testing.T, img string, inos []uint32) map[uint32]int64 {
	t.Helper()
	var cmds strings.Builder
	for _, ino := range inos {
		fmt.Fprintf(&cmds, "imap <%d>\n", ino)
	}
	cmdFile := filepath.Join(t.TempDir(), "cmds")
	require.NoError(t, os.WriteFile(cmdFile, []byte(cmds.String()), 0o644))
	out, err := exec.Command(ext4iotest.Tool(t, "debugfs"), "-f", cmdFile, img).CombinedOutput()
	require.NoError(t, err, "%s", out)
	re := regexp.MustCompile(`Inode (\d+) is part of block group \d+\s+located at block (\d+)`)
	got := map[uint32]int64{}
	for _, m := range re.FindAllStringSubmatch(string(out), -1) {
		ino, _ := strconv.ParseUint(m[1], 10, 32)
		blk, _ := strconv.ParseInt(m[2], 10, 64)
		got[uint32(ino)] = blk
	}
	require.Len(t, got, len(inos), "debugfs imap output:\n%s", out)
	return got
}

// createSyncedLogged creates n files prefix0..prefix(n-1) on v, each
// written ("file i\n") and fsynced, with dev logging the blocks read
// meanwhile, and returns their inode numbers.
func createSyncedLogged(t *testing.T, v *ext4io.Volume, dev *blockReadLog, prefix string, n int) []uint32 {
	t.Helper()
	dev.mu.Lock()
	dev.on = true
	dev.mu.Unlock()
	var inos []uint32
	for i := range n {
		f, err := v.Create(fmt.Sprintf("%s%d", prefix, i))
		require.NoError(t, err)
		_, err = f.WriteAt([]byte(fmt.Sprintf("file %d\n", i)), 0)
		require.NoError(t, err)
		require.NoError(t, f.Sync())
		inos = append(inos, f.Ino())
		require.NoError(t, f.Close())
	}
	dev.mu.Lock()
	dev.on = false
	dev.mu.Unlock()
	return inos
}

// TestNewInodeBlockNotRead: creating files whose inode table block holds
// no other inode in use does not read that block from the device (it
// starts from zeroes, as Linux's __ext4_get_inode_loc does for a new
// inode), while a block that holds an inode in use is read and that
// inode survives. e2fsck is clean and every file reads back.
func TestNewInodeBlockNotRead(t *testing.T) {
	img := filepath.Join(t.TempDir(), "img")
	fdev, err := blockdev.CreateFile(img, 256<<20)
	require.NoError(t, err)
	require.NoError(t, ext4io.Format(fdev, ext4io.FormatOptions{NoDiscard: true}))
	dev := &blockReadLog{Device: fdev, read: map[int64]int{}}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	require.NoError(t, err)
	require.NoError(t, v.Mkdir("d", 0o755))
	require.NoError(t, v.Sync())

	// 128 files: 8 inode table blocks of 16 inodes, none read.
	inos := createSyncedLogged(t, v, dev, "d/f", 128)
	require.NoError(t, v.Close())
	require.NoError(t, fdev.Close())
	blocks := inodeBlocks(t, img, inos)
	for _, ino := range inos {
		require.Zero(t, dev.read[blocks[ino]], "inode %d's table block %d read from the device", ino, blocks[ino])
	}

	// Reopened (nothing cached): a new inode beside live ones reads
	// their block, and they survive; after a remove of every inode of a
	// block but one, the new inode beside it does too.
	fdev, err = blockdev.OpenFile(img, false)
	require.NoError(t, err)
	dev = &blockReadLog{Device: fdev, read: map[int64]int{}}
	v, err = ext4io.Open(dev, ext4io.Options{Writable: true})
	require.NoError(t, err)
	for i := 0; i < 15; i++ { // the first 16 files share a block (or two)
		require.NoError(t, v.Remove(fmt.Sprintf("d/f%d", i)))
	}
	require.NoError(t, v.Sync())
	for i := range 20 {
		f, err := v.Create(fmt.Sprintf("d/g%d", i))
		require.NoError(t, err)
		_, err = f.WriteAt([]byte(fmt.Sprintf("new %d\n", i)), 0)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	require.NoError(t, v.Close())
	require.NoError(t, fdev.Close())
	ext4iotest.Fsck(t, img)

	fdev, err = blockdev.OpenFile(img, true)
	require.NoError(t, err)
	defer fdev.Close()
	v, err = ext4io.Open(fdev, ext4io.Options{})
	require.NoError(t, err)
	defer v.Close()
	for i := 15; i < 128; i++ {
		b, err := v.ReadFile(fmt.Sprintf("d/f%d", i))
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("file %d\n", i), string(b))
	}
	for i := range 20 {
		b, err := v.ReadFile(fmt.Sprintf("d/g%d", i))
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("new %d\n", i), string(b))
	}
}

// TestNewInodeBlockConcurrent: writers creating, removing and fsyncing
// files side by side, so that new inodes share table blocks with inodes
// another writer is creating or freeing at the same moment. Every
// surviving file reads back and e2fsck is clean.
func TestNewInodeBlockConcurrent(t *testing.T) {
	dev := memdev.New(256 << 20)
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{NoDiscard: true}))
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	require.NoError(t, err)
	const writers, files = 4, 150
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	for w := range writers {
		require.NoError(t, v.Mkdir(fmt.Sprintf("w%d", w), 0o755))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range files {
				name := fmt.Sprintf("w%d/f%d", w, i)
				f, err := v.Create(name)
				if err == nil {
					_, err = f.WriteAt([]byte(name), 0)
				}
				if err == nil && i%3 == 0 {
					err = f.Sync()
				}
				if f != nil {
					if cerr := f.Close(); err == nil {
						err = cerr
					}
				}
				if err == nil && i%4 == 1 {
					err = v.Remove(fmt.Sprintf("w%d/f%d", w, i-1))
				}
				if err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		require.NoError(t, err)
	}
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, dev)
	v, err = ext4io.Open(dev, ext4io.Options{})
	require.NoError(t, err)
	defer v.Close()
	for w := range writers {
		for i := range files {
			name := fmt.Sprintf("w%d/f%d", w, i)
			b, err := v.ReadFile(name)
			if i%4 == 0 && i+1 < files {
				require.ErrorIs(t, err, os.ErrNotExist, name)
				continue
			}
			require.NoError(t, err, name)
			require.Equal(t, name, string(b))
		}
	}
}

// TestNewInodeBlockFastCommitReadOnce: with fast commits, a created
// inode's fast commit compares the slot with its last logged copy (what
// a replay keeps past the tag), so the block is read from the device;
// that read fills the metadata cache, and the block's other new inodes
// find it there: each inode table block is read once, not once per file.
func TestNewInodeBlockFastCommitReadOnce(t *testing.T) {
	img := filepath.Join(t.TempDir(), "img")
	fdev, err := blockdev.CreateFile(img, 256<<20)
	require.NoError(t, err)
	require.NoError(t, ext4io.Format(fdev, ext4io.FormatOptions{NoDiscard: true, FastCommit: true}))
	dev := &blockReadLog{Device: fdev, read: map[int64]int{}}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	require.NoError(t, err)
	inos := createSyncedLogged(t, v, dev, "f", 64)
	require.NoError(t, v.Close())
	require.NoError(t, fdev.Close())
	blocks := inodeBlocks(t, img, inos)
	for _, ino := range inos {
		require.LessOrEqual(t, dev.read[blocks[ino]], 1, "inode %d's table block %d read %d times", ino, blocks[ino], dev.read[blocks[ino]])
	}
	ext4iotest.Fsck(t, img)
}
