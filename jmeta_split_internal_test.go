package ext4io

import (
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
// committed transactions or none, and the final log holds them all under
// one tid. Before the fix jmeta.log spread such a set over handles of
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
	set0 := itab + uint64(running)
	dirty(set0, setLen)
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
	}
	ext4iotest.FsckDev(t, final)
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
