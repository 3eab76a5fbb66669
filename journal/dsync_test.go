package journal

import (
	"bytes"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io/blockdev"
)

// syncSeqDev is a seqDev that is a blockdev.SyncWriter: a WriteAtSync is
// logged as one op with sync set, or, with refuse, fails with EOPNOTSUPP
// having written nothing (a kernel without RWF_DSYNC).
type syncSeqDev struct {
	*seqDev
	refuse bool
}

func (d *syncSeqDev) WriteAtSync(p []byte, off int64) (int, error) {
	if d.refuse {
		return 0, fmt.Errorf("test: pwritev2: %w", syscall.EOPNOTSUPP)
	}
	d.mu.Lock()
	d.ops = append(d.ops, seqOp{sync: true, off: off, data: bytes.Clone(p)})
	d.mu.Unlock()
	if _, err := d.Device.WriteAt(p, off); err != nil {
		return 0, err
	}
	return len(p), d.Device.Flush()
}

// opString renders ops as W (write), S (WriteAtSync) and F (flush), with
// C after a write holding a commit block and J after one of the journal
// superblock.
func opString(ops []seqOp) string {
	var b bytes.Buffer
	for _, o := range ops {
		switch {
		case o.flush:
			b.WriteString("F")
			continue
		case o.sync:
			b.WriteString("S")
		default:
			b.WriteString("W")
		}
		switch _, isCommit := commitSeq(o.data, o.off); {
		case isCommit:
			b.WriteString("C")
		case o.off == tJOff*tBS:
			b.WriteString("J")
		}
	}
	return b.String()
}

// TestCommitBlockWriteAtSync: on a blockdev.SyncWriter the commit block is
// one WriteAtSync after the preflush, with no flush after it, and the
// checkpoint's and Close's superblock updates are WriteAtSyncs; on a
// device without it, or whose WriteAtSync is refused, each is a write and
// a flush as before. The log is recovered correctly from every device.
func TestCommitBlockWriteAtSync(t *testing.T) {
	for _, tc := range []struct {
		name               string
		syncer, refuse     bool
		commit, checkpoint string
	}{
		{"sync-writer", true, false, "WJWFSC", "WFSJ"},
		{"plain", false, false, "WJWFWCF", "WFWJF"},
		{"refused", true, true, "WJWFWCF", "WFWJF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := newTestDev(t)
			seq := &seqDev{Device: mem}
			var dev blockdev.Device = seq
			if tc.syncer {
				dev = &syncSeqDev{seqDev: seq, refuse: tc.refuse}
			}
			cfg := testConfig(mem)
			cfg.Dev = dev
			j, err := Create(cfg, CreateOptions{UUID: [16]byte{9}, CsumV3: true})
			require.NoError(t, err)
			seq.take()

			h, err := j.Start(1)
			require.NoError(t, err)
			want := bytes.Repeat([]byte{0x5A}, tBS)
			require.NoError(t, h.GetWriteAccess(tHome0))
			require.NoError(t, h.Dirty(tHome0, want))
			require.NoError(t, h.Stop())
			require.NoError(t, j.Commit())
			// Superblock (s_start), log run, preflush, commit block.
			assert.Equal(t, tc.commit, opString(seq.take()), "commit")

			require.NoError(t, j.Checkpoint())
			// Home write, flush, superblock (tail).
			assert.Equal(t, tc.checkpoint, opString(seq.take()), "checkpoint")
			require.NoError(t, j.Close())

			got := make([]byte, tBS)
			_, err = mem.ReadAt(got, tHome0*tBS)
			require.NoError(t, err)
			assert.Equal(t, want, got)
			assert.Zero(t, readJSB(t, mem).Start, "journal left empty")
		})
	}
}

// TestCommitBlockWriteAtSyncError: a failing WriteAtSync of the commit
// block aborts the journal with the error, as a failing write does.
func TestCommitBlockWriteAtSyncError(t *testing.T) {
	mem := newTestDev(t)
	dev := &failSyncDev{Device: mem}
	cfg := testConfig(mem)
	cfg.Dev = dev
	j, err := Create(cfg, CreateOptions{UUID: [16]byte{9}, CsumV3: true})
	require.NoError(t, err)
	h, err := j.Start(1)
	require.NoError(t, err)
	require.NoError(t, h.GetWriteAccess(tHome0))
	require.NoError(t, h.Dirty(tHome0, bytes.Repeat([]byte{0x5A}, tBS)))
	require.NoError(t, h.Stop())
	err = j.Commit()
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrIO), "%v", err)
	assert.True(t, errors.Is(err, syscall.EIO), "%v", err)
}

type failSyncDev struct{ blockdev.Device }

func (d *failSyncDev) WriteAtSync(p []byte, off int64) (int, error) {
	return 0, fmt.Errorf("test: pwritev2: %w", syscall.EIO)
}

// TestWriteFastCommitSync: after its preflush, a fast commit's blocks are
// one WriteAtSync when contiguous on the device, preceded by a durable
// superblock write when s_start was 0; blocks in two places are written
// and flushed; without the preflush they are a write and a flush.
func TestWriteFastCommitSync(t *testing.T) {
	for _, gap := range []bool{false, true} {
		t.Run(fmt.Sprintf("gap=%v", gap), func(t *testing.T) {
			const blocks = 1024 + 256 + 16
			mem := newMemDev((blocks + 4) * tBS)
			seq := &seqDev{Device: mem}
			var split uint32 // journal blocks from split on map one block further
			cfg := Config{Dev: &syncSeqDev{seqDev: seq}, BlockSize: tBS, Blocks: blocks, CommitInterval: -1,
				Map: func(j uint32) (uint64, error) {
					if split != 0 && j >= split {
						return uint64(j) + tJOff + 1, nil
					}
					return uint64(j) + tJOff, nil
				}}
			j, err := Create(cfg, CreateOptions{CsumV3: true, Is64Bit: true})
			require.NoError(t, err)
			require.NoError(t, j.EnableFastCommit())
			if gap {
				split = j.fcFirst + 1
			}
			seq.take()
			tid, err := j.FastCommitTid()
			require.NoError(t, err)
			fc := bytes.Repeat([]byte{0xFC}, 2*tBS)
			require.NoError(t, j.WriteFastCommit(tid, 0, fc, true))
			want := "FSJS"
			if gap {
				want = "FSJWWF"
			}
			assert.Equal(t, want, opString(seq.take()), "fast commit with preflush")
			for i := range 2 {
				off, err := j.devOffset(j.fcFirst + uint32(i))
				require.NoError(t, err)
				got := make([]byte, tBS)
				_, err = mem.ReadAt(got, off)
				require.NoError(t, err)
				assert.Equal(t, fc[:tBS], got, "area block %d", i)
			}
			require.NoError(t, j.WriteFastCommit(tid, 2, fc[:tBS], false))
			assert.Equal(t, "WF", opString(seq.take()), "fast commit without preflush")
			require.NoError(t, j.Close())
		})
	}
}
