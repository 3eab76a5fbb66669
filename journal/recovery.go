package journal

import (
	"context"
	"errors"
	"fmt"

	"github.com/ext4io/ext4io/internal/errs"
	"github.com/ext4io/ext4io/internal/mutant"
)

// RecoveryInfo reports what Recover did. It mirrors jbd2's struct
// recovery_info.
type RecoveryInfo struct {
	StartSeq      uint32 // tid of the first transaction in the log (s_sequence)
	EndSeq        uint32 // tid of the first transaction not replayed (end_transaction)
	Transactions  int    // EndSeq - StartSeq: complete transactions replayed
	Replayed      int    // blocks written to their home location (nr_replays)
	Revoked       int    // journalled blocks skipped because revoked (nr_revoke_hits)
	RevokeRecords int    // revoke records found (nr_revokes)
	// FailedCommit is the tid whose commit block failed its checksum with
	// async_commit off (j_failed_commit); replay stopped before it. Zero if
	// none.
	FailedCommit uint32
	NextSeq      uint32 // s_sequence written to the emptied journal superblock
	// BadBlocks lists the home block numbers whose journalled copy failed
	// its tag checksum and was not written (jbd2 "Invalid checksum
	// recovering data block").
	BadBlocks []uint64
	// FastCommitTags counts the fast-commit tags Config.FastCommit
	// replayed after the log (0 without fast commits).
	FastCommitTags int
}

type passType int

const (
	passScan passType = iota
	passRevoke
	passReplay
)

// tidGT and tidGEQ compare transaction ids with wrap-around, like jbd2's
// tid_gt/tid_geq.
func tidGT(x, y uint32) bool  { return int32(x-y) > 0 }
func tidGEQ(x, y uint32) bool { return int32(x-y) >= 0 }

// recovery carries state between the three passes.
type recovery struct {
	j      *Journal
	ctx    context.Context // checked before each descriptor block
	info   RecoveryInfo
	endSet bool              // info.EndSeq is known (jbd2 tests end_transaction != 0)
	revoke map[uint64]uint32 // block -> newest revoking tid
	fatal  error             // replay error reported at the end (jbd2's "success")
}

// NeedsRecovery reports whether the on-disk journal holds transactions to
// replay (s_start != 0).
func (j *Journal) NeedsRecovery() bool {
	j.sbMu.Lock()
	defer j.sbMu.Unlock()
	return j.sb.Start != 0
}

// Recover replays the journal into the file system device the way jbd2 and
// e2fsck do: PASS_SCAN finds the end of the valid log (stopping at the first
// block that is not the expected descriptor, revoke or commit block of the
// next transaction, and at the first commit that fails its checksum),
// PASS_REVOKE collects revoke records, PASS_REPLAY writes every unrevoked
// journalled block home. Then the device is flushed and the journal
// superblock emptied as e2fsck does: s_start = 0, s_sequence = EndSeq + 1.
// When FailedCommit is set the caller should mark the file system as having
// errors (ext4 sets EXT4_ERROR_FS; e2fsck goes through s_errno).
//
// Journalled blocks whose tag checksum fails are skipped (others are still
// replayed, the journal is still emptied) and the error returned wraps
// ErrCorrupt alongside a complete RecoveryInfo. Any other failure (I/O, a
// revoke block whose r_count overruns the block, a descriptor that fails its
// checksum in the replay pass) stops recovery, leaves the journal superblock
// untouched and returns an error wrapping ErrCorrupt or ErrIO.
//
// Recover does not touch the ext4 superblock: the caller clears
// needs_recovery (EXT4_FEATURE_INCOMPAT_RECOVER) and recomputes the free
// block and inode counts, as ext4 does after replay. With nothing to replay
// (s_start == 0) it returns a zero RecoveryInfo with NextSeq = s_sequence+1.
// Recover must be called before any transaction is started.
func (j *Journal) Recover() (RecoveryInfo, error) {
	return j.RecoverContext(context.Background())
}

// RecoverContext is Recover that stops when ctx is done, between
// descriptor blocks of its passes and before the fast-commit replay, with
// an error wrapping ctx.Err(). The log is left as it was (s_start set), so
// a later recovery replays it from the start: replaying a logged block
// again writes the same bytes.
func (j *Journal) RecoverContext(ctx context.Context) (RecoveryInfo, error) {
	j.mu.Lock()
	busy := j.mu.running != nil || j.mu.committing != nil || len(j.mu.checkpoint) > 0
	j.mu.Unlock()
	if busy {
		return RecoveryInfo{}, fmt.Errorf("journal: recover with transactions in flight: %w", ErrInvalid)
	}
	j.sbMu.Lock()
	sb := j.sb
	j.sbMu.Unlock()
	if sb.Start == 0 {
		return RecoveryInfo{StartSeq: sb.SeqTail, EndSeq: sb.SeqTail, NextSeq: sb.SeqTail + 1}, nil
	}
	r := &recovery{j: j, ctx: ctx, revoke: map[uint64]uint32{}}
	err := r.pass(&sb, passScan)
	if err == nil {
		err = r.pass(&sb, passRevoke)
	}
	if err == nil {
		err = r.pass(&sb, passReplay)
	}
	r.info.Transactions = int(r.info.EndSeq - r.info.StartSeq)
	if err != nil {
		return r.info, j.recoveryFailed(err)
	}
	if err := ctx.Err(); err != nil {
		return r.info, j.recoveryFailed(fmt.Errorf("journal: recovery cancelled: %w", err))
	}
	if err := j.replayFastCommits(&r.info); err != nil {
		return r.info, j.recoveryFailed(err)
	}
	if ferr := j.fsdev.Flush(); ferr != nil {
		return r.info, j.recoveryFailed(fmt.Errorf("journal: flush after replay: %w", ioErr(ferr)))
	}
	next := r.info.EndSeq + 1
	r.info.NextSeq = next
	if err := j.resetAfterRecovery(next); err != nil {
		return r.info, j.recoveryFailed(err)
	}
	return r.info, r.fatal
}

// recoveryFailed marks the journal failed after an unfinished recovery, so
// that Close leaves the on-disk superblock (s_start) as it is: the log still
// holds what the next recovery must replay. It returns err.
func (j *Journal) recoveryFailed(err error) error {
	j.mu.Lock()
	if j.mu.err == nil {
		j.mu.err = fmt.Errorf("journal: recovery failed: %w", err)
	}
	j.mu.Unlock()
	return err
}

// resetAfterRecovery writes the emptied superblock (FUA: write + flush) and
// sets up the in-memory log state for new transactions.
func (j *Journal) resetAfterRecovery(next uint32) error {
	j.sbMu.Lock()
	defer j.sbMu.Unlock()
	nsb := j.sb
	nsb.SeqTail = next
	nsb.Start = 0
	if err := j.writeSuperblockLocked(&nsb, true); err != nil {
		return err
	}
	j.mu.Lock()
	j.mu.nextTid = next
	j.mu.commitSeq = next - 1
	j.mu.tailSeq = next
	j.mu.head, j.mu.tail = j.first, j.first
	j.mu.Unlock()
	return nil
}

// wrap mirrors jbd2's wrap() macro.
func (j *Journal) wrap(b uint32) uint32 {
	if b >= j.last {
		b -= j.last - j.first
	}
	return b
}

// pass is do_one_pass.
func (r *recovery) pass(sb *Superblock, pass passType) error {
	j := r.j
	f := j.f
	next := sb.SeqTail
	block := sb.Start
	if pass == passScan {
		r.info.StartSeq = next
	}
	var (
		crcSum             uint32 = ^uint32(0) // v1 transactional checksum
		needCheckCommitTim bool
		lastCommitTime     uint64
	)
	buf := make([]byte, j.bs)
	obuf := make([]byte, j.bs)
	// walked counts the log blocks the pass has gone over. A log holds
	// no more than its length from s_start: a pass that goes on past it
	// has come round to blocks it read (a log of descriptors of one tid
	// and no commit), and would go round for ever.
	logLen := uint64(j.last - j.first)
	var walked uint64
loop:
	for {
		if pass != passScan && tidGEQ(next, r.info.EndSeq) {
			break
		}
		at := block
		if err := j.readLog(block, buf); err != nil {
			return err
		}
		block = j.wrap(block + 1)
		walked++
		h := decodeHeader(buf)
		if h.Magic != Magic || h.Sequence != next {
			break
		}
		if walked > logLen {
			return errs.Corruptf("journal", uint64(at), -1, "transaction %d runs past the log's %d blocks from s_start %d", next, logLen, sb.Start)
		}
		switch h.BlockType {
		case BlockTypeDescriptor:
			if err := r.ctx.Err(); err != nil {
				return fmt.Errorf("journal: recovery cancelled: %w", err)
			}
			if !f.blockTailOK(buf) {
				if pass != passScan {
					return errs.Corruptf("journal descriptor", uint64(at), len(buf)-tailSize,
						"checksum mismatch in transaction %d", next)
				}
				needCheckCommitTim = true
			}
			d, derr := DecodeDescriptor(f, buf)
			if derr != nil {
				// count_tags never fails; a malformed trailing UUID just
				// ends the walk. Treat it like jbd2: tags counted so far.
				d = &Descriptor{}
			}
			walked += uint64(len(d.Tags))
			if pass != passReplay {
				if pass == passScan && f.Compat&FeatureCompatChecksum != 0 && !r.endSet {
					crcSum = crc32BE(crcSum, buf)
					failed := false
					for range d.Tags {
						io := block
						block = j.wrap(block + 1)
						if err := j.readLog(io, obuf); err != nil {
							failed = true
							break
						}
						crcSum = crc32BE(crcSum, obuf)
					}
					if failed {
						break loop
					}
					continue
				}
				block = j.wrap(block + uint32(len(d.Tags)))
				continue
			}
			if err := r.replay(d, &block, next, obuf); err != nil {
				return err
			}
		case BlockTypeCommit:
			if pass != passScan {
				next++
				continue
			}
			c, _ := DecodeCommit(buf)
			commitTime := c.Sec
			if needCheckCommitTim {
				if commitTime >= lastCommitTime {
					return errs.Corruptf("journal", uint64(at), -1, "invalid checksum found in transaction %d", next)
				}
				break loop // stale blocks: end recovery with success
			}
			ok := false
			if f.Compat&FeatureCompatChecksum != 0 {
				if r.endSet {
					r.info.FailedCommit = r.info.EndSeq
					break loop
				}
				found := c.Chksum[0]
				if (crcSum == found && c.ChksumType == ChecksumTypeCRC32 && c.ChksumSize == crc32ChksumSize) ||
					(c.ChksumType == 0 && c.ChksumSize == 0 && found == 0) {
					crcSum = ^uint32(0)
					ok = true
				}
			} else if !f.csumV2or3() || be.Uint32(buf[16:]) == f.commitCsum(buf) || f.commitCsumPartialOK(buf) {
				ok = true
			}
			if !ok {
				if commitTime < lastCommitTime {
					break loop // ignore_crc_mismatch: stale
				}
				r.info.EndSeq, r.endSet = next, true
				if f.Incompat&FeatureIncompatAsyncCommit == 0 {
					r.info.FailedCommit = next
					break loop
				}
			}
			lastCommitTime = commitTime
			next++
		case BlockTypeRevoke:
			if pass == passReplay {
				continue
			}
			if pass == passScan && !f.blockTailOK(buf) {
				needCheckCommitTim = true
			}
			rv, err := DecodeRevoke(f, buf)
			if err != nil {
				var ce *errs.CorruptError
				if errors.As(err, &ce) {
					ce.Block = uint64(at)
				}
				return err
			}
			if pass == passScan {
				r.info.RevokeRecords += len(rv.Blocks)
				continue
			}
			for _, b := range rv.Blocks {
				if s, ok := r.revoke[b]; !ok || tidGT(next, s) {
					r.revoke[b] = next
				}
			}
		default:
			break loop
		}
	}
	if pass == passScan {
		if !r.endSet {
			r.info.EndSeq, r.endSet = next, true
		}
	} else if r.info.EndSeq != next {
		return fmt.Errorf("journal: recovery pass %d ended at transaction %d, expected %d: %w",
			pass, next, r.info.EndSeq, ErrIO)
	}
	return nil
}

// replay is jbd2_do_replay: write each unrevoked, checksum-valid block of a
// descriptor home.
func (r *recovery) replay(d *Descriptor, block *uint32, seq uint32, obuf []byte) error {
	j := r.j
	for _, t := range d.Tags {
		io := *block
		*block = j.wrap(*block + 1)
		if err := j.readLog(io, obuf); err != nil {
			// Recover what we can, report failure at the end.
			r.fatal = err
			continue
		}
		if s, ok := r.revoke[t.Block]; ok && !tidGT(seq, s) && !mutant.IgnoreRevoke {
			r.info.Revoked++
			continue
		}
		if j.f.csumV2or3() {
			c := j.f.TagCsum(seq, obuf)
			if !j.f.csumV3() {
				c &= 0xFFFF
			}
			if c != t.Checksum {
				r.info.BadBlocks = append(r.info.BadBlocks, t.Block)
				r.fatal = errs.Corruptf("journal", uint64(io), -1,
					"invalid checksum recovering data block %d in transaction %d", t.Block, seq)
				continue
			}
		}
		if t.Flags&FlagEscape != 0 {
			be.PutUint32(obuf, Magic)
		}
		if err := j.writeHome(t.Block, obuf); err != nil {
			return err
		}
		r.info.Replayed++
	}
	return nil
}
