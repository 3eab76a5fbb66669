//go:build !ext4io_mutant_nocommitflush

package mutant

// NoCommitFlush: skip the flush before the commit block (off; build with -tags ext4io_mutant_nocommitflush to switch it on).
const NoCommitFlush = false
