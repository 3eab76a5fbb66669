package ext4io

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/ext4io/ext4io/journal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestJmetaSetOneTransaction checks that a pending set larger than
// maxChunk, committed while the running journal transaction is partly
// full, lands in one transaction: every crash image (the durable state
// before each flush, and at the end) holds all of the set's blocks in
// committed transactions or none, e2fsck's replay of it writes all of
// them home or none, and the final log holds them all under one tid. Before the fix jmeta.log spread such a set over handles of
// maxChunk credits and Start committed the running transaction between
// two of them, leaving half the set in a committed transaction. Sets
// larger than a quarter-log transaction go into one transaction of their
// own (journal.StartLarge).
func TestJmetaSetOneTransaction(t *testing.T) {
	for _, tc := range []struct {
		name            string
		running, setLen int
	}{
		{"quarter", 100, 200}, // 100+128 fit a transaction, 100+200 do not
		{"large", 100, 400},   // more than one quarter-log transaction takes
	} {
		t.Run(tc.name, func(t *testing.T) {
			testJmetaSetOneTransaction(t, tc.running, tc.setLen)
		})
	}
}

func testJmetaSetOneTransaction(t *testing.T, running, setLen int) {
	mem := memdev.NewBlockSize(32<<20, 4096)
	require.NoError(t, Format(mem, FormatOptions{BlockSize: 4096, JournalBlocks: 1024, InodeRatio: 4096}))
	c, err := errordev.NewCrashable(mem)
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		snaps []blockdev.Device // durable states before each flush once armed
		armed atomic.Bool
	)
	inj := errordev.Func(func(op errordev.Op) error {
		if op.Kind == errordev.Flush && armed.Load() {
			img, err := c.Crash(errordev.CrashOptions{})
			if err != nil {
				return err
			}
			mu.Lock()
			snaps = append(snaps, img)
			mu.Unlock()
		}
		return nil
	})
	v, err := Open(errordev.New(c, inj), Options{Writable: true, PageCacheBytes: -1})
	require.NoError(t, err)
	defer func() { require.NoError(t, v.Close()) }()
	m := v.jm
	require.Equal(t, 128, m.maxChunk)
	require.Greater(t, setLen, m.maxChunk)

	// Real metadata blocks dirtied with their own contents: the image
	// stays consistent whichever of them commit.
	itab := v.groups[0].InodeTable
	require.GreaterOrEqual(t, uint64(v.sb.InodesPerGroup)*uint64(v.sb.InodeSizeBytes())/uint64(v.bs), uint64(running+setLen))
	dirty := func(from uint64, n int) {
		for b := from; b < from+uint64(n); b++ {
			buf, err := m.GetWrite(b)
			require.NoError(t, err)
			require.NoError(t, m.Dirty(b, buf))
		}
	}
	// The running transaction partly full: logged, not committed.
	dirty(itab, running)
	require.NoError(t, m.commit(false))
	// The set: inode table blocks past the used inodes (itable_unused,
	// which e2fsck does not read), given a mark that e2fsck's own replay
	// of a crash image must write to all of them or none.
	set0 := itab + uint64(running)
	require.Greater(t, set0*uint64(v.bs)/uint64(v.sb.InodeSizeBytes()), uint64(v.sb.InodesPerGroup-v.groups[0].ItableUnused))
	mark := func(b uint64) []byte {
		buf := make([]byte, v.bs)
		for i := range buf {
			buf[i] = 0x5A
		}
		binary.LittleEndian.PutUint64(buf, b)
		return buf
	}
	for b := set0; b < set0+uint64(setLen); b++ {
		require.NoError(t, m.Dirty(b, mark(b)))
	}
	armed.Store(true)
	require.NoError(t, m.commit(true))
	armed.Store(false)
	final, err := c.Crash(errordev.CrashOptions{})
	require.NoError(t, err)
	snaps = append(snaps, final)

	cfg, err := v.journalConfig()
	require.NoError(t, err)
	for i, img := range snaps {
		cfg.Dev, cfg.FSDev = img, nil
		j, err := journal.Open(cfg)
		require.NoError(t, err)
		per := map[uint32]int{} // transaction -> blocks of the set
		committed := map[uint32]bool{}
		require.NoError(t, j.Scan(func(lb journal.LogBlock) error {
			if lb.Type == 0 && lb.Home >= set0 && lb.Home < set0+uint64(setLen) {
				per[lb.Sequence]++
			}
			if lb.Type == journal.BlockTypeCommit {
				committed[lb.Sequence] = true
			}
			return nil
		}))
		n := 0
		for s, k := range per {
			if committed[s] {
				n += k
			}
		}
		if n != 0 && n != setLen {
			t.Fatalf("crash image %d of %d: %d of the set's %d blocks in committed transactions %v", i, len(snaps), n, setLen, per)
		}
		if i == len(snaps)-1 {
			require.Len(t, per, 1, "the set's blocks are in transactions %v", per)
			assert.Equal(t, setLen, n)
		}
		// e2fsprogs' replay agrees: all the marks or none.
		path := ext4iotest.ImageOf(t, img)
		out, err := exec.Command(ext4iotest.Tool(t, "e2fsck"), "-E", "journal_only", "-y", path).CombinedOutput()
		require.NoError(t, err, "e2fsck -E journal_only: %s", out)
		ext4iotest.Fsck(t, path)
		f, err := os.Open(path)
		require.NoError(t, err)
		got := make([]byte, v.bs)
		marked := 0
		for b := set0; b < set0+uint64(setLen); b++ {
			_, err := f.ReadAt(got, int64(b)*int64(v.bs))
			require.NoError(t, err)
			if bytes.Equal(got, mark(b)) {
				marked++
			}
		}
		require.NoError(t, f.Close())
		if marked != 0 && marked != setLen {
			t.Fatalf("crash image %d of %d: e2fsck replayed %d of the set's %d blocks", i, len(snaps), marked, setLen)
		}
		require.Equal(t, n, marked, "crash image %d: blocks e2fsck replayed vs the log scan", i)
		require.NoError(t, os.Remove(path))
	}
}

// TestJmetaSetBeyondLog checks that a pending set larger than the whole
// log can hold in one transaction is not committed in parts: the commit
// fails with ErrNoSpace, the volume stops committing, and the journal
// holds none of the set.
func TestJmetaSetBeyondLog(t *testing.T) {
	mem := memdev.NewBlockSize(32<<20, 4096)
	require.NoError(t, Format(mem, FormatOptions{BlockSize: 4096, JournalBlocks: 1024, InodeRatio: 1024}))
	v, err := Open(mem, Options{Writable: true, PageCacheBytes: -1})
	require.NoError(t, err)
	m := v.jm
	setLen := m.j.MaxLargeCredits() + 1
	itab := v.groups[0].InodeTable
	require.GreaterOrEqual(t, uint64(v.sb.InodesPerGroup)*uint64(v.sb.InodeSizeBytes())/uint64(v.bs), uint64(setLen))
	for b := itab; b < itab+uint64(setLen); b++ {
		buf, err := m.GetWrite(b)
		require.NoError(t, err)
		require.NoError(t, m.Dirty(b, buf))
	}
	require.ErrorIs(t, m.commit(true), ErrNoSpace)
	require.ErrorIs(t, v.failed(), ErrNoSpace)
	require.NoError(t, m.j.Scan(func(lb journal.LogBlock) error {
		if lb.Type == 0 && lb.Home >= itab && lb.Home < itab+uint64(setLen) {
			t.Errorf("block %d of the set logged in transaction %d", lb.Home, lb.Sequence)
		}
		return nil
	}))
	require.ErrorIs(t, v.Close(), ErrNoSpace)
	ext4iotest.FsckDev(t, mem)
}
