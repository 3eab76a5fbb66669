package ext4io_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/ext4io/ext4io/extent"
)

// TestHostileOrphanList: a writable Open frees or truncates what the
// on-disk orphan list names (processOrphans). Entries Linux's
// ext4_orphan_get refuses as "bad orphan inode" fail the Open with
// ErrCorrupt before anything is written, and the image is unchanged.
// What Linux accepts (a linked directory, a linked file with a huge size:
// interrupted truncates) is processed, and e2fsck finds the image clean.
func TestHostileOrphanList(t *testing.T) {
	t.Parallel()
	src := filepath.Join(t.TempDir(), "src")
	require.NoError(t, os.WriteFile(src, bytes.Repeat([]byte("0123456789abcdef"), 1250), 0o644))
	for _, c := range []struct {
		name   string
		mkfs   []string
		script []string
		want   string // in the error; "" for an Open that succeeds
		keep   string // a name the Open that succeeds keeps, with its bytes
		onMain string // what happened before the check
	}{{
		name:   "Root",
		script: []string{"ssv last_orphan 2"},
		want:   "s_last_orphan chain reaches inode 2",
	}, {
		// An interrupted truncate of a directory: nothing to cut.
		name:   "LinkedDirectory",
		script: []string{"mkdir d", "write " + src + " d/f", "ssv last_orphan 12"},
		keep:   "d/f",
	}, {
		// An interrupted truncate to a size past every block: none cut.
		name:   "LinkedHugeSize",
		script: []string{"write " + src + " b", "sif <12> size 0x10000000000", "ssv last_orphan 12"},
		keep:   "b",
	}, {
		// A free inode (bitmap clear, links 0) whose stale extents name
		// the blocks file b owns: evicting it freed b's blocks.
		name:   "FreeInodeStaleMap",
		mkfs:   []string{"-O", "^has_journal"},
		script: []string{"write " + src + " b", "copy_inode <12> <20>", "sif <20> links_count 0", "ssv last_orphan 20"},
		want:   "bad orphan inode: free in the inode bitmap",
		onMain: "b's blocks freed: e2fsck finds them in use but marked free",
	}, {
		name:   "FreeInodeStaleMapJournal",
		script: []string{"write " + src + " b", "copy_inode <12> <20>", "sif <20> links_count 0", "ssv last_orphan 20"},
		want:   "bad orphan inode: free in the inode bitmap",
	}, {
		// The orphan file's own inode on the chain, with no links: it was
		// evicted, blocks and all, while the superblock still names it.
		name:   "OrphanFileInode",
		mkfs:   []string{"-O", "orphan_file"},
		script: []string{"sif <12> links_count 0", "ssv last_orphan 12"},
		want:   "orphan file",
		onMain: "fs.ErrNotExist: the orphan file inode read as a stale number",
	}, {
		// The orphan file itself on the chain, links intact.
		name:   "OrphanFileOnChain",
		mkfs:   []string{"-O", "orphan_file"},
		script: []string{"ssv last_orphan 12"},
		want:   "bad orphan inode: a special inode",
	}, {
		// A device with links cannot be truncated: Linux refuses it.
		name:   "LinkedDevice",
		script: []string{"mknod dev c 1 3", "ssv last_orphan 12"},
		want:   "cannot be truncated",
	}, {
		// A chain that loops (b → c → b): freeing in turn would leave the
		// head naming a freed inode after a crash between the two.
		name:   "ChainLoop",
		script: []string{"write " + src + " b", "write " + src + " c", "unlink b", "unlink c", "sif <12> links_count 0", "sif <13> links_count 0", "sif <12> dtime 13", "sif <13> dtime 12", "ssv last_orphan 12"},
		want:   "chain meets inode 12 twice",
	}, {
		// A chain whose second inode is free in the bitmap.
		name:   "ChainIntoFreeInode",
		mkfs:   []string{"-O", "^has_journal"},
		script: []string{"write " + src + " b", "write " + src + " c", "unlink c", "sif <13> links_count 0", "sif <13> dtime 20", "copy_inode <12> <20>", "sif <20> links_count 0", "sif <20> dtime 0", "ssv last_orphan 13"},
		want:   "bad orphan inode: free in the inode bitmap",
		onMain: "c freed, then b's blocks freed through inode 20",
	}} {
		t.Run(c.name, func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "img")
			ext4iotest.Mkfs(t, img, "8M", append([]string{"-b", "1024"}, c.mkfs...)...)
			ext4iotest.DebugfsScript(t, img, true, c.script)
			before, err := os.ReadFile(img)
			require.NoError(t, err)
			v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
			if c.want == "" {
				require.NoError(t, err)
				require.NoError(t, v.Close())
				ext4iotest.Fsck(t, img)
				ro, err := ext4io.OpenImage(img, ext4io.Options{})
				require.NoError(t, err)
				defer ro.Close()
				assert.Zero(t, ro.Superblock().LastOrphan, "the list is emptied")
				f, err := ro.Open(c.keep)
				require.NoError(t, err)
				defer f.Close()
				b := make([]byte, 20000)
				_, err = f.ReadAt(b, 0)
				require.NoError(t, err)
				want, err := os.ReadFile(src)
				require.NoError(t, err)
				assert.Equal(t, want, b, "no block cut")
				return
			}
			if err == nil {
				require.NoError(t, v.Close())
			}
			require.ErrorIs(t, err, ext4io.ErrCorrupt, "%s", c.onMain)
			assert.Contains(t, err.Error(), c.want)
			assert.NotContains(t, strings.TrimSpace(err.Error()), "\n", "one line")
			after, rerr := os.ReadFile(img)
			require.NoError(t, rerr)
			// The Open marked the superblock in use (not clean, mount
			// count) before it met the list; nothing else changed.
			assert.True(t, bytes.Equal(before[:1024], after[:1024]) && bytes.Equal(before[2048:], after[2048:]),
				"the failed Open changed more than the superblock")
			// Read-only opens do not process orphans: the files still read.
			ro, err := ext4io.OpenImage(img, ext4io.Options{})
			require.NoError(t, err)
			require.NoError(t, ro.Close())
		})
	}
}

// TestHostileOrphanLongChain: a long but valid s_last_orphan chain (every
// inode unlinked with one block, each i_dtime naming the next) is
// processed whole by a writable Open, in bounded time, and e2fsck finds
// the image clean. With a 1 MiB log the Open failed with ErrNoSpace: all
// orphans were freed in one transaction ("1508 credits exceed the log");
// each is now freed in an operation of its own, as Linux does.
func TestHostileOrphanLongChain(t *testing.T) {
	n := sized(4500, 4500, 20000) // more inode table blocks than the 1 MiB log holds
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	require.NoError(t, os.WriteFile(src, []byte("x"), 0o644))
	img := filepath.Join(dir, "img")
	ext4iotest.Mkfs(t, img, "32M", "-b", "1024", "-N", strconv.Itoa(n+64), "-J", "size=1")
	var script []string
	for i := range n {
		script = append(script, fmt.Sprintf("write %s f%d", src, i))
	}
	first := uint32(12)
	for i := range n {
		ino := first + uint32(i)
		next := ino + 1
		if i == n-1 {
			next = 0
		}
		script = append(script, fmt.Sprintf("unlink f%d", i), fmt.Sprintf("sif <%d> links_count 0", ino), fmt.Sprintf("sif <%d> dtime %d", ino, next))
	}
	script = append(script, fmt.Sprintf("ssv last_orphan %d", first))
	ext4iotest.DebugfsScript(t, img, true, script)
	free := func() uint64 {
		v, err := ext4io.OpenImage(img, ext4io.Options{})
		require.NoError(t, err)
		defer v.Close()
		st, err := v.Statfs()
		require.NoError(t, err)
		return st.FilesFree
	}
	before := free()
	start := time.Now()
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	t.Logf("%d orphans processed in %v", n, time.Since(start))
	require.NoError(t, v.Close())
	assert.Equal(t, before+uint64(n), free(), "every orphan freed")
	ext4iotest.Fsck(t, img)
}

// TestHostileOrphanFileTooBig: an orphan file whose size Linux refuses at
// mount ("orphan file too big": over 8 MiB on older kernels, over 512
// blocks on newer ones) is corruption. Its extent tree maps the file's own
// 32 valid orphan blocks again and again through a leaf block, so every
// block passes verification; without the size check each orphan add,
// delete and list walks all of it. An orphan file of exactly 8 MiB (the
// limit at 4 KiB blocks) still opens and takes an orphan.
func TestHostileOrphanFileTooBig(t *testing.T) {
	for _, c := range []struct {
		name    string
		repeats int // extents in the leaf, each mapping the 32 orphan blocks
		extra   uint64
		ok      bool
	}{
		{"AtLimit", 64, 0, true},
		{"PastLimitByOneByte", 64, 1, false},
		{"PastLimitByOneBlock", 65, 0, false},
		{"Huge", 340, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "img")
			ext4iotest.Mkfs(t, img, "16M", "-b", "4096", "-O", "orphan_file,metadata_csum")
			v, err := ext4io.OpenImage(img, ext4io.Options{})
			require.NoError(t, err)
			sb := v.Superblock()
			require.NoError(t, v.Close())
			ino := sb.OrphanFileInum
			require.NotZero(t, ino, "mkfs made no orphan file")
			of := fmt.Sprintf("<%d>", ino)
			rows := ext4iotest.Extents(t, img, of)
			require.Len(t, rows, 1, "orphan file extents")
			require.Equal(t, uint64(32), rows[0].Length, "orphan file blocks")
			var gen uint32
			stat := ext4iotest.Debugfs(t, img, false, "stat "+of)
			_, err = fmt.Sscan(strings.SplitN(stat, "Generation:", 2)[1], &gen)
			require.NoError(t, err)
			leafBlk, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(
				ext4iotest.Debugfs(t, img, false, "ffb 1")), "Free blocks found: "), 10, 64)
			require.NoError(t, err)

			// One leaf: extent k maps logical blocks 32k..32k+31 to the
			// orphan file's physical blocks.
			leaf := make([]byte, 4096)
			le := binary.LittleEndian
			le.PutUint16(leaf[0:], 0xf30a)
			le.PutUint16(leaf[2:], uint16(c.repeats))
			le.PutUint16(leaf[4:], (4096-12)/12)
			for k := range c.repeats {
				e := leaf[12+12*k:]
				le.PutUint32(e[0:], uint32(32*k))
				le.PutUint16(e[4:], 32)
				le.PutUint16(e[6:], uint16(rows[0].Physical>>32))
				le.PutUint32(e[8:], uint32(rows[0].Physical))
			}
			require.True(t, extent.SetBlockChecksum(leaf, extent.InodeSeed(sb.CsumSeed(), ino, gen)))
			writeBlock(t, img, leafBlk, leaf)
			// The inode: a depth-1 tree whose one index entry names the leaf.
			size := uint64(c.repeats)*32*4096 + c.extra
			script := []string{
				fmt.Sprintf("setb %d", leafBlk),
				fmt.Sprintf("sif %s size %d", of, size),
				fmt.Sprintf("sif %s block[0] 0x%x", of, 0xf30a|1<<16),
				fmt.Sprintf("sif %s block[1] 0x%x", of, 4|1<<16),
				fmt.Sprintf("sif %s block[2] 0", of),
				fmt.Sprintf("sif %s block[3] 0", of),
				fmt.Sprintf("sif %s block[4] %d", of, leafBlk),
				fmt.Sprintf("sif %s block[5] 0", of),
			}
			ext4iotest.DebugfsScript(t, img, true, script)
			rows = ext4iotest.Extents(t, img, of)
			require.Len(t, rows, c.repeats+1, "debugfs reads the crafted tree")

			// A writable Open lists the orphan file; unlinking an open
			// file takes a slot in it.
			var opErr error
			start := time.Now()
			done := guarded(t, "open and unlink", 10*time.Second, func() {
				v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
				if err != nil {
					opErr = err
					return
				}
				defer v.Close()
				f, err := v.Create("victim")
				if err != nil {
					opErr = err
					return
				}
				defer f.Close()
				opErr = v.Unlink("victim")
			})
			if !done {
				return
			}
			t.Logf("open and unlink: %v (%v)", opErr, time.Since(start))
			if c.ok {
				require.NoError(t, opErr)
				return
			}
			require.ErrorIs(t, opErr, ext4io.ErrCorrupt)
			assert.Contains(t, opErr.Error(), "exceeds the limit")
		})
	}
}
