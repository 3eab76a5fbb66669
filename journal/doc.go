// Package journal is a jbd2-compatible journal: the on-disk format Linux
// and e2fsck use (all fields big-endian), recovery, transactions with group
// commit, revoke and checkpoint. It works on a blockdev.Device plus a map
// from journal block to device block; it knows nothing of ext4 itself.
//
// On-disk format (byte offsets, big-endian):
//
//	every metadata block starts with journal_header_t:
//	  0x00 h_magic 0xC03B3998 | 0x04 h_blocktype | 0x08 h_sequence (tid)
//
//	superblock (journal block 0, blocktype 3 = v1, 4 = v2), 1024 bytes:
//	  0x0C s_blocksize   0x10 s_maxlen     0x14 s_first      0x18 s_sequence
//	  0x1C s_start       0x20 s_errno      0x24 compat       0x28 incompat
//	  0x2C ro_compat     0x30 s_uuid[16]   0x40 s_nr_users   0x44 s_dynsuper
//	  0x48 s_max_transaction  0x4C s_max_trans_data  0x50 s_checksum_type (u8)
//	  0x54 s_num_fc_blks 0x58 s_head  0x5C padding  0xFC s_checksum  0x100 s_users[48*16]
//	  s_checksum = crc32c(~0, superblock with s_checksum = 0)
//
//	descriptor block (type 1): header, then tags, then (csum v2/v3) a 4-byte
//	tail checksum = crc32c(seed, block with tail = 0) at blocksize-4:
//	  tag3 (csum v3, 16 bytes): 0 t_blocknr | 4 t_flags(32) | 8 t_blocknr_high | 12 t_checksum(32)
//	  tag  (otherwise):         0 t_blocknr | 4 t_checksum(16) | 6 t_flags(16) | 8 t_blocknr_high
//	         12 bytes with 64bit, 8 without; csum v2 adds 2 bytes (14 / 10)
//	  a 16-byte UUID follows every tag lacking FlagSameUUID; FlagLastTag ends
//	  the list; FlagEscape: the block began with the magic, stored zeroed.
//	  Each tag is followed in the log, in order, by the block it describes.
//	  tag checksum = crc32c(crc32c(seed, be32(tid)), logged block) (low 16 bits in v2)
//
//	commit block (type 2): 0x0C h_chksum_type(u8) 0x0D h_chksum_size(u8)
//	  0x10 h_chksum[8] (csum v2/v3: [0] = crc32c(seed, block with it zeroed);
//	  compat checksum v1: crc32_be over descriptors and data) 0x30 h_commit_sec(64) 0x38 h_commit_nsec
//
//	revoke block (type 5): 0x0C r_count (bytes used, header included), then
//	  4-byte (8 with 64bit) block numbers from 0x10; tail checksum as descriptors.
//
//	seed = crc32c(~0, s_uuid). The log is the circular area [s_first,
//	s_maxlen); a transaction is [revoke blocks][descriptor, data...]...[commit]
//	and may wrap. With fast_commit (incompat 0x20) the log ends at
//	s_maxlen - s_num_fc_blks (256 when 0) and ext4's fast commits use
//	[s_maxlen - s_num_fc_blks + 1, s_maxlen): see FastCommitArea.
//
// Invariants:
//   - A transaction is durable exactly when its commit block is: the commit
//     block is written after a flush of everything before it, then flushed.
//   - Log space is reused only after the on-disk s_start has moved past it
//     (home writes flushed first, then the superblock written with FUA).
//   - s_start == 0 if and only if the log holds nothing to replay.
//   - Home locations hold committed contents only; until a transaction is
//     checkpointed its blocks are read through Journal.Lookup.
//
// Journal.Scan lists the log as debugfs's logdump does: every descriptor,
// data, revoke and commit block from the tail, one LogBlock each, stopping
// where recovery's scan would; it only reads (the ext4io command's
// "journal" subcommand prints it).
//
// Fast commits are replayed by the file system through Config.FastCommit
// (see FastCommitArea). The file system builds them; WriteFastCommitBlocks
// places them in the area and FlushFastCommit makes them durable, one
// flush serving as one fast commit's flush after its blocks and the
// next one's before them (WriteFastCommit does flush, write, flush;
// fcwrite.go). External
// journals (on a device of their own) are not tested.
package journal
