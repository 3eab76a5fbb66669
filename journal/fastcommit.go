package journal

import (
	"fmt"

	"github.com/ext4io/ext4io/internal/errs"
)

// Fast commits (JBD2_FEATURE_INCOMPAT_FAST_COMMIT).
//
// With the feature the last s_num_fc_blks blocks of the journal (256 when
// the field is 0, jbd2_journal_get_num_fc_blks) leave the circular log and
// hold ext4's fast commits: the log is [s_first, s_maxlen-s_num_fc_blks),
// and jbd2 places fast commits from j_fc_first = s_maxlen-s_num_fc_blks+1
// up to, not including, j_fc_last = s_maxlen (jbd2_fc_get_buf), so one
// block between the two areas stays unused. The blocks hold ext4 tags, not
// jbd2 blocks; this package only hands them, in order, to the file system
// (Config.FastCommit), which knows their format (layout/fastcommit.go).
//
// Invariants:
//   - FC1: fast commits are replayed only when the log needs recovery
//     (s_start != 0), after every complete transaction of the log is
//     home, and before the journal superblock is emptied, as jbd2's
//     do_one_pass calls fc_do_one_pass at the end of PASS_REPLAY.
//   - FC2: the tid fast commits must carry is the first tid not found
//     complete in the log (info->end_transaction): a full commit of that
//     tid supersedes them, older ones are stale.

// DefaultFastCommitBlocks is JBD2_DEFAULT_FAST_COMMIT_BLOCKS, the size of
// the fast-commit area when s_num_fc_blks is 0.
const DefaultFastCommitBlocks = 256

// MinJournalBlocks is JBD2_MIN_JOURNAL_BLOCKS: jbd2 refuses a log of fewer
// blocks from s_first to its end (beside the fast-commit area, if any).
const MinJournalBlocks = 1024

// FastCommitArea is what Recover hands Config.FastCommit.
type FastCommitArea struct {
	// ExpectedTid is the tid valid fast commits carry (FC2).
	ExpectedTid uint32
	// Blocks are the fast-commit blocks from j_fc_first, in order.
	Blocks [][]byte
}

// FastCommitReplayer applies the valid fast commits of area to the file
// system and returns how many tags it replayed. An error stops recovery
// before the journal superblock is emptied, so the next recovery sees the
// same log again.
type FastCommitReplayer func(area FastCommitArea) (tags int, err error)

// NumFastCommitBlocks mirrors jbd2_journal_get_num_fc_blks: s_num_fc_blks,
// or 256 when it is 0.
func (sb *Superblock) NumFastCommitBlocks() uint32 {
	if sb.NumFCBlocks == 0 {
		return DefaultFastCommitBlocks
	}
	return sb.NumFCBlocks
}

// setFastCommitArea splits the journal into the log and the fast-commit
// area when the fast_commit feature is set, as jbd2's
// journal_load_superblock and e2fsck's e2fsck_journal_load do.
func (j *Journal) setFastCommitArea(sb *Superblock) error {
	_, incompat, _ := sb.features()
	if incompat&FeatureIncompatFastCommit == 0 {
		return nil
	}
	n := sb.NumFastCommitBlocks()
	if n >= sb.MaxLen || sb.MaxLen-n < MinJournalBlocks || sb.MaxLen-n <= sb.First {
		return errs.Corruptf("journal superblock", 0, 0x54, "incorrect fast commit blocks: s_num_fc_blks %d of s_maxlen %d", n, sb.MaxLen)
	}
	if sb.Start != 0 && sb.Start >= sb.MaxLen-n {
		return errs.Corruptf("journal superblock", 0, 0x1C, "s_start %d inside the fast-commit area [%d,%d)", sb.Start, sb.MaxLen-n, sb.MaxLen)
	}
	j.last = sb.MaxLen - n
	j.fcFirst = j.last + 1
	j.fcLast = sb.MaxLen
	return nil
}

// FastCommitBlocks reads the fast-commit area, [j_fc_first, j_fc_last),
// without interpreting it. It returns nil when the journal has no
// fast_commit feature.
func (j *Journal) FastCommitBlocks() ([][]byte, error) {
	if j.fcFirst == 0 {
		return nil, nil
	}
	var out [][]byte
	for b := j.fcFirst; b < j.fcLast; b++ {
		buf := make([]byte, j.bs)
		if err := j.readLog(b, buf); err != nil {
			return out, err
		}
		out = append(out, buf)
	}
	return out, nil
}

// replayFastCommits runs Config.FastCommit over the fast-commit area (FC1).
func (j *Journal) replayFastCommits(info *RecoveryInfo) error {
	if j.fcFirst == 0 || j.fcReplay == nil {
		return nil
	}
	blocks, err := j.FastCommitBlocks()
	if err != nil {
		// jbd2's fc_do_one_pass stops at the first block it cannot read
		// and fails the recovery: replaying the blocks before it and
		// then emptying the log would lose the fast commits after it.
		return fmt.Errorf("journal: fast-commit replay: %w", err)
	}
	n, err := j.fcReplay(FastCommitArea{ExpectedTid: info.EndSeq, Blocks: blocks})
	info.FastCommitTags = n
	if err != nil {
		return fmt.Errorf("journal: fast-commit replay: %w", err)
	}
	return nil
}
