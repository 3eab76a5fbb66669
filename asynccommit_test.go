package ext4io_test

// A journal superblock with async_commit (JBD2_FEATURE_INCOMPAT_ASYNC_COMMIT,
// as a Linux mount with journal_async_commit leaves it): a writable open
// clears it before its first commit, as ext4's ordered-mode mounts do, and
// orders the data written back before the commit block that maps it; a
// read-only open leaves it alone.

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/ext4io/ext4io/journal"
)

// asyncCommitImage formats a volume and sets async_commit in its journal
// superblock with the journal package's encoder. It returns the device,
// the block size and the journal superblock's device offset.
func asyncCommitImage(t *testing.T) (*memdev.Device, int, int64) {
	t.Helper()
	base := memdev.New(64 << 20)
	require.NoError(t, ext4io.Format(base, ext4io.FormatOptions{NoDiscard: true}))
	v, err := ext4io.Open(base, ext4io.Options{})
	require.NoError(t, err)
	sb := v.Superblock()
	bs := sb.BlockSize()
	require.NoError(t, v.Close())
	out := strings.TrimSpace(ext4iotest.Debugfs(t, ext4iotest.ImageOf(t, base), false, "bmap <8> 0"))
	pblk, err := strconv.ParseUint(out, 10, 64)
	require.NoError(t, err, "debugfs bmap: %q", out)
	require.NotZero(t, pblk)
	off := int64(pblk) * int64(bs)
	buf := make([]byte, bs)
	_, err = base.ReadAt(buf, off)
	require.NoError(t, err)
	jsb, err := journal.DecodeSuperblock(buf)
	require.NoError(t, err)
	jsb.FeatureIncompat |= journal.FeatureIncompatAsyncCommit
	jsb.SetChecksum()
	jsb.Encode(buf)
	_, err = base.WriteAt(buf, off)
	require.NoError(t, err)
	require.NoError(t, base.Flush())
	return base, bs, off
}

// jsbAsync reports whether the encoded journal superblock data has
// async_commit.
func jsbAsync(t *testing.T, data []byte) bool {
	t.Helper()
	jsb, err := journal.DecodeSuperblock(data)
	require.NoError(t, err)
	return jsb.FeatureIncompat&journal.FeatureIncompatAsyncCommit != 0
}

// isCommitBlock reports whether b is a jbd2 commit block.
func isCommitBlock(b []byte) bool {
	return binary.BigEndian.Uint32(b) == journal.Magic && binary.BigEndian.Uint32(b[4:]) == journal.BlockTypeCommit
}

// TestAsyncCommitJournalWritable: after a writable open and one commit
// the on-disk journal superblock lacks async_commit, a flush separates the
// written-back data from the commit block (and the cleared superblock from
// it), and e2fsck -fn finds the image clean.
func TestAsyncCommitJournalWritable(t *testing.T) {
	base, bs, jsbOff := asyncCommitImage(t)
	rec := &recDev{Device: base}
	v, err := ext4io.Open(rec, ext4io.Options{Writable: true, WritebackAge: -1})
	require.NoError(t, err)
	data := bytes.Repeat([]byte("async-commit-data."), 64<<10/18+1)[:64<<10]
	require.NoError(t, v.WriteFile("f", data, 0o644))
	rec.mu.Lock()
	rec.ops = nil
	rec.mu.Unlock()
	require.NoError(t, v.Sync())
	rec.mu.Lock()
	ops := rec.ops
	rec.ops = nil
	rec.mu.Unlock()

	lastData, jsbAt, commitAt := -1, -1, -1
	for i, o := range ops {
		if o.flush {
			continue
		}
		for b := 0; b+bs <= len(o.data); b += bs {
			blk := o.data[b : b+bs]
			switch {
			case o.off+int64(b) == jsbOff:
				assert.False(t, jsbAsync(t, blk), "journal superblock written with async_commit (op %d)", i)
				jsbAt = i
			case isCommitBlock(blk):
				if commitAt == -1 {
					commitAt = i
				}
			case bytes.Equal(blk, data[:bs]):
				lastData = i
			}
		}
	}
	require.NotEqual(t, -1, commitAt, "no commit block among %d ops", len(ops))
	require.NotEqual(t, -1, lastData, "no data write")
	require.NotEqual(t, -1, jsbAt, "no journal superblock write")
	require.Less(t, lastData, commitAt, "the data is written back before the commit that maps it")
	flushBetween := func(from, to int) bool {
		for i := from + 1; i < to; i++ {
			if ops[i].flush {
				return true
			}
		}
		return false
	}
	assert.True(t, flushBetween(lastData, commitAt), "no flush between the data write (op %d) and the commit block (op %d)", lastData, commitAt)
	assert.True(t, flushBetween(jsbAt, commitAt), "no flush between the journal superblock write (op %d) and the commit block (op %d)", jsbAt, commitAt)

	buf := make([]byte, bs)
	_, err = base.ReadAt(buf, jsbOff)
	require.NoError(t, err)
	assert.False(t, jsbAsync(t, buf), "on-disk journal superblock after the commit")
	require.NoError(t, v.Close())
	_, err = base.ReadAt(buf, jsbOff)
	require.NoError(t, err)
	assert.False(t, jsbAsync(t, buf), "on-disk journal superblock after Close")
	ext4iotest.FsckDev(t, base)

	v, err = ext4io.Open(base, ext4io.Options{})
	require.NoError(t, err)
	got, err := v.ReadFile("f")
	require.NoError(t, err)
	assert.Equal(t, data, got)
	require.NoError(t, v.Close())
}

// TestAsyncCommitJournalReadOnly: a read-only open, reads and the journal
// inspection cmd/ext4io's journal command does write nothing and leave
// async_commit set.
func TestAsyncCommitJournalReadOnly(t *testing.T) {
	base, bs, jsbOff := asyncCommitImage(t)
	before := make([]byte, bs)
	_, err := base.ReadAt(before, jsbOff)
	require.NoError(t, err)
	ext4iotest.FsckDev(t, base)

	rec := &recDev{Device: base}
	v, err := ext4io.Open(rec, ext4io.Options{})
	require.NoError(t, err)
	_, err = v.ReadDir(".")
	require.NoError(t, err)
	j, err := v.Journal()
	require.NoError(t, err)
	assert.NotZero(t, j.Superblock().FeatureIncompat&journal.FeatureIncompatAsyncCommit)
	require.NoError(t, v.Close())
	rec.mu.Lock()
	n := len(rec.ops)
	rec.mu.Unlock()
	assert.Zero(t, n, "writes or flushes by a read-only open")

	after := make([]byte, bs)
	_, err = base.ReadAt(after, jsbOff)
	require.NoError(t, err)
	assert.True(t, jsbAsync(t, after))
	assert.Equal(t, before, after)
}
