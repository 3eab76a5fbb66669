//go:build ext4io_mutant_nocommitflush

package mutant

// NoCommitFlush: skip the flush before the commit block (on: this is a deliberately broken build).
const NoCommitFlush = true
