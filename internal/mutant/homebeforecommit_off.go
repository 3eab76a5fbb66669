//go:build !ext4io_mutant_homebeforecommit

package mutant

// HomeBeforeCommit: write a transaction's blocks home before its commit block (off; build with -tags ext4io_mutant_homebeforecommit to switch it on).
const HomeBeforeCommit = false
