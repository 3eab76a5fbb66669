//go:build !ext4io_mutant_nocheckpointflush

package mutant

// NoCheckpointFlush: skip the flush before the checkpoint moves the log tail (off; build with -tags ext4io_mutant_nocheckpointflush to switch it on).
const NoCheckpointFlush = false
