package journal

import "fmt"

// LogBlock is one block of the log as Scan walks it, like a line of
// debugfs's logdump.
type LogBlock struct {
	Block    uint32 // journal block number
	Type     uint32 // BlockTypeDescriptor, BlockTypeCommit, BlockTypeRevoke, or 0 for a data block
	Sequence uint32 // transaction id
	Home     uint64 // data blocks: where the block belongs in the file system
	Tags     int    // descriptors: number of tags
	Revoked  []uint64
}

// Scan walks the log from its tail (s_start, s_sequence) in order and calls
// fn for every descriptor, data, revoke and commit block of each
// transaction, stopping where jbd2's scan pass would: at a block without the
// magic or with an unexpected sequence. It only reads. An empty journal
// (s_start == 0) yields nothing. A log that goes on past one pass over the
// journal's blocks (descriptors that loop back onto themselves) is
// corrupt: Scan stops there with an error wrapping ErrCorrupt, having
// called fn at most once per log block.
func (j *Journal) Scan(fn func(LogBlock) error) error {
	sb := j.Superblock()
	if sb.Start == 0 {
		return nil
	}
	buf := make([]byte, j.bs)
	blk, seq := sb.Start, sb.SeqTail
	// visit counts the log blocks Scan reports, and fails once there are
	// more than the log holds.
	logBlocks, seen := j.last-j.first, uint32(0)
	visit := func(lb LogBlock) error {
		if seen >= logBlocks {
			return fmt.Errorf("journal: the log goes on past one pass over its %d blocks at log block %d: %w", logBlocks, lb.Block, ErrCorrupt)
		}
		seen++
		return fn(lb)
	}
	for {
		if err := j.readLog(blk, buf); err != nil {
			return err
		}
		h := decodeHeader(buf)
		if h.Magic != Magic || h.Sequence != seq {
			return nil
		}
		lb := LogBlock{Block: blk, Type: h.BlockType, Sequence: seq}
		switch h.BlockType {
		case BlockTypeDescriptor:
			d, err := DecodeDescriptor(j.f, buf)
			if err != nil {
				return fmt.Errorf("journal: descriptor at log block %d: %w", blk, err)
			}
			lb.Tags = len(d.Tags)
			if err := visit(lb); err != nil {
				return err
			}
			for _, t := range d.Tags {
				blk = j.wrap(blk + 1)
				if err := visit(LogBlock{Block: blk, Sequence: seq, Home: t.Block}); err != nil {
					return err
				}
			}
		case BlockTypeCommit:
			if err := visit(lb); err != nil {
				return err
			}
			seq++
		case BlockTypeRevoke:
			r, err := DecodeRevoke(j.f, buf)
			if err != nil {
				return fmt.Errorf("journal: revoke block at log block %d: %w", blk, err)
			}
			lb.Revoked = r.Blocks
			if err := visit(lb); err != nil {
				return err
			}
		default:
			return nil
		}
		blk = j.wrap(blk + 1)
	}
}
