package journal

import (
	"bytes"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io/blockdev"
)

// seqOp is one write or flush that reached a seqDev.
type seqOp struct {
	flush bool
	sync  bool // a WriteAtSync (syncSeqDev)
	off   int64
	data  []byte // a copy of a write's bytes
}

// seqDev records, in order, the writes and flushes reaching a device.
type seqDev struct {
	blockdev.Device
	mu  sync.Mutex
	ops []seqOp // guarded by mu
}

func (d *seqDev) WriteAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	d.ops = append(d.ops, seqOp{off: off, data: bytes.Clone(p)})
	d.mu.Unlock()
	return d.Device.WriteAt(p, off)
}

func (d *seqDev) Flush() error {
	d.mu.Lock()
	d.ops = append(d.ops, seqOp{flush: true})
	d.mu.Unlock()
	return d.Device.Flush()
}

func (d *seqDev) take() []seqOp {
	d.mu.Lock()
	defer d.mu.Unlock()
	ops := d.ops
	d.ops = nil
	return ops
}

// setAsyncCommit rewrites j's empty superblock with async_commit, as a
// Linux mount with journal_async_commit leaves it, and closes j.
func setAsyncCommit(t *testing.T, j *Journal) {
	t.Helper()
	j.sbMu.Lock()
	nsb := j.sb
	nsb.FeatureIncompat |= FeatureIncompatAsyncCommit
	require.NoError(t, j.writeSuperblockLocked(&nsb, true))
	j.sbMu.Unlock()
	require.NoError(t, j.Close())
}

// readJSB decodes the journal superblock on dev.
func readJSB(t *testing.T, dev blockdev.Device) *Superblock {
	t.Helper()
	buf := make([]byte, tBS)
	_, err := dev.ReadAt(buf, tJOff*tBS)
	require.NoError(t, err)
	sb, err := DecodeSuperblock(buf)
	require.NoError(t, err)
	return sb
}

// TestAsyncCommitClearedAtFirstCommit: on a journal whose superblock has
// async_commit, the first commit rewrites the superblock without it
// before its commit block, and a flush separates the ordered data (written
// by BeforeCommit, or by the caller before the commit as the ext4io
// Volume does) from the commit block, as ext4 in data=ordered mode, which
// clears the feature at mount, orders them. Opening alone writes nothing.
func TestAsyncCommitClearedAtFirstCommit(t *testing.T) {
	const dataBlk = tHome0 + tHomeN // a data block outside the journalled ones
	for _, hook := range []bool{false, true} {
		name := "caller-writes-data"
		if hook {
			name = "before-commit"
		}
		t.Run(name, func(t *testing.T) {
			mem := newTestDev(t)
			dev := &seqDev{Device: mem}
			cfg := testConfig(mem)
			cfg.Dev = dev
			data := bytes.Repeat([]byte{0xDA, 0x7A}, tBS/2)
			writeData := func() error {
				_, err := dev.WriteAt(data, dataBlk*tBS)
				return err
			}
			if hook {
				cfg.BeforeCommit = func(uint32) error { return writeData() }
			}
			j, err := Create(cfg, CreateOptions{UUID: [16]byte{7}, CsumV3: true})
			require.NoError(t, err)
			setAsyncCommit(t, j)
			dev.take()
			j, err = Open(cfg)
			require.NoError(t, err)
			require.NotZero(t, j.Format().Incompat&FeatureIncompatAsyncCommit)
			assert.Len(t, dev.take(), 0, "Open writes nothing")
			assert.NotZero(t, readJSB(t, mem).FeatureIncompat&FeatureIncompatAsyncCommit)

			h, err := j.Start(1)
			require.NoError(t, err)
			require.NoError(t, h.GetWriteAccess(tHome0))
			require.NoError(t, h.Dirty(tHome0, bytes.Repeat([]byte{0x11}, tBS)))
			require.NoError(t, h.Stop())
			if !hook {
				require.NoError(t, writeData())
			}
			require.NoError(t, j.Commit())
			ops := dev.take()

			dataAt, sbAt, commitAt := -1, -1, -1
			for i, o := range ops {
				switch {
				case o.flush:
				case o.off == dataBlk*tBS:
					dataAt = i
				case o.off == tJOff*tBS:
					sb, err := DecodeSuperblock(o.data[:tBS])
					require.NoError(t, err)
					assert.Zero(t, sb.FeatureIncompat&FeatureIncompatAsyncCommit, "superblock written with async_commit")
					assert.NotZero(t, sb.Start, "superblock of a non-empty log")
					sbAt = i
				default:
					for b := 0; b < len(o.data); b += tBS {
						if _, ok := commitSeq(o.data[b:b+tBS], o.off+int64(b)); ok {
							commitAt = i
						}
					}
				}
			}
			require.NotEqual(t, -1, dataAt, "data write: %d ops", len(ops))
			require.NotEqual(t, -1, sbAt, "superblock write")
			require.NotEqual(t, -1, commitAt, "commit block write")
			flushBetween := func(from, to int) bool {
				for i := from + 1; i < to; i++ {
					if ops[i].flush {
						return true
					}
				}
				return false
			}
			assert.True(t, flushBetween(dataAt, commitAt), "no flush between the data write (op %d) and the commit block (op %d)", dataAt, commitAt)
			assert.True(t, flushBetween(sbAt, commitAt), "no flush between the superblock write (op %d) and the commit block (op %d)", sbAt, commitAt)
			assert.Zero(t, j.Superblock().FeatureIncompat&FeatureIncompatAsyncCommit)

			// The cleared superblock is durable, and a crash now replays the
			// commit.
			img := memDevFrom(mem.durableCopy())
			assert.Zero(t, readJSB(t, img).FeatureIncompat&FeatureIncompatAsyncCommit)
			rcfg := testConfig(img)
			rj, err := Open(rcfg)
			require.NoError(t, err)
			require.True(t, rj.NeedsRecovery())
			info, err := rj.Recover()
			require.NoError(t, err)
			assert.Equal(t, 1, info.Transactions)
			assert.Equal(t, bytes.Repeat([]byte{0x11}, tBS), img.cur[tHome0*tBS:(tHome0+1)*tBS])
			require.NoError(t, rj.Close())

			require.NoError(t, j.Close())
			assert.Zero(t, readJSB(t, mem).FeatureIncompat&FeatureIncompatAsyncCommit, "after Close")
		})
	}
}

// TestAsyncCommitLogRecovery: a log whose superblock has async_commit (a
// crash under a Linux mount with journal_async_commit) replays as jbd2
// does: a commit block that fails its checksum ends the replay before its
// transaction without marking it failed, where without async_commit it is
// j_failed_commit.
func TestAsyncCommitLogRecovery(t *testing.T) {
	for _, async := range []bool{true, false} {
		name := "sync"
		if async {
			name = "async"
		}
		t.Run(name, func(t *testing.T) {
			mem := newTestDev(t)
			dev := &seqDev{Device: mem}
			cfg := testConfig(mem)
			cfg.Dev = dev
			j, err := Create(cfg, CreateOptions{UUID: [16]byte{7}, CsumV3: true, Sequence: 5})
			require.NoError(t, err)
			dev.take()
			commitOff := map[uint32]int64{}
			for i := range 3 {
				h, err := j.Start(1)
				require.NoError(t, err)
				b := uint64(tHome0 + i)
				require.NoError(t, h.GetWriteAccess(b))
				require.NoError(t, h.Dirty(b, bytes.Repeat([]byte{byte(0x40 + i)}, tBS)))
				require.NoError(t, h.Stop())
				require.NoError(t, j.Commit())
			}
			for _, o := range dev.take() {
				for b := 0; b < len(o.data); b += tBS {
					if seq, ok := commitSeq(o.data[b:b+tBS], o.off+int64(b)); ok {
						commitOff[seq] = o.off + int64(b)
					}
				}
			}
			require.Len(t, commitOff, 3)
			img := mem.durableCopy()
			require.NoError(t, j.Close())

			// The crash image: the superblock as the Linux mount wrote it,
			// the second commit block torn (its checksum no longer
			// matches).
			sb, err := DecodeSuperblock(img[tJOff*tBS : (tJOff+1)*tBS])
			require.NoError(t, err)
			require.EqualValues(t, 5, sb.SeqTail)
			require.NotZero(t, sb.Start)
			if async {
				sb.FeatureIncompat |= FeatureIncompatAsyncCommit
			}
			sb.SetChecksum()
			sb.Encode(img[tJOff*tBS : (tJOff+1)*tBS])
			img[commitOff[6]+16] ^= 0xFF

			rdev := memDevFrom(img)
			rj, err := Open(testConfig(rdev))
			require.NoError(t, err)
			info, err := rj.Recover()
			require.NoError(t, err)
			assert.EqualValues(t, 5, info.StartSeq)
			assert.EqualValues(t, 6, info.EndSeq)
			assert.Equal(t, 1, info.Transactions)
			if async {
				assert.Zero(t, info.FailedCommit)
			} else {
				assert.EqualValues(t, 6, info.FailedCommit)
			}
			for i := range 3 {
				want := bytes.Repeat([]byte{byte(0x40 + i)}, tBS)
				if i > 0 {
					want = initialBlock(uint64(tHome0 + i))
				}
				b := tHome0 + i
				assert.Equal(t, want, rdev.cur[b*tBS:(b+1)*tBS], "home block %d", b)
			}
			// Recovery keeps the superblock's features.
			assert.Equal(t, async, readJSB(t, rdev).FeatureIncompat&FeatureIncompatAsyncCommit != 0)
			require.NoError(t, rj.Close())
		})
	}
}
