package ext4io

import (
	"context"
	"errors"
	"fmt"

	"github.com/ext4io/ext4io/blockdev/overlay"
	"github.com/ext4io/ext4io/internal/errs"
	"github.com/ext4io/ext4io/journal"
	"github.com/ext4io/ext4io/layout"
)

// RecoveryInfo reports a journal replay done by Open.
type RecoveryInfo = journal.RecoveryInfo

// Recovery returns what Open replayed from the journal, or nil if the
// journal did not need recovery.
func (v *Volume) Recovery() *RecoveryInfo { return v.recovered }

// journalConfig returns the jbd2 configuration of the internal journal:
// the journal inode's blocks mapped through its extent tree or block map.
func (v *Volume) journalConfig() (journal.Config, error) {
	sb := v.sb
	if sb.JournalInum == 0 || sb.JournalDev != 0 {
		return journal.Config{}, fmt.Errorf("ext4io: external journal devices are not supported: %w", ErrUnsupported)
	}
	n, err := v.getInode(sb.JournalInum)
	if err != nil {
		return journal.Config{}, fmt.Errorf("ext4io: journal inode %d: %w", sb.JournalInum, err)
	}
	if n.m == nil {
		return journal.Config{}, &errs.CorruptError{What: "journal inode", Ino: sb.JournalInum, Off: -1, Msg: "has no block mapping"}
	}
	blocks := n.in.Size / uint64(v.bs)
	if blocks < 1024 || blocks > 1<<31 {
		return journal.Config{}, &errs.CorruptError{What: "journal inode", Ino: sb.JournalInum, Off: -1, Msg: fmt.Sprintf("size %d bytes", n.in.Size)}
	}
	m := n.m
	return journal.Config{
		Dev:       v.dev,
		BlockSize: v.bs,
		Blocks:    uint32(blocks),
		Map: func(jblk uint32) (uint64, error) {
			bm, err := m.lookup(uint64(jblk))
			if err != nil {
				return 0, err
			}
			if bm.kind != mapWritten {
				return 0, &errs.CorruptError{What: "journal inode", Ino: sb.JournalInum, Off: -1, Msg: fmt.Sprintf("journal block %d is not mapped", jblk)}
			}
			return bm.pblk, nil
		},
		CommitInterval: -1,
	}, nil
}

// recover replays the journal of a volume with needs_recovery set, then
// clears the flag, marks the superblock clean unless a commit failed, and
// recomputes the free counts from the group descriptors, as ext4 does at
// mount. Read-only opens replay into an
// in-memory overlay of the device.
func (v *Volume) recover(ctx context.Context) error {
	if !v.opts.Writable && !v.opts.Replay {
		v.dev = overlay.New(v.dev)
	}
	cfg, err := v.journalConfig()
	if err != nil {
		return err
	}
	cfg.FastCommit = v.replayFastCommits
	j, err := journal.Open(cfg)
	if errors.Is(err, ErrUnsupported) && !v.opts.Writable && !v.opts.Replay {
		return fmt.Errorf("ext4io: the journal needs recovery ext4io cannot do (Options.NoRecovery opens the volume without it): %w", err)
	}
	if err != nil {
		return fmt.Errorf("ext4io: opening the journal: %w", err)
	}
	info, rerr := j.RecoverContext(ctx)
	if cerr := j.Close(); rerr == nil && cerr != nil {
		rerr = cerr
	}
	if rerr != nil {
		return fmt.Errorf("ext4io: journal recovery: %w", rerr)
	}
	v.recovered = &info
	// The replay may have rewritten any metadata: start over from the
	// replayed superblock and descriptors.
	v.inoMu.Lock()
	v.resetInodesLocked()
	v.inoMu.Unlock()
	v.cache.Forget(v.sb.JournalInum)
	buf := make([]byte, layout.SuperblockSize)
	if _, err := readFull(v.dev, buf, layout.SuperblockOffset); err != nil {
		return fmt.Errorf("ext4io: reading the replayed superblock: %w", err)
	}
	sb, err := layout.DecodeSuperblock(buf)
	if err != nil {
		return fmt.Errorf("ext4io: replayed superblock: %w", err)
	}
	v.sb = sb
	if err := v.loadGroups(); err != nil {
		return err
	}
	if err := v.buildZone(); err != nil {
		return err
	}
	var freeBlocks uint64
	var freeInodes uint32
	for _, g := range v.groups {
		freeBlocks += uint64(g.FreeBlocksCount)
		freeInodes += g.FreeInodesCount
	}
	sb.FreeBlocksCount, sb.FreeInodesCount = freeBlocks, freeInodes
	sb.FeatureIncompat &^= layout.IncompatRecover
	if info.FailedCommit != 0 {
		sb.State |= layout.StateErrors
	} else if v.opts.Writable || v.opts.Replay {
		// The replayed image is consistent, as Close leaves it: clean.
		// A writer marked it not clean while in use; a writable open
		// marks it so again. A read-only open's in-memory replay keeps
		// the state the image has.
		sb.State |= layout.StateValid
	}
	v.sbMu.Lock()
	defer v.sbMu.Unlock()
	if err := v.writeSuperDirectLocked(); err != nil {
		return err
	}
	return v.flushDev()
}

// Journal opens the volume's internal jbd2 journal for inspection: its
// Superblock and Scan of the log, as cmd/ext4io's journal command prints
// them. Opening writes nothing; do not start handles or Close it on a
// volume that is in use.
func (v *Volume) Journal() (*journal.Journal, error) {
	if err := v.checkOpen(); err != nil {
		return nil, err
	}
	if !v.sb.HasCompat(layout.CompatHasJournal) {
		return nil, fmt.Errorf("ext4io: the filesystem has no journal: %w", ErrNotFound)
	}
	cfg, err := v.journalConfig()
	if err != nil {
		return nil, err
	}
	return journal.Open(cfg)
}
