//go:build ext4io_mutant_nocheckpointflush

package mutant

// NoCheckpointFlush: skip the flush before the checkpoint moves the log tail (on: this is a deliberately broken build).
const NoCheckpointFlush = true
