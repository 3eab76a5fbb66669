package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/journal"
)

func cmdJournal(args []string, w io.Writer) error {
	args, err := noFlags("journal", args, 1)
	if err != nil {
		return err
	}
	v, err := openImageOpts(args[0], ext4io.Options{NoRecovery: true})
	if err != nil {
		return err
	}
	defer v.Close()
	j, err := v.Journal()
	if err != nil {
		return err
	}
	sb := j.Superblock()
	f := j.Format()
	var feats []string
	for _, x := range []struct {
		bit  uint32
		name string
	}{{journal.FeatureIncompatRevoke, "journal_incompat_revoke"}, {journal.FeatureIncompat64Bit, "journal_64bit"},
		{journal.FeatureIncompatAsyncCommit, "journal_async_commit"}, {journal.FeatureIncompatCsumV2, "journal_checksum_v2"},
		{journal.FeatureIncompatCsumV3, "journal_checksum_v3"}, {journal.FeatureIncompatFastCommit, "journal_fast_commit"}} {
		if f.Incompat&x.bit != 0 {
			feats = append(feats, x.name)
		}
	}
	fmt.Fprintf(w, "Journal features:   %s\n", strings.Join(feats, " "))
	fmt.Fprintf(w, "Journal size:       %d blocks of %d bytes\n", sb.MaxLen, sb.BlockSize)
	fmt.Fprintf(w, "Journal first:      %d\n", sb.First)
	fmt.Fprintf(w, "Journal sequence:   %#08x\n", sb.SeqTail)
	fmt.Fprintf(w, "Journal start:      %d\n", sb.Start)
	if sb.Errno != 0 {
		fmt.Fprintf(w, "Journal errno:      %d\n", sb.Errno)
	}
	if sb.Start == 0 {
		fmt.Fprintln(w, "The journal is empty.")
		return nil
	}
	txns, blocks := 0, 0
	err = j.Scan(func(b journal.LogBlock) error {
		switch b.Type {
		case journal.BlockTypeDescriptor:
			fmt.Fprintf(w, "  block %d: descriptor, transaction %d, %d tags\n", b.Block, b.Sequence, b.Tags)
		case journal.BlockTypeCommit:
			fmt.Fprintf(w, "  block %d: commit, transaction %d\n", b.Block, b.Sequence)
			txns++
		case journal.BlockTypeRevoke:
			fmt.Fprintf(w, "  block %d: revoke, transaction %d, blocks %v\n", b.Block, b.Sequence, b.Revoked)
		default:
			fmt.Fprintf(w, "  block %d: data for fs block %d\n", b.Block, b.Home)
			blocks++
		}
		return nil
	})
	fmt.Fprintf(w, "%d committed transactions, %d journalled blocks\n", txns, blocks)
	return err
}

func cmdRecover(args []string, w io.Writer) error {
	args, err := noFlags("recover", args, 1)
	if err != nil {
		return err
	}
	v, err := openImageOpts(args[0], ext4io.Options{Replay: true})
	if err != nil {
		return err
	}
	info := v.Recovery()
	if err := v.Close(); err != nil {
		return err
	}
	if info == nil {
		fmt.Fprintln(w, "the journal did not need recovery")
		return nil
	}
	fmt.Fprintf(w, "replayed %d transactions (%d..%d): %d blocks written, %d revoked (%d revoke records)\n",
		info.Transactions, info.StartSeq, info.EndSeq, info.Replayed, info.Revoked, info.RevokeRecords)
	if len(info.BadBlocks) > 0 {
		fmt.Fprintf(w, "skipped %d blocks whose journal checksum failed: %v\n", len(info.BadBlocks), info.BadBlocks)
	}
	return nil
}
